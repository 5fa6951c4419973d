// scalecomm algo: the one executor that runs every plan.
//
// Contract: execute() drives a Plan to completion over a Communicator: it
// progresses each peer's send-queue head and receive-queue head as soon as the
// head's dependencies are done, reduces received bytes straight out of the
// transport's buffer (no staging copy on shm), and idles through the
// Communicator when nothing moves. Every message carries a WireHeader that the
// receiver checks against its own expectation (collective, seq, dtype, op,
// count, root, step, block, segment): a mismatch raises Error(InvalidArgument)
// with both sides' values. Past ctx.deadline it raises Error(Timeout) naming
// the peers it was waiting for. On any error the caller must poison the group
// (links may hold a partial message).
// The executor never sees a device or a transport type: memory comes in as
// block pointers, arithmetic through ctx.reducer, which may queue its work:
// a receive-reduce or finalize task counts as done only after reducer.fence().
// Thread safety: one call at a time per Communicator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/plan.h"
#include "algo/trace.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "comm/wire.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

// One point-to-point message's identity, carried in its header instead of the
// collective's (see ExecContext::messages).
struct MessageId {
  uint64_t seq;  // per ordered pair of ranks
  int tag;
  int64_t count;  // elements of dtype
  DataType dtype;
};

struct ExecContext {
  CollectiveKind collective;
  uint64_t seq;
  DataType dtype;
  ReduceOp op = ReduceOp::None;  // for RecvReduce tasks
  int root = -1;
  int64_t totalCount = 0;       // this rank's element count, checked against peers'
  int64_t finalizeDivisor = 1;  // Finalize tasks divide by this (AVG)
  Deadline deadline = Deadline::never();
  int64_t timeoutMs = 0;  // for messages
  // Point-to-point batches: block b is one message whose header carries
  // messages[b] (seq, tag, count, dtype) instead of the fields above; the
  // plan then counts in bytes (dtype Opaque). Empty for collectives.
  std::vector<MessageId> messages;
  ExecTrace* trace = nullptr;  // when set, filled with per-step spans (timeline)
  Reducer* reducer = nullptr;  // arithmetic (comm/reducer.h); null: hostReducer()
};

// Describes the collective for error messages: "scalecomm allreduce (rank 3, seq 41)".
std::string describe(const ExecContext& ctx, int rank);

void execute(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Communicator& comm, const ExecContext& ctx);

}  // namespace scalecomm
