// ScalecommBackend: group-level operations (monitored barrier, coalescing, split_group).
#include <c10/util/Exception.h>

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
  call.name = "monitored_barrier";
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
  batchParts_.clear();
  auto work = c10::make_intrusive<ScalecommWork>(getRank(), c10d::OpType::COALESCED, "batch_isend_irecv", 0, tensors,
                                                 group_->state());
  // A batch may involve only some ranks, so it takes no group sequence number
  // (that would desynchronise later collectives): its Work shows the first
  // message's per-pair number, and every message carries its own.
  Call call;
  call.name = "batch_isend_irecv";
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

}  // namespace scalecomm
