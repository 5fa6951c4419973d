// scalecomm algo: collectives on host-addressable memory, torch-free.
//
// Contract: each function runs one collective on the calling thread over the
// channel `ch` (comm/channel.h), choosing the schedule for `opts.algorithm`,
// cutting it into segments of opts.segmentBytes (paced by
// opts.sendAheadBytes) and running it with the one executor. Buffers are raw
// memory of `count` elements of `dtype`, on the channel's device; world size
// 1 and count 0 move no bytes. On the stream channel the collective is
// complete on return and mismatches across ranks are detected on the wire; on
// a queued channel it is issued on return (the caller waits for the queue)
// and arguments must agree across ranks (as with NCCL). Algorithm "nccl"
// runs the queued channel's native collective (allreduce, broadcast, reduce,
// allgather with contiguous outputs, reduce_scatter; the others have no
// native form and run their direct schedule, as NCCL's users do). Host-only
// algorithms (mpi, shared windows) and receive-from-any-source need the
// stream channel. Arguments must already be validated (the torch adapter does
// it and raises InvalidArgument).
// Errors: Error(Io|Timeout|InvalidArgument|Aborted) prefixed with
// "scalecomm <collective> (rank r, seq s)". After an error the caller must
// poison the group. Thread safety: one collective at a time per Communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algo/executor.h"
#include "algo/options.h"
#include "algo/plan.h"
#include "algo/plan_cache.h"
#include "algo/schedule.h"
#include "algo/trace.h"
#include "comm/channel.h"
#include "comm/reducer.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

// The schedule `build` makes for `key`, cut into segments of
// opts.segmentBytes and paced by opts.sendAheadBytes (rounded up to whole
// segments): from opts.plans when the caller keeps a cache (the reference is
// valid until its next use), else compiled into `local` for this call. For
// algorithms that run several plans per call (algo/ordered.h).
const PreparedPlan& preparePlan(PlanKey key, int n, const CollectiveOptions& opts,
                                const std::function<Schedule()>& build, PreparedPlan& local);

// In place. For PremulSum, premulFactor multiplies each rank's input first.
void allreduce(Channel& ch, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
               const CollectiveOptions& opts);

// In place; `data` holds `count` elements on every rank, the root's are sent.
void broadcast(Channel& ch, void* data, int64_t count, DataType dtype, int root, const CollectiveOptions& opts);

// outputs[r] receives rank r's `count` elements; outputs[rank] must already
// hold this rank's contribution (the caller copies it in).
void allgather(Channel& ch, const std::vector<void*>& outputs, int64_t count, DataType dtype,
               const CollectiveOptions& opts);

void barrier(Channel& ch, const CollectiveOptions& opts);

// Reduces every rank's `data` into the root's `data` (chain, pipelined). On
// other ranks `data` is used as scratch and ends unspecified: pass a copy.
void reduce(Channel& ch, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor, int root,
            const CollectiveOptions& opts);

// `work` holds n blocks of `perRank` elements (this rank's contributions) and
// is overwritten; afterwards block `rank` of it holds the reduced block.
void reduceScatter(Channel& ch, void* work, int64_t perRank, DataType dtype, ReduceOp op, double premulFactor,
                   const CollectiveOptions& opts);

// blocks[r] is rank r's block of `perRank` elements; only blocks[rank] (and,
// at the root, all) need to be valid memory. gather fills the root's blocks;
// scatter fills blocks[rank] on every non-root rank from the root's.
void gather(Channel& ch, const std::vector<void*>& blocks, int64_t perRank, DataType dtype, int root,
            const CollectiveOptions& opts);
void scatter(Channel& ch, const std::vector<void*>& blocks, int64_t perRank, DataType dtype, int root,
             const CollectiveOptions& opts);

