// ScalecommBackend: group-level operations (monitored barrier, split_group).
#include <c10/util/Exception.h>

#include <algorithm>

#include "algo/collectives.h"
#include "core/error.h"
#include "torch/backend.h"
#include "torch/gil.h"

namespace scalecomm {

namespace {

constexpr int kMonitoredBarrierTag = -0x4d42;  // "MB"; user tags are not negative in practice

// The body run on the worker. Messages follow gloo's wording ("Rank 1 failed
// to pass monitoredBarrier"), which users and PyTorch's tests search for.
void runMonitoredBarrier(Communicator& comm, bool waitAllRanks, std::vector<uint64_t>& received,
                         const std::vector<uint64_t>& outSeq, const CollectiveOptions& base) {
  const int n = comm.size(), rank = comm.rank();
  uint8_t token = 1;
  auto withSeq = [&](uint64_t seq) {
    CollectiveOptions o = base;
    o.seq = seq;
    // A rank heard after the deadline is still heard if its message is
    // already here: give each later receive a short grace period.
    if (o.deadline.remainingMs() <= 0) o.deadline = Deadline::after(std::chrono::milliseconds(100));
    return o;
  };
  if (rank != 0) {
    try {
      sendTo(comm, &token, 1, DataType::UInt8, 0, kMonitoredBarrierTag, withSeq(outSeq[0]));
      recvFrom(comm, &token, 1, DataType::UInt8, 0, kMonitoredBarrierTag, withSeq(++received[0]));
    } catch (const Error& e) {
      fail(e.kind(), "scalecomm monitored_barrier: Rank ", rank,
           " successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0 "
           "(rank 0 reports which ranks did not arrive): ",
           e.what());
    }
    return;
  }
  std::string missing;
  int count = 0;
  for (int r = 1; r < n; ++r) {
    try {
      recvFrom(comm, &token, 1, DataType::UInt8, r, kMonitoredBarrierTag, withSeq(++received[r]));
    } catch (const Error&) {
      missing += strCat(missing.empty() ? "" : ", ", r);
      ++count;
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    fail(ErrorKind::Timeout, "scalecomm monitored_barrier (rank 0): ", count == 1 ? "Rank " : "Ranks ", missing,
         " failed to pass monitoredBarrier in ", base.timeoutMs, " ms",
         waitAllRanks ? "" : " (the first one missing; wait_all_ranks=True lists all)",
         ". Check those ranks for a hang, a crash or a different code path.");
  }
  for (int r = 1; r < n; ++r) sendTo(comm, &token, 1, DataType::UInt8, r, kMonitoredBarrierTag, withSeq(outSeq[r]));
}

}  // namespace

void ScalecommBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  checkUsable("monitored_barrier");
  const int n = getSize(), rank = getRank();
  if (rank == 0 && opts.timeout.count() == 0 && n > 1) {
    C10_THROW_ERROR(DistBackendError,
                    "scalecomm monitored_barrier: Rank 0 timed out in monitoredBarrier after 0 ms "
                    "(timeout=0 leaves no time to hear from the other ranks)");
  }
  // Per-pair message numbers, taken on the caller's thread like send/recv.
  // Sends are numbered here; receives on the worker (WorkerReceives).
  std::vector<uint64_t> outSeq(n, 0);
  for (int r = 0; r < n; ++r) {
    if (r == rank || (rank != 0 && r != 0)) continue;
    outSeq[r] = ++sentTo_[r];
  }
  Communicator* comm = comm_.get();
  auto received = received_;
  auto work = enqueue(c10d::OpType::BARRIER, "monitored_barrier", {}, opts.timeout,
                      [comm, waitAllRanks, received, outSeq](const CollectiveOptions& base) {
                        runMonitoredBarrier(*comm, waitAllRanks, received->count, outSeq, base);
                      });
  ReleaseGilIfHeld noGil;
  work->wait();
}

void ScalecommBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "scalecomm (rank ", getRank(), "): startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  pending_.clear();
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "scalecomm (rank ", getRank(), "): endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<PendingP2P> batch = std::move(pending_);
  pending_.clear();
  std::vector<PointToPointOp> ops;
  std::vector<at::Tensor> tensors;
  std::vector<c10::intrusive_ptr<ScalecommWork>> parts;
  for (auto& p : batch) {
    ops.push_back(p.op);
    tensors.push_back(p.tensor);
    parts.push_back(p.work);
  }
  if (ops.empty()) {
    auto done = c10::make_intrusive<ScalecommWork>(getRank(), c10d::OpType::COALESCED, "batch_isend_irecv", seq_.load(),
                                                   std::vector<at::Tensor>{}, state_);
    done->finish();
    return done;
  }
  Communicator* comm = comm_.get();
  // A batch may involve only some ranks, so it must not take a group sequence
  // number (that would desynchronise later collectives): its Work shows the
  // first message's per-pair number, and every message carries its own.
  return enqueue(c10d::OpType::COALESCED, "batch_isend_irecv", tensors, std::chrono::milliseconds(0),
                 [comm, ops, tensors, received = received_](const CollectiveOptions& o) mutable {
                   for (PointToPointOp& op : ops) {
                     if (!op.send) op.pairSeq = ++received->count[op.peer];
                   }
                   pointToPointBatch(*comm, ops, o);
                 },
                 {.p2pSeq = ops.front().pairSeq, .alsoFinish = std::move(parts)});
}

c10::intrusive_ptr<c10d::Backend::Options> ScalecommBackend::getBackendOptions() {
  auto o = c10::make_intrusive<c10d::Backend::Options>("scalecomm", std::chrono::milliseconds(config_.timeoutMs));
  o->group_name = config_.groupName;
  return o;
}

c10::intrusive_ptr<c10d::Backend> ScalecommBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                          const std::vector<int>& ranks,
                                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  checkUsable("split_group");
  const auto it = std::find(ranks.begin(), ranks.end(), getRank());
  if (it == ranks.end()) return nullptr;
  BackendConfig child = config_;
  if (opts) {
    if (!opts->group_name.empty()) child.groupName = opts->group_name;
    if (opts->timeout.count() > 0) child.timeoutMs = opts->timeout.count();
  }
  ReleaseGilIfHeld noGil;
  return c10::make_intrusive<ScalecommBackend>(store, static_cast<int>(it - ranks.begin()),
                                               static_cast<int>(ranks.size()), child);
}

}  // namespace scalecomm
