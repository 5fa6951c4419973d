// scalecomm comm: queued channels emulated on the CPU, so that the code a GPU
// runs (the executor over a queued channel, every schedule, the native
// collective dispatch) runs in the C++ tests of a machine without one.
//
// Contract: a QueueFabric joins n ranks; channel(r) is rank r's
// EmulatedQueuedChannel. Each rank has one queue (its "stream"): a thread that
// runs what the rank issued, in issue order, after the issuing call returned,
// as a GPU runs kernels. So a host that reads or writes a buffer before the
// queue got to it sees the wrong bytes, as it would on a GPU. A group of
// sends and receives is a rendezvous with the peers' queues, with NCCL's
// strictest semantics: a send completes only when the peer's queue is
// running a group that holds the matching receive (per ordered pair of ranks,
// in order), and a group completes when all its messages have. So a set of
// plans that would deadlock NCCL's grouped calls deadlocks here; the fabric
// reports it after `stallTimeout` (Error(Timeout), "stalled", naming the
// rank, group and waiting messages), as it does a size mismatch (Error(Io),
// where NCCL would corrupt or hang). Native collectives (the `nccl`
// algorithm) are a rendezvous of all n queues that computes NCCL's result
// with the host reducer. Scratch is new memory filled with 0xEE and freed in
// queue order. An error on a queue is sticky: later work on that queue is
// skipped (frees still run) and every waitEvent() on it throws it (as a CUDA
// error would).
// Thread safety: each channel is used by one thread; the fabric outlives them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "comm/queued_channel.h"

namespace scalecomm {

class QueueFabric {
 public:
  explicit QueueFabric(int n, std::chrono::milliseconds stallTimeout = std::chrono::seconds(10));
  ~QueueFabric();
  QueueFabric(const QueueFabric&) = delete;
  QueueFabric& operator=(const QueueFabric&) = delete;
  int worldSize() const;
  // Rank r's channel (one per rank; made on the first call).
  class EmulatedQueuedChannel& channel(int rank);
  // Groups run so far, per rank (what a test asserts pacing by).
  int64_t groupsRun(int rank) const;
  // Messages (sends and receives) in those groups, per rank.
  int64_t messagesRun(int rank) const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

class EmulatedQueuedChannel final : public QueuedChannel {
 public:
  EmulatedQueuedChannel(QueueFabric::State& fabric, int rank, int size);
  ~EmulatedQueuedChannel() override;
  Reducer& reducer() override;
  void* stream() const override;
  // An event recorded on the queue now (as cudaEventRecord): an opaque handle for waitEvent.
  void* recordEvent();
  void waitEvent(void* event, const Deadline& deadline, const char* what) override;
  // recordEvent() + waitEvent(): everything issued so far has run.
  void synchronize(const Deadline& deadline);
  bool hasNative(CollectiveKind kind, DataType dtype, ReduceOp op) const override;
  void native(const NativeCall& call) override;
  void abort() override;
  // Runs f on the queue in order (a stand-in for other device work: copies, the caller's kernels).
  void enqueue(std::function<void()> f);

 protected:
  void issueGroup(const std::vector<QueuedOp>& ops) override;
  void* allocScratch(int64_t bytes) override;
  void freeScratch(void* p) override;

 private:
  class Stream;
  class QueueReducer;
  QueueFabric::State& fabric_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<QueueReducer> reducer_;
};

}  // namespace scalecomm
