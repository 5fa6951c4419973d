// scalecomm torch adapter: the c10d::Backend that torch.distributed drives.
//
// Contract:
// - Construction runs the rendezvous (through the c10d Store torch hands us)
//   and connects every peer; it raises if peers do not arrive before the timeout.
// - Every collective validates its arguments on the calling thread and raises
//   ValueError before any communication (the group stays usable); otherwise it
//   takes the next sequence number, queues the collective on the group's worker
//   thread and returns a Work at once (issue order = execution order).
// - A failure inside a collective (peer died, mismatch, timeout) poisons the
//   group: that Work fails with DistBackendError naming collective, rank and
//   seq, and every later call raises until the group is destroyed. abort()
//   from any thread poisons, closes every link and wakes every waiter.
// - CPU and CUDA tensors (torch/device_call.h). CPU tensors must stay alive
//   and untouched until the Work completes (as with gloo). CUDA tensors follow
//   PyTorch's stream semantics: the collective runs after the work queued on
//   the caller's current stream, and Work.wait() orders the current stream
//   after it. Allreduce of CUDA tensors runs scalecomm's schedules over NCCL
//   send/recv (or NCCL's own allreduce, algorithm "nccl") when the build has
//   NCCL; everything else is staged through pinned host memory over the CPU
//   transports (SCALECOMM_CUDA_TRANSPORT=host stages allreduce too).
// Thread safety: collectives may be called from any one thread at a time (as
// c10d does); abort()/Work methods from any thread.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/selection.h"
#include "comm/communicator.h"
#include "comm/worker.h"
#include "torch/compression_store.h"
#include "torch/device_call.h"
#include "torch/group_state.h"
#include "torch/nccl_groups.h"
#include "torch/timeline_record.h"
#include "torch/work.h"

namespace scalecomm {

struct BackendConfig {
  std::string algorithm = "auto";  // selection spec, see algo/selection.h
  int64_t psServers = 1;
  std::string tuningFile;
  std::string transport = "auto";  // auto | shm | tcp | mpi
  bool useMpi = true;              // SCALECOMM_MPI != 0: an MPI communicator when all ranks run under MPI
  int64_t segmentBytes = 256 << 10;
  int64_t sendAheadBytes = -1;  // pacing (algo/plan.h); -1: automatic, 0: off
  int64_t shmRingBytes = 4 << 20;
  int64_t mpiChunkBytes = 1 << 20;
  int64_t spinMicros = 50;
  int64_t timeoutMs = 1800000;
  std::string cudaTransport = "auto";  // auto (NCCL for allreduce when built with it) | host
  std::string compression;             // group default for allreduce of floating tensors ("" none)
  std::string groupName;
};

struct ReductionArgs;  // torch/validate.h

// How enqueue() runs a body; every field optional.
struct Queued {
  std::string algorithm;             // the body's CollectiveOptions::algorithm (empty: not used)
  std::shared_ptr<HostStage> stage;  // CUDA tensors: copied down before the body, up after it
  uint64_t p2pSeq = 0;               // point-to-point: the per-pair number (> 0) instead of the group's
  std::vector<c10::intrusive_ptr<ScalecommWork>> alsoFinish;  // completed with this Work (a batch's parts)
};

// Defaults overridden by SCALECOMM_* environment variables.
BackendConfig configFromEnvironment();

class ScalecommBackend : public c10d::Backend {
 public:
  ScalecommBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, BackendConfig config);
  ~ScalecommBackend() override;

  const std::string getBackendName() const override { return "scalecomm"; }
  const BackendConfig& config() const { return config_; }
  const CostParams& costParams() const { return costs_; }

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

  // Coalescing (batch_isend_irecv): sends and receives issued between start
  // and end run as one batch that progresses all of them together; other
  // collectives inside raise. endCoalescing returns the batch's Work.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Point-to-point, in order per pair of ranks; tags must match in that order.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  // Not implemented yet: raise NotImplementedError naming the call.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;

