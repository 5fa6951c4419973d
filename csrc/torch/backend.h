// scalecomm torch adapter: the c10d::Backend that torch.distributed drives.
//
// Contract: adapts c10d's calls to the torch-free Group (group/group.h), which
// owns numbering, selection, ordering, poison, caching and the lifecycle.
// Each collective: validate its arguments on the calling thread (ValueError
// before any communication; the group stays usable) -> buffer views (or host
// staging for CUDA tensors, torch/device_call.h) -> one Call -> a Work that
// the Group completes. Synchronous calls (c10d's asyncOp false) may run on
// the caller's thread and return a completed Work. A failure inside a
// collective poisons the group: that Work fails with DistBackendError
// naming collective, rank and seq, and every later call raises until the
// group is destroyed. abort() from any thread poisons, closes every link and
// wakes every waiter.
// CPU tensors must stay alive and untouched until the Work completes (as with
// gloo); non-contiguous ones are copied into a contiguous buffer when the
// call runs and back after it (slower, as with gloo). CUDA tensors
// follow PyTorch's stream semantics: the collective runs after the work
// queued on the caller's current stream, and Work.wait() orders the current
// stream after it. Allreduce of CUDA tensors runs scalecomm's schedules over
// NCCL send/recv (or NCCL's own allreduce, algorithm "nccl") when the build
// has NCCL; everything else is staged through pinned host memory.
// Thread safety: collectives from one thread at a time (as c10d does);
// abort()/Work methods from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "group/group.h"
#include "torch/compression_store.h"
#include "torch/device_call.h"
#include "torch/nccl_groups.h"
#include "torch/work.h"

namespace scalecomm {

using BackendConfig = GroupConfig;

// A Call of `kind` named `name` with c10d's per-call timeout and whether the
// caller waits right away (asyncOp false: it may run on the caller's thread).
template <typename Opts>
Call callFor(CallKind kind, Label name, const Opts& opts) {
  Call call;
  call.kind = kind;
  call.name = name;
  call.timeoutMs = opts.timeout.count();
  call.blocking = !opts.asyncOp;
  return call;
}
struct ReductionArgs;  // torch/validate.h

class ScalecommBackend : public c10d::Backend {
 public:
  ScalecommBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, BackendConfig config);
  ~ScalecommBackend() override;

  const std::string getBackendName() const override { return "scalecomm"; }
  const GroupConfig& config() const { return group_->config(); }
  const CostParams& costParams() const { return group_->selector().costParams(); }
  Group& group() { return *group_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  // One allgather per input (outputs[i]: one tensor per rank), in issue
  // order; the returned Work completes with the last.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;

  // Rank 0 hears from every rank, then releases them; a rank that does not
  // arrive within the timeout is named in the error on rank 0 (all of them
  // with waitAllRanks), and the others then time out waiting for rank 0.
  // Blocking, like gloo's. Uses the point-to-point channels.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // split_group: a new scalecomm group over `ranks` (ranks of this group),
  // with this group's settings and a fresh rendezvous under `store`.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  // shrink_group: a new scalecomm group of this group's ranks less
  // `excluded` (e.g. ranks that died), rendezvousing under this group's store;
  // every surviving rank calls it with the same list. SHRINK_ABORT (flag 1)
  // first aborts this group, ending calls that still wait for the excluded.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& excluded, int flags,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  // SUCCESS, or why the group became unusable: TIMEOUT, REMOTE_ERROR (a peer
  // died, left or aborted), COMM_ERROR (anything else).
  c10d::ErrorType getError() override;

  // Coalescing (batch_isend_irecv): sends and receives issued between start
  // and end run as one batch that progresses all of them together; other
  // collectives inside raise. endCoalescing returns the batch's Work.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Point-to-point, in order per pair of ranks; tags must match in that order.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  // Receive from any source: Work.source_rank() names the sender.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  // Raises NotImplementedError naming the call.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;

  // Allreduce (sum, or mean with `average`) of a floating tensor through a
  // codec (compress/codec.h), with error feedback per `key` (errorFeedback:
  // -1 the codec's default, 0 off, 1 on); an empty key: per the tensor's
  // memory, for as long as its storage lives (CompressionStore::slotOwnedBy).
  // `shapes`: the shapes of the weights t holds, in order (a DDP bucket's),
  // which PowerSGD factors one by one (1-D ones summed exactly); empty: t's
  // own shape. `blocking`: the caller waits on the Work at once, so a CPU
  // tensor's call may run on its thread when the group is idle (as a
  // synchronous allreduce does). Validates like allreduce.
  c10::intrusive_ptr<c10d::Work> allreduceCompressed(const at::Tensor& t, const std::string& spec,
                                                     const std::string& key, int errorFeedback, bool average,
                                                     std::chrono::milliseconds timeout,
                                                     const std::vector<std::vector<int64_t>>& shapes = {},
                                                     bool blocking = false);
  CompressionStore& compressionState() { return *compression_; }

  // The direct API's allreduce (pyscalecomm.allreduce on a host array):
  // `count` elements of `dtype` at `data`, in place, synchronously, without
  // a Work or torch's dispatch; on the calling thread when the group is idle,
  // else after the calls queued before it. Returns false, having
  // communicated nothing, where the general path must run it (the group's
  // default codec applies). Raises ValueError for an op the dtype does not
  // support, DistBackendError as a failed Work would.
  bool allreduceHost(void* data, int64_t count, DataType dtype, ReduceOp op);

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return group_->lastSeq(); }
  void abort() override;
  void shutdown() override;
  // Interpreter exit (pyscalecomm registers it with atexit): shuts down every
  // live group while Python can still free what their workers hold (the last
  // reference to a Work and its tensors may sit on a worker); collectives
  // still queued or running get 2 s to finish (peers may be joining them),
  // then their group is aborted, so exit never waits for their timeouts.
  static void shutdownAllAtExit();
  bool poisoned() const { return group_->poisoned(); }
  // Why the group is poisoned (its first failure, or the abort's reason); empty while it is not.
  std::string failure() const { return group_->poisoned() ? group_->state()->reason() : std::string(); }
  std::map<std::string, GroupState::OpStats> stats() const { return group_->stats(); }
  std::vector<OpBucketStats> bucketStats() const { return group_->bucketStats(); }