// Point-to-point: one message to / from `peer`, in order per pair of ranks.
// opts.seq is the pair's message number (not the group's collective number);
// the tag travels in the header and must match. Count 0 moves nothing.
// Blocking on the worker: a send completes once its bytes are in the
// transport's buffer (shm ring, socket), so two ranks that both send more
// than that before receiving wait until the timeout (and then fail clearly).
void sendTo(Channel& ch, const void* data, int64_t count, DataType dtype, int peer, int tag,
            const CollectiveOptions& opts);
void recvFrom(Channel& ch, void* data, int64_t count, DataType dtype, int peer, int tag, const CollectiveOptions& opts);

// A batch of sends and receives progressed together (batch_isend_irecv): all
// make progress at once, so "everyone receives, then everyone sends" within
// one batch cannot deadlock. Per peer, messages keep the batch's order. Each
// message carries its own pair number and tag; a receive matches the sender's
// message with the same number.
struct PointToPointOp {
  bool send;
  void* data;
  int64_t count;
  DataType dtype;
  int peer;
  int tag;
  uint64_t pairSeq;
};
void pointToPointBatch(Channel& ch, const std::vector<PointToPointOp>& ops, const CollectiveOptions& opts);

// One posted send or receive moved a piece at a time, beside others, over
// the stream channel (the messages of pointToPointBatch, byte for byte: a
// send posted here meets a receive in a batch and the other way round).
// advance() offers what can move now and returns true once the whole
// message has moved; it throws the send's or receive's error (a mismatch
// names both sides, a departed peer is named). Between advances nothing else
// may use the channel's stream to that peer in that direction, and only the
// oldest pending message per peer and direction may be advanced: the
// channel holds one message in flight per peer and direction, and messages
// keep their posting order on a link. The op's memory and `opts` are
// borrowed (copied) for the message's life.
class PendingMessage {
 public:
  PendingMessage(const PointToPointOp& op, const CollectiveOptions& opts, int worldSize);
  PendingMessage(const PendingMessage&) = delete;
  PendingMessage& operator=(const PendingMessage&) = delete;
  const PointToPointOp& op() const { return op_; }
  const Deadline& deadline() const { return opts_.deadline; }
  bool advance(Channel& ch, bool& moved);
  // Throws the timeout error naming the peer and the message.
  [[noreturn]] void failTimeout(int rank) const;

 private:
  PointToPointOp op_;
  CollectiveOptions opts_;
  ExecContext ctx_;  // refers to opts_
  Plan plan_;
  std::vector<uint8_t*> ptrs_;
  size_t head_ = 0;       // the next segment
  bool started_ = false;  // the segment at head_ was offered (the channel holds it)
  WireHeader header_{};
};

// Receive from any source: waits until some peer's next message is a
// point-to-point message with the next number of that pair (recvSeq[peer] + 1)
// and `tag`, then receives it (recvSeq[peer] advances) and returns the peer.
// Peers are looked at round-robin from `startPeer`, so none starves. A peer
// whose next message is its leave notice (it left the group in order) is no
// longer waited on; once every peer has left, throws Error(Io) naming them.
// Throws Error(Timeout) past opts.deadline, and the link's error, naming the
// peer, when a peer with nothing waiting died or closed its links without
// leaving in order (it may be the sender this receive waits for). recvSeq is
// the worker's count of messages received per peer, shared with every other
// receive.
int recvFromAny(Channel& ch, void* data, int64_t count, DataType dtype, int tag, std::vector<uint64_t>& recvSeq,
                int startPeer, const CollectiveOptions& opts);

// Sends sendBlocks[q] (sendCounts[q] elements) to rank q and receives rank q's
// block for us into recvBlocks[q] (recvCounts[q]); the caller copies the
// block to itself. Mismatched splits are detected on the wire.
void alltoall(Channel& ch, const std::vector<void*>& sendBlocks, const std::vector<int64_t>& sendCounts,
              const std::vector<void*>& recvBlocks, const std::vector<int64_t>& recvCounts, DataType dtype,
              const CollectiveOptions& opts);

}  // namespace scalecomm
