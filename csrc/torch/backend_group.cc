// ScalecommBackend: group-level operations (monitored barrier, coalescing, split_group, shrink_group).
#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

#include "algo/collectives.h"
#include "core/error.h"
#include "torch/backend.h"
#include "torch/gil.h"

namespace scalecomm {

void ScalecommBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const int n = getSize(), rank = getRank();
  if (rank == 0 && opts.timeout.count() == 0 && n > 1) {
    C10_THROW_ERROR(DistBackendError,
                    "scalecomm monitored_barrier: Rank 0 timed out in monitoredBarrier after 0 ms "
                    "(timeout=0 leaves no time to hear from the other ranks)");
  }
  Call call;
  call.kind = CallKind::MonitoredBarrier;
  call.name = SC_LABEL("monitored_barrier");
  call.waitAllRanks = waitAllRanks;
  call.timeoutMs = opts.timeout.count();
  auto work = run(c10d::OpType::BARRIER, {}, std::move(call));
  ReleaseGilIfHeld noGil;
  work->wait();
}

void ScalecommBackend::startCoalescing() {
  try {
    group_->startCoalescing();
  } catch (const Error& e) {
    TORCH_CHECK(false, e.what());
  }
  batchParts_.clear();
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::endCoalescing() {
  std::vector<at::Tensor> tensors;
  for (const auto& w : batchParts_) {
    for (const auto& t : w->result()) tensors.push_back(t);
  }
  auto work = c10::make_intrusive<ScalecommWork>(getRank(), c10d::OpType::COALESCED, "batch_isend_irecv", 0, tensors,
                                                 group_->state());
  // On a device, the first part's "done" is recorded behind the whole batch
  // (the parts end in reverse order): wait() orders the caller's stream after it.
  if (!batchParts_.empty() && batchParts_.front()->deviceCall()) work->setDeviceCall(batchParts_.front()->deviceCall());
  batchParts_.clear();
  // A batch may involve only some ranks, so it takes no group sequence number
  // (that would desynchronise later collectives): its Work shows the first
  // message's per-pair number, and every message carries its own.
  Call call;
  call.name = SC_LABEL("batch_isend_irecv");
  call.done = [work](const Error* e) {
    if (e == nullptr) {
      work->finish();
    } else {
      work->finishError(std::make_exception_ptr(
          c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, e->what())));
    }
  };
  try {
    work->setSequence(group_->endCoalescing(std::move(call)));
  } catch (const Error& e) {
    TORCH_CHECK(false, e.what());
  }
  return work;
}

c10::intrusive_ptr<c10d::Backend::Options> ScalecommBackend::getBackendOptions() {
  auto o = c10::make_intrusive<c10d::Backend::Options>("scalecomm", std::chrono::milliseconds(config().timeoutMs));
  o->group_name = config().groupName;
  return o;
}

c10::intrusive_ptr<c10d::Backend> ScalecommBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  if (group_->poisoned() || group_->isShutDown()) {
    C10_THROW_ERROR(DistBackendError, strCat("scalecomm split_group (rank ", getRank(), "): the group is unusable"));
  }
  const auto it = std::find(ranks.begin(), ranks.end(), getRank());
  if (it == ranks.end()) return nullptr;
  BackendConfig child = config();
  if (opts) {
    if (!opts->group_name.empty()) child.groupName = opts->group_name;
    if (opts->timeout.count() > 0) child.timeoutMs = opts->timeout.count();
  }
  ReleaseGilIfHeld noGil;
  return c10::make_intrusive<ScalecommBackend>(store, static_cast<int>(it - ranks.begin()),
                                               static_cast<int>(ranks.size()), child);
}

c10::intrusive_ptr<c10d::Backend> ScalecommBackend::shrink(const std::vector<int64_t>& excluded, int flags,
                                                           const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const int n = getSize(), rank = getRank();
  std::vector<bool> out(n, false);
  for (int64_t r : excluded) {
    TORCH_CHECK_VALUE(r >= 0 && r < n, "scalecomm shrink_group (rank ", rank, "): rank ", r,
                      " to exclude is not in this group (0..", n - 1, ")");
    TORCH_CHECK_VALUE(r != rank, "scalecomm shrink_group (rank ", rank,
                      "): this rank is in ranks_to_exclude; only the remaining ranks call shrink_group");
    out[r] = true;
  }
  std::vector<int> survivors;
  std::string tag = "shrink";
  for (int r = 0; r < n; ++r) {
    if (out[r]) {
      tag += strCat("-", r);
    } else {
      survivors.push_back(r);
    }
  }
  TORCH_CHECK_VALUE(survivors.size() < static_cast<size_t>(n), "scalecomm shrink_group (rank ", rank,
                    "): ranks_to_exclude is empty");
  if (flags & 1) abort();  // SHRINK_ABORT: end calls that still wait for the excluded ranks
  BackendConfig child = config();
  child.groupName = config().groupName + "-" + tag;
  if (opts && opts->timeout.count() > 0) child.timeoutMs = opts->timeout.count();
  const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank) - survivors.begin());
  // The survivors meet under a prefix named by who was excluded: keys of this
  // group's own rendezvous (and of a shrink excluding others) cannot collide.
  auto store = c10::make_intrusive<c10d::PrefixStore>(tag, store_);
  ReleaseGilIfHeld noGil;
  return c10::make_intrusive<ScalecommBackend>(store, newRank, static_cast<int>(survivors.size()), child);
}

c10d::ErrorType ScalecommBackend::getError() {
  if (!group_->poisoned()) return c10d::ErrorType::SUCCESS;
  switch (group_->state()->kind()) {
    case ErrorKind::Timeout: return c10d::ErrorType::TIMEOUT;
    case ErrorKind::Io: return c10d::ErrorType::REMOTE_ERROR;  // a peer died, closed or reset its link
    default: return c10d::ErrorType::COMM_ERROR;
  }
}

}  // namespace scalecomm
