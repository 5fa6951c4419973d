// The Group's coalescing (batch_isend_irecv; group/group.h startCoalescing,
// endCoalescing): parts numbered as they come, run as one batch.
#include <algorithm>

#include "core/error.h"
#include "group/group.h"

namespace scalecomm {

namespace {

// A device batch's parts, ordered with the caller's work as one call: every
// part's inputs before the batch, every part's "done" behind it.
class BatchSync final : public DeviceSync {
 public:
  explicit BatchSync(std::vector<std::shared_ptr<DeviceSync>> parts) : parts_(std::move(parts)) {}
  void begin(void* stream) override {
    for (const auto& p : parts_) p->begin(stream);
  }
  void* end(void* stream) override {
    void* last = nullptr;
    for (auto it = parts_.rbegin(); it != parts_.rend(); ++it) last = (*it)->end(stream);
    return last;
  }
  bool capturing() const override {
    return std::any_of(parts_.begin(), parts_.end(), [](const auto& p) { return p->capturing(); });
  }

 private:
  std::vector<std::shared_ptr<DeviceSync>> parts_;
};

}  // namespace

void Group::abandonBatch(const std::string& why) {
  // torch's coalescing manager does not end a block that raised: leave the
  // block here, give the parts' numbers back (nothing was sent) and fail them.
  coalescing_ = false;
  std::vector<std::pair<Call, uint64_t>> parts = std::move(pending_);
  pending_.clear();
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    --(it->first.kind == CallKind::Send ? sentTo_ : receivedLabel_)[it->first.peer];
  }
  const Error error(ErrorKind::InvalidArgument, strCat(why, " (the batch was abandoned: none of it was sent)"));
  for (auto& [p, n] : parts)
    if (p.done) p.done(&error);
  throw error;
}

void Group::startCoalescing() {
  if (coalescing_) fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank_, "): startCoalescing called twice");
  coalescing_ = true;
  pending_.clear();
}

uint64_t Group::endCoalescing(Call call) {
  if (!coalescing_)
    fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank_, "): endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<std::pair<Call, uint64_t>> parts = std::move(pending_);
  pending_.clear();
  if (parts.empty()) {
    if (call.done) call.done(nullptr);
    return 0;
  }
  checkUsable(call.name);
  call.kind = CallKind::SendRecvBatch;
  call.batch.clear();
  std::vector<std::function<void(const Error*)>> partDone;
  std::vector<std::function<void()>> befores, afters;
  std::vector<std::shared_ptr<DeviceSync>> syncs;
  for (auto& [p, pairSeq] : parts) {
    const bool send = p.kind == CallKind::Send;
    // Receives are numbered by the executing thread (a receive from any source may come between).
    call.batch.push_back({send, p.data, p.count, p.dtype, p.peer, p.tag, send ? pairSeq : 0});
    call.bytes += p.bytes;
    call.device = call.device || p.device;
    partDone.push_back(std::move(p.done));
    if (p.before) befores.push_back(std::move(p.before));
    if (p.after) afters.push_back(std::move(p.after));
    if (p.deviceSync) syncs.push_back(std::move(p.deviceSync));
  }
  if (!befores.empty()) {
    call.before = [befores = std::move(befores)] {
      for (const auto& b : befores) b();
    };
  }
  if (!afters.empty()) {
    call.after = [afters = std::move(afters)] {
      for (const auto& a : afters) a();
    };
  }
  call.deviceIndex = parts.front().first.deviceIndex;
  if (call.deviceIndex >= 0) call.deviceSync = std::make_shared<BatchSync>(std::move(syncs));
  const uint64_t number = parts.front().second;
  call.done = [partDone = std::move(partDone), done = std::move(call.done)](const Error* e) {
    for (const auto& d : partDone)
      if (d) d(e);
    if (done) done(e);
  };
  dispatch(std::move(call), number);
  return number;
}

}  // namespace scalecomm