  // Allreduce (sum, or mean with `average`) of a floating tensor through a
  // codec (compress/codec.h), with error feedback per `key` (errorFeedback:
  // -1 the codec's default, 0 off, 1 on). Validates like allreduce.
  c10::intrusive_ptr<c10d::Work> allreduceCompressed(const at::Tensor& t, const std::string& spec,
                                                     const std::string& key, int errorFeedback, bool average,
                                                     std::chrono::milliseconds timeout);
  CompressionStore& compressionState() { return *compression_; }

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  void abort() override;
  void shutdown() override;
  // Interpreter exit (pyscalecomm registers it with atexit): shuts down every
  // live group while Python can still free what their workers hold (the last
  // reference to a Work and its tensors may sit on a worker); collectives
  // still queued or running get 2 s to finish (peers may be joining them),
  // then their group is aborted, so exit never waits for their timeouts.
  static void shutdownAllAtExit();
  bool poisoned() const { return state_->poisoned(); }
  std::map<std::string, GroupState::OpStats> stats() const { return state_->stats(); }

 private:
  using Body = std::function<void(const CollectiveOptions&)>;
  // Queues `body` on the worker. Collectives take the group's next sequence
  // number; point-to-point ops pass q.p2pSeq and leave the group's untouched
  // (only two ranks take part). `outputs` are the caller's tensors (the
  // Future's value).
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* collective, std::vector<at::Tensor> outputs,
                                         std::chrono::milliseconds opTimeout, Body body, Queued q = {});
  // The host stage for a collective's tensors (inactive when all are on the CPU).
  std::shared_ptr<HostStage> stageFor(const char* collective, const std::vector<at::Tensor>& tensors) {
    return HostStage::forCall(DeviceCall::begin(tensors, collective, getRank()));
  }
  bool ncclAllreduce(const std::shared_ptr<DeviceCall>& call) const {
    return call && config_.cudaTransport != "host" && NcclGroups::available();
  }
  void checkUsable(const char* collective);
  c10::intrusive_ptr<c10d::Work> allreduceOnNccl(const at::Tensor& t, const ReductionArgs& r,
                                                 const std::shared_ptr<DeviceCall>& call,
                                                 const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> pointToPoint(bool sending, std::vector<at::Tensor>& tensors, int peer, int tag);

  BackendConfig config_;
  // A collective's profiler title: "allgather", or "allgather:mpi" for the passthrough.
  static std::string titled(const char* collective, const std::string& algo) {
    return algo == "mpi" ? std::string(collective) + ":mpi" : std::string(collective);
  }
  std::string allreduceAlgorithmFor(int64_t bytes);  // config or, for "auto", the tuning table's or model's pick
  std::string rootedAlgorithmFor(const std::string& configured, int64_t bytes);  // broadcast, reduce
  AlgorithmSelection selection_;
  TuningTable tuning_;
  CostParams costs_;  // measured at creation (or from the tuning file) when anything is "auto"
  std::mutex chooseMu_;
  std::unordered_map<int64_t, std::string> chosen_;  // auto's decisions by message size
  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<NcclGroups> nccl_;  // CUDA allreduce; communicators made on first use
  std::shared_ptr<CompressionStore> compression_ = std::make_shared<CompressionStore>();
  std::shared_ptr<GroupState> state_;
  std::unique_ptr<Worker> worker_;
  std::atomic<uint64_t> seq_{0};
  std::vector<uint64_t> sentTo_, receivedFrom_;  // point-to-point messages per peer (caller thread)
  // Messages received per peer, counted on the worker as receives run: the
  // authoritative numbering (a receive from any source learns its peer only
  // then). receivedFrom_ above only labels Works.
  struct WorkerReceives {
    std::vector<uint64_t> count;
    int nextAnySource = 0;
  };
  std::shared_ptr<WorkerReceives> received_;
  struct PendingP2P {
    PointToPointOp op;
    at::Tensor tensor;
    c10::intrusive_ptr<ScalecommWork> work;
  };
  std::shared_ptr<const TimelineRow> timelineRow_;  // null unless SCALECOMM_TIMELINE is set
  bool coalescing_ = false;                         // caller thread
  std::vector<PendingP2P> pending_;
  std::atomic<bool> shutDown_{false};
};

}  // namespace scalecomm