 private:
  // Runs `call` through the Group and returns its Work (outputs: the
  // caller's tensors, the Future's value). `stage` (CUDA tensors) copies down
  // before the call and up after it; `device` makes the Work's wait() order
  // the current stream after the collective.
  // call.name is the Work's profiling title.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, std::vector<at::Tensor> outputs, Call&& call,
                                     const std::shared_ptr<HostStage>& stage = nullptr,
                                     const std::shared_ptr<DeviceCall>& device = nullptr);
  // The stage for a collective's tensors (inactive when all are on the CPU):
  // CUDA tensors stay on the device and the call runs on the device's NCCL
  // channel when the build has NCCL, SCALECOMM_CUDA_TRANSPORT is not host and
  // `onDevice` (the collective has a device form); otherwise they are staged
  // through pinned host memory.
  std::shared_ptr<HostStage> stageFor(const char* collective, c10::ArrayRef<at::Tensor> tensors, bool onDevice = true) {
    auto device = DeviceCall::begin(tensors, collective, getRank());
    const bool direct = onDevice && device && config().cudaTransport != "host" && NcclGroups::available();
    TORCH_CHECK(
        !device || direct || !device->capturing(), "scalecomm ", collective, " (rank ", getRank(),
        "): called during CUDA graph capture, but this call would stage its tensors through host memory "
        "(no NCCL in this build, SCALECOMM_CUDA_TRANSPORT=host, compression, a deterministic group's reduction, or a "
        "receive from any source), "
        "which a graph cannot record; capture only calls that run on the NCCL channel");
    return HostStage::forCall(std::move(device), tensors, direct, collective, getRank());
  }
  // Whether the group's default codec takes this allreduce: floating SUM/AVG
  // of at least compressionMinBytes, where a codec is set.
  bool defaultCodecApplies(DataType dtype, ReduceOp op, int64_t bytes) const {
    return !config().compression.empty() && isFloating(dtype) && (op == ReduceOp::Sum || op == ReduceOp::Avg) &&
           bytes >= config().compressionMinBytes;
  }
  // Whether reductions of CUDA tensors may run on the device: not in a
  // deterministic group, whose ordered fold runs on host memory.
  bool reducesOnDevice() const { return config().deterministic == 0; }
  c10::intrusive_ptr<c10d::Work> pointToPoint(bool sending, std::vector<at::Tensor>& tensors, int peer, int tag);
  // A Call of `kind` with the group's algorithm for `bytes` and its title
  // (the group's prepared call site).
  template <typename Opts>
  Call preparedCall(CallKind kind, const char* collective, int64_t bytes, const Opts& opts) {
    const Group::Prepared& site = group_->prepare(kind, collective, bytes);
    Call call = callFor(kind, site.title, opts);
    call.algorithm = site.algorithm;
    return call;
  }

  c10::intrusive_ptr<c10d::Store> store_;  // this group's (torch's prefix store): shrink rendezvous under it
  std::shared_ptr<Group> group_;
  std::shared_ptr<NcclGroups> nccl_;                           // CUDA allreduce; communicators made on first use
  std::unique_ptr<CompressionStore> compression_;              // over the group's states
  std::atomic<bool> compressionAnnounced_{false};              // the group default codec's one warning
  std::vector<c10::intrusive_ptr<ScalecommWork>> batchParts_;  // Works of the batch being coalesced
};

}  // namespace scalecomm
