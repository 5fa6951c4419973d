// scalecomm algo: the one executor that runs every plan, on every device.
//
// Contract: execute() drives a Plan to completion over a Channel
// (comm/channel.h): it offers each peer's send-queue head and receive-queue
// head to the channel as soon as the head's dependencies are done, runs
// Finalize tasks through the channel's reducer, and, when nothing moves,
// flushes the channel's open group (queued channels) or idles through it
// (stream channel). On the stream channel a task is done when the channel
// says so; every message carries a WireHeader the receiver checks against its
// own expectation (collective, seq, dtype, op, count, root, step, block,
// segment): a mismatch raises Error(InvalidArgument) with both sides' values,
// and past ctx.call.deadline it raises Error(Timeout) naming the peers it was
// waiting for. On a queued channel a task is done once its group is flushed
// (its work is queued behind everything it depends on): execute() returns
// when the whole plan is issued, and the caller waits for the queue. On any
// error the caller must poison the group (links may hold a partial message).
// The executor never sees a device or a transport type: memory comes in as
// block pointers, arithmetic goes through the channel's reducer.
// Thread safety: one call at a time per channel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/options.h"
#include "algo/plan.h"
#include "algo/trace.h"
#include "comm/channel.h"
#include "comm/reducer.h"
#include "comm/wire.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/error.h"
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

// What one collective's execution needs besides its call options: the
// collective and the shape every peer's headers are checked against.
struct ExecContext {
  const CollectiveOptions& call;  // seq, deadline, timeout, trace
  CollectiveKind collective;
  DataType dtype;
  ReduceOp op = ReduceOp::None;  // for RecvReduce tasks
  int root = -1;
  int64_t totalCount = 0;       // this rank's element count, checked against peers'
  int64_t finalizeDivisor = 1;  // Finalize tasks divide by this (AVG)
  // Point-to-point batches: block b is one message whose header carries
  // messages[b] (seq, tag, count, dtype) instead of the fields above; the
  // plan then counts in bytes (dtype Opaque). Empty for collectives.
  std::vector<MessageId> messages;
  // The header's identity fields (comm/wire.h), from call's algorithm and settings.
  uint32_t algorithmId = 0, settingsId = 0;

  ExecContext(const CollectiveOptions& opts, CollectiveKind kind, DataType type, int64_t count)
      : call(opts), collective(kind), dtype(type), totalCount(count) {
    algorithmId = opts.algorithm ? opts.algorithm->wireId : 0;
    const int64_t settings[] = {opts.segmentBytes, opts.psServers, static_cast<int64_t>(opts.codec.id)};
    settingsId = wireId(reinterpret_cast<const char*>(settings), sizeof(settings));
  }
};

// Describes the collective for error messages: "scalecomm allreduce (rank 3, seq 41)".
std::string describe(const ExecContext& ctx, int rank);

void execute(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Channel& ch, const ExecContext& ctx);

// The header task `t` of a plan run with `ctx` carries on the wire.
WireHeader taskHeader(const ExecContext& ctx, const Task& t);

// The header this rank's part of the collective carries (step, block,
// segment and payload 0): what a peer's header is checked against when the
// peer ran the collective on another channel (algo/shared.h).
WireHeader collectiveHeader(const ExecContext& ctx);

// Raises the error for a peer's header `got` that differs from this rank's
// `want`: which argument the ranks disagree on, with both values.
[[noreturn]] void failHeaderMismatch(const ExecContext& ctx, int rank, int peer, const WireHeader& got,
                                     const WireHeader& want);

// The HeaderCheck of a plan run with `ctx`: failHeaderMismatch.
class ExecHeaderCheck final : public HeaderCheck {
 public:
  ExecHeaderCheck(const ExecContext& ctx, int rank) : ctx_(ctx), rank_(rank) {}
  [[noreturn]] void mismatch(int peer, const WireHeader& got, const WireHeader& want) const override {
    failHeaderMismatch(ctx_, rank_, peer, got, want);
  }

 private:
  const ExecContext& ctx_;
  int rank_;
};

// Where the header next on `peer`'s link (Channel::peerNext) explains why
// its link closed: its leave notice (it left the group in order), or a
// message of this very call with other settings (another codec, segment
// size or ps servers: it failed on this rank's message, which it could not
// take, and closed its links), raises failHeaderMismatch's error for it;
// otherwise returns. `want`: this rank's header for the call. For the error
// paths of a wait or a send on a closed link, which say less.
void failIfPeerExplains(Channel& ch, int peer, const ExecContext& ctx, const WireHeader& want);

// Runs f(); an Error it throws is rethrown prefixed with describe(ctx, rank)
// (unless it already is).
template <typename F>
void describedErrors(const ExecContext& ctx, int rank, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    const std::string prefix = describe(ctx, rank);
    if (std::string(e.what()).rfind(prefix, 0) == 0) throw;
    throw Error(e.kind(), prefix + ": " + e.what());
  }
}

}  // namespace scalecomm
