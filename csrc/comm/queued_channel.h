// scalecomm comm: queued channels: device memory over a transport whose work
// runs on a queue after the host issues it (NCCL on a CUDA stream; the CPU
// emulation in comm/emulated_queues.h).
//
// Contract: implements comm/channel.h. send() and recv() only add the message
// to the open group and return Issued; flush() issues the group as one
// exchange (issueGroup: every op of the group may progress before any
// completes, per peer in the order added), then queues, through reducer(),
// the reductions of the group's receive-reduce messages, which were received
// into scratch. So everything a later task does is queued after what it
// depends on: the executor treats an issued message as done once flushed, and
// a group holds exactly the messages whose dependencies were issued before it
// (for a ring, one step; with pacing, W segments of it). The host never
// touches the memory: completion is known only through the queue
// (waitEvent). Scratch comes from allocScratch (queue-ordered: usable by work
// queued after the call) and is reused by later groups and calls, which queue
// order makes safe; it grows by allocating anew and queue-freeing the old.
// A subclass provides the device: issueGroup, the reducer, scratch, the
// queue handle (a cudaStream_t for NCCL) and waitEvent; `native` collectives
// (the transport's own, the `nccl` algorithm) are optional.
// Thread safety: one collective at a time; abort() from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/channel.h"
#include "comm/wire.h"
#include "core/deadline.h"

namespace scalecomm {

// One message of a group.
struct QueuedOp {
  bool send;
  int peer;
  void* data;
  int64_t bytes;
};

// The transport's own collective (CollectiveKind Allreduce, Broadcast,
// Reduce, Allgather, ReduceScatter): `send` -> `recv` (equal for in-place),
// `count` elements per rank (allgather, reduce_scatter: per block; their
// `recv`/`send` hold n blocks contiguously).
struct NativeCall {
  CollectiveKind kind;
  const void* send;
  void* recv;
  int64_t count;
  DataType dtype;
  ReduceOp op;
  int root;
  // Allgather: outputs[r] for every rank r (outputs[rank] holds this rank's block).
  const std::vector<void*>* outputs = nullptr;
};

// What NCCL's own collectives take (the `nccl` algorithm): allreduce, reduce
// and reduce-scatter of NCCL's types (no int16, no opaque bytes) with sum,
// product, min or max, and avg on floating types; broadcast and allgather of
// any type (they move bytes). The NCCL channel and its CPU emulation answer
// hasNative() with it.
bool ncclNativeTakes(CollectiveKind kind, DataType dtype, ReduceOp op);

class QueuedChannel : public Channel {
 public:
  QueuedChannel(int rank, int size) : rank_(rank), size_(size), hostOf_(size, 0) {}
  ~QueuedChannel() override = default;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& hostOf() const override { return hostOf_; }
  QueuedChannel* queuedChannel() override { return this; }
  void setHostOf(std::vector<int> h) { hostOf_ = std::move(h); }

  void start() override;
  Progress send(const ChannelMessage& m) override;
  Progress recv(const ChannelMessage& m, const HeaderCheck& check) override;
  bool flush() override;
  void idle(const std::vector<int>& peers, Clock::time_point idleSince) override;

  // The queue (cudaStream_t for NCCL); everything the channel issues runs on it in order.
  virtual void* stream() const = 0;
  // Returns once `event` (recorded on stream() after the call's work) has
  // completed; past the deadline aborts the channel and throws Error(Timeout)
  // naming `what`. A failure of the queued work throws Error(Io).
  virtual void waitEvent(void* event, const Deadline& deadline, const char* what) = 0;
  // Whether native(kind) exists for this dtype and op; the transport's own collective, queued.
  virtual bool hasNative(CollectiveKind, DataType, ReduceOp) const { return false; }
  virtual void native(const NativeCall& call);
  virtual void abort() = 0;

 protected:
  virtual void issueGroup(const std::vector<QueuedOp>& ops) = 0;
  virtual void* allocScratch(int64_t bytes) = 0;
  virtual void freeScratch(void* p) = 0;
  // Frees the scratch (queue-ordered); subclasses call it before their queue goes away.
  void releaseScratch();

 private:
  struct PendingReduce {
    size_t recv;  // its receive in open_
    uint8_t* dst;
    int64_t offset;  // into scratch
    int64_t count;
    DataType dtype;
    ReduceOp op;
  };
  int rank_, size_;
  std::vector<int> hostOf_;
  std::vector<QueuedOp> open_;  // receive-reduce ops get their scratch address at flush()
  std::vector<PendingReduce> reductions_;
  int64_t scratchUsed_ = 0;
  uint8_t* scratch_ = nullptr;
  int64_t scratchBytes_ = 0;
};

}  // namespace scalecomm
