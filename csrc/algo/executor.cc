#include "algo/executor.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "algo/registry.h"
#include "comm/reducer.h"
#include "core/error.h"

namespace scalecomm {

std::string describe(const ExecContext& ctx, int rank) {
  return strCat("scalecomm ", collectiveName(ctx.collective), " (rank ", rank, ", seq ", ctx.call.seq,
                ctx.call.part == CallPart::Call ? "" : strCat(", ", callPartName(static_cast<uint8_t>(ctx.call.part))),
                ")");
}

namespace {

// The algorithm whose wireId is `id`, for messages; "another algorithm" when unknown.
std::string algorithmOfWireId(uint32_t id) {
  if (id == 0) return "(none)";
  for (const Algorithm& a : algorithmRegistry())
    if (a.wireId == id) return a.name;
  return "another algorithm";
}

WireHeader expectedHeader(const ExecContext& ctx, const Task& t, size_t es) {
  WireHeader h;
  std::memset(&h, 0, sizeof(h));  // padding too: headers are compared bytewise
  h.magic = kWireMagic;
  h.collective = static_cast<uint8_t>(ctx.collective);
  h.dtype = static_cast<uint8_t>(ctx.dtype);
  h.reduceOp = static_cast<uint8_t>(ctx.op);
  h.rootOrTag = ctx.root;
  h.step = t.step;
  h.seq = ctx.call.seq;
  h.part = static_cast<uint8_t>(ctx.call.part);
  h.totalCount = ctx.totalCount;
  h.block = t.wireBlock;
  h.segment = t.segment;
  h.payloadBytes = t.count * static_cast<int64_t>(es);
  h.algorithm = ctx.algorithmId;
  h.settings = ctx.settingsId;
  if (!ctx.messages.empty()) {
    const MessageId& m = ctx.messages[t.block];
    h.seq = m.seq;
    h.rootOrTag = m.tag;
    h.totalCount = m.count;
    h.dtype = static_cast<uint8_t>(m.dtype);
  }
  return h;
}

}  // namespace

WireHeader taskHeader(const ExecContext& ctx, const Task& t) { return expectedHeader(ctx, t, elementSize(ctx.dtype)); }

WireHeader collectiveHeader(const ExecContext& ctx) {
  Task none{};
  return expectedHeader(ctx, none, 0);
}

void failHeaderMismatch(const ExecContext& ctx, int rank, int peer, const WireHeader& got, const WireHeader& want) {
  const std::string who = describe(ctx, rank);
  if (got.magic != kWireMagic) {
    fail(ErrorKind::Io, who, ": received a corrupt message from rank ", peer,
         " (bad magic); the link is out of sync, probably after an earlier failure on that rank");
  }
  if (isLeave(got)) {
    fail(ErrorKind::Io, who, ": rank ", peer,
         " left the group (destroy_process_group or exit) before sending what this rank waits for; every rank must "
         "make the same collective calls, and a receive needs its send, before any rank leaves");
  }
  // Settings first for the same call: a different codec also changes the
  // payload's size, and even the collective (an allgather of encoded values).
  if (got.seq == want.seq && got.settings != want.settings) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer,
         " cuts or encodes its messages differently: its SCALECOMM_SEGMENT_BYTES, SCALECOMM_PS_SERVERS or "
         "compression codec (SCALECOMM_COMPRESSION, Options(compression=...), the codec passed to the call) differ "
         "from this rank's (segment bytes ",
         ctx.call.segmentBytes, ", ps servers ", ctx.call.psServers, ", codec ",
         ctx.call.codec.spec.empty() ? std::string("none") : ctx.call.codec.spec.str(),
         "); set the same values on every rank");
  }
  if (got.seq < want.seq && got.collective != static_cast<uint8_t>(CollectiveKind::SendRecv) &&
      want.collective != static_cast<uint8_t>(CollectiveKind::SendRecv)) {
    // This rank finished that call without the peer's message: the ranks ran it differently.
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " sent this rank a message of its ",
         collectiveName(static_cast<CollectiveKind>(got.collective)), " seq ", got.seq,
         got.rootOrTag >= 0 ? strCat(" (root/src ", got.rootOrTag, ")") : std::string(),
         " that this rank never received: the ranks ran that call differently (a different root/src, or a "
         "different collective), so its results differ between ranks from seq ",
         got.seq,
         " on. Every rank must pass the same root; the group is unusable now: destroy it and create a new one.");
  }
  if (got.seq != want.seq || got.collective != want.collective) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " is at ",
         collectiveName(static_cast<CollectiveKind>(got.collective)), " seq ", got.seq, " while this rank is at ",
         collectiveName(ctx.collective), " seq ", want.seq,
         "; all ranks must call the same collectives in the same order");
  }
  if (got.part != want.part) {
    fail(ErrorKind::Internal, who, ": rank ", peer, " is in ", callPartName(got.part), " while this rank is in ",
         callPartName(want.part),
         " of the same call: the ranks' online choice went apart, which it must not (please report it with the "
         "SCALECOMM_TRACE_DIR dumps of every rank); SCALECOMM_AUTOTUNE=model avoids it");
  }
  if (got.dtype != want.dtype || got.totalCount != want.totalCount) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " passed ", got.totalCount, " elements of ",
         dataTypeName(static_cast<DataType>(got.dtype)), " but this rank passed ", want.totalCount, " elements of ",
         dataTypeName(static_cast<DataType>(want.dtype)), "; all ranks must pass tensors of the same shape and dtype");
  }
  if (got.reduceOp != want.reduceOp) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " used reduce op ",
         reduceOpName(static_cast<ReduceOp>(got.reduceOp)), " but this rank used ",
         reduceOpName(static_cast<ReduceOp>(want.reduceOp)), "; all ranks must use the same op");
  }
  if (ctx.collective == CollectiveKind::SendRecv && got.rootOrTag != want.rootOrTag) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " sent message ", got.seq, " with tag ", got.rootOrTag,
         " but this rank's matching recv has tag ", want.rootOrTag, "; tags must match in the order messages are sent");
  }
  if (got.rootOrTag != want.rootOrTag) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " used root/src ", got.rootOrTag, " but this rank used ",
         want.rootOrTag, "; all ranks must pass the same root");
  }
  if (got.algorithm != want.algorithm) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " runs it with algorithm ", algorithmOfWireId(got.algorithm),
         " but this rank with ", ctx.call.algorithm.empty() ? "(none)" : ctx.call.algorithm,
         "; every rank must select the same algorithm (the same SCALECOMM_ALGO, options and per-call choice)");
  }
  if (ctx.collective == CollectiveKind::Alltoall && got.payloadBytes != want.payloadBytes) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " sent a block of ", got.payloadBytes,
         " bytes (or more) to this rank, which expected ", want.payloadBytes,
         " bytes from it; input_split_sizes on the sender must match output_split_sizes here");
  }
  fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " sent step ", got.step, " block ", got.block, " segment ",
       got.segment, " (", got.payloadBytes, " bytes) where this rank expected step ", want.step, " block ", want.block,
       " segment ", want.segment, " (", want.payloadBytes,
       " bytes); the ranks disagree on the algorithm or segment size (check SCALECOMM_* settings match)");
}

void failIfPeerExplains(Channel& ch, int peer, const ExecContext& ctx, const WireHeader& want) {
  WireHeader next;
  if (!ch.peerNext(peer, &next)) return;
  const bool otherSettings = next.magic == kWireMagic && next.seq == want.seq && next.settings != want.settings;
  if (isLeave(next) || otherSettings) failHeaderMismatch(ctx, ch.rank(), peer, next, want);
}

namespace {

// Ranks that pick different algorithms for one collective (different message
// sizes choose differently, or different settings) would wait on different
// paths until the timeout: when a peer this rank waits for over the links has
// posted this collective (same number and part) on its shared window, raise
// the mismatch naming both sides. Not for point-to-point (numbered per pair)
// or number 0 (the probe's).
void failIfPeersOnWindows(Channel& ch, const std::vector<int>& peers, const ExecContext& ctx) {
  if (ctx.call.seq == 0 || ctx.collective == CollectiveKind::SendRecv) return;
  WireHeader got;
  for (int q : peers) {
    if (ch.peerOnWindow(q, &got) && got.magic == kWireMagic && got.seq == ctx.call.seq &&
        got.part == static_cast<uint8_t>(ctx.call.part))
      failHeaderMismatch(ctx, ch.rank(), q, got, collectiveHeader(ctx));
  }
}

[[noreturn]] void failTimeout(const Plan& plan, const ExecContext& ctx, int rank, const std::vector<size_t>& sendHead,
                              const std::vector<size_t>& recvHead) {
  std::ostringstream waiting;
  bool first = true;
  for (int p : plan.peers) {
    bool r = recvHead[p] < plan.recvQueue[p].size();
    bool s = sendHead[p] < plan.sendQueue[p].size();
    if (!r && !s) continue;
    const Task& t = plan.tasks[r ? plan.recvQueue[p][recvHead[p]] : plan.sendQueue[p][sendHead[p]]];
    waiting << (first ? "" : ", ") << "rank " << p << " (" << (r ? "receive" : "send") << " of step " << t.step
            << " block " << t.block << " segment " << t.segment << ")";
    first = false;
  }
  fail(ErrorKind::Timeout, describe(ctx, rank), ": Timed out after ", ctx.call.timeoutMs, " ms waiting for ",
       waiting.str(), ". That rank may not have called ", collectiveName(ctx.collective),
       ", or is slow, stuck or dead. The group is unusable now: destroy it and create a new one "
       "(raise the timeout with init_process_group(timeout=...) if the peer is just slow).");
}

// One plan's run on one channel: every queue's head is offered to the
// channel as soon as its task is ready, until every task is done.
class PlanRun {
 public:
  PlanRun(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Channel& ch, const ExecContext& ctx)
      : plan_(plan),
        blockPtrs_(blockPtrs),
        ch_(ch),
        ctx_(ctx),
        es_(elementSize(ctx.dtype)),
        rank_(ch.rank()),
        queued_(ch.queued()),
        reducer_(ch.reducer()),
        check_(ctx, rank_),
        trace_(ctx.call.trace),
        done_(plan.tasks.size(), 0),
        sendHead_(ch.size(), 0),
        recvHead_(ch.size(), 0),
        sendStarted_(ch.size(), 0),
        recvStarted_(ch.size(), 0),
        remaining_(plan.tasks.size()) {
    if (queued_) countSteps();
  }

  void run() {
    ch_.start();
    bool idle = false;
    Clock::time_point idleSince;
    uint64_t idleRounds = 0;
    while (remaining_ > 0) {
      bool moved = offerQueueHeads();
      moved = runLocalTasks() || moved;
      if (!moved) moved = flushIssued();
      if (moved) {
        if (idle && trace_) trace_->idle(sinceEpochNs(idleSince), nowNs());
        idle = false;
        continue;
      }
      if (!idle) {
        idle = true;
        idleSince = Clock::now();
      }
      if (ctx_.call.deadline.expired()) failTimeout(plan_, ctx_, rank_, sendHead_, recvHead_);
      if (++idleRounds % 256 == 0) failIfPeersOnWindows(ch_, plan_.peers, ctx_);
      ch_.idle(plan_.peers, idleSince);
    }
  }

 private:
  // A queued channel's groups follow the schedule's steps: a task is issued
  // only once every task of the earlier steps is done. Groups then hold one
  // step each (or W segments of it when paced) on every rank alike, so each
  // group's messages meet their peers' in groups that run at the same time.
  // Merging steps could put a receive of step k+1 in the group of step k
  // while its sender can issue it only after step k: a deadlock (a ring of 3).
  void countSteps() {
    for (const Task& t : plan_.tasks) {
      if (t.step >= static_cast<int>(stepLeft_.size())) stepLeft_.resize(t.step + 1, 0);
      ++stepLeft_[t.step];
    }
    while (step_ < static_cast<int>(stepLeft_.size()) && stepLeft_[step_] == 0) ++step_;
    // A queued receive-reduce writes its cell only after its group has run
    // (its reduction is queued behind the group), so on a queued channel its
    // hazard dependencies need only be issued, not done: direct's n-1
    // receive-reduces into one chunk share a group.
    issuedFlag_.assign(plan_.tasks.size(), 0);
  }

  bool ready(const Task& t) const {
    if (queued_ && t.step > step_) return false;
    if (t.pacedBy >= 0 && !done_[t.pacedBy]) return false;
    const bool afterIssue = queued_ && t.kind == OpKind::RecvReduce;
    for (int32_t d : t.deps)
      if (!done_[d] && !(afterIssue && issuedFlag_[d])) return false;
    return true;
  }

  uint8_t* addr(const Task& t) const { return blockPtrs_[t.block] + t.offset * static_cast<int64_t>(es_); }

  void finish(int32_t id) {
    done_[id] = 1;
    --remaining_;
    if (queued_) {
      --stepLeft_[plan_.tasks[id].step];
      while (step_ < static_cast<int>(stepLeft_.size()) && stepLeft_[step_] == 0) ++step_;
    }
  }

  static int64_t nowNs() { return sinceEpochNs(Clock::now()); }
  static int64_t sinceEpochNs(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  void traceStart(const Task& t) {
    if (trace_) trace_->taskStarted(t.kind, t.step, t.peer, nowNs());
  }
  void traceEnd(const Task& t) {
    if (trace_) trace_->taskFinished(t.kind, t.step, t.peer, t.count * static_cast<int64_t>(es_), nowNs());
  }

  // Offers every peer's send and receive queue heads, each as far as its
  // tasks are ready and the channel takes them; whether anything moved.
  bool offerQueueHeads() {
    bool moved = false;
    for (int p : plan_.peers) {
      const auto& sq = plan_.sendQueue[p];
      while (sendHead_[p] < sq.size() && ready(plan_.tasks[sq[sendHead_[p]]]) &&
             offer(sq[sendHead_[p]], sendStarted_, moved))
        ++sendHead_[p];
      const auto& rq = plan_.recvQueue[p];
      while (recvHead_[p] < rq.size() && ready(plan_.tasks[rq[recvHead_[p]]]) &&
             offer(rq[recvHead_[p]], recvStarted_, moved))
        ++recvHead_[p];
    }
    return moved;
  }

  // Offers queue head `id` to the channel; true when the head may advance.
  bool offer(int32_t id, std::vector<uint8_t>& started, bool& moved) {
    const Task& t = plan_.tasks[id];
    if (!started[t.peer]) {  // the message's first offer
      traceStart(t);
      started[t.peer] = 1;
      if (!queued_) header_ = expectedHeader(ctx_, t, es_);
    }
    const ChannelMessage m{
        t.peer, addr(t), t.count, ctx_.dtype, t.kind == OpKind::RecvReduce ? ctx_.op : ReduceOp::None, &header_};
    Channel::Progress p;
    try {
      p = t.kind == OpKind::Send ? ch_.send(m) : ch_.recv(m, check_);
    } catch (const Error&) {
      if (t.kind == OpKind::Send) failIfPeerExplains(ch_, t.peer, ctx_, header_);  // its closed link says less
      throw;
    }
    if (p == Channel::Progress::None) return false;
    moved = true;
    if (p == Channel::Progress::Partial) return false;
    started[t.peer] = 0;
    traceEnd(t);
    if (p == Channel::Progress::Issued) {
      issued_.push_back(id);
      issuedFlag_[id] = 1;
    } else {
      finish(id);
    }
    return true;
  }

  // The local tasks that are ready (the final division of an average).
  bool runLocalTasks() {
    bool moved = false;
    while (localHead_ < plan_.localQueue.size()) {
      const Task& t = plan_.tasks[plan_.localQueue[localHead_]];
      if (!ready(t)) break;
      traceStart(t);
      if (ctx_.finalizeDivisor != 1) {
        reducer_.divide(addr(t), t.count, ctx_.dtype, ctx_.finalizeDivisor);
        reducer_.fence();
      }
      traceEnd(t);
      finish(plan_.localQueue[localHead_++]);
      moved = true;
    }
    return moved;
  }

  // A queued channel's open group, once nothing else moves: run it; its tasks are done.
  bool flushIssued() {
    if (issued_.empty()) return false;
    SC_CHECK(ch_.flush());
    for (int32_t id : issued_) finish(id);
    issued_.clear();
    return true;
  }

  const Plan& plan_;
  const std::vector<uint8_t*>& blockPtrs_;
  Channel& ch_;
  const ExecContext& ctx_;
  const size_t es_;
  const int rank_;
  const bool queued_;
  Reducer& reducer_;
  const ExecHeaderCheck check_;
  ExecTrace* const trace_;
  std::vector<uint8_t> done_;
  std::vector<size_t> sendHead_, recvHead_;
  std::vector<uint8_t> sendStarted_, recvStarted_;
  std::vector<int32_t> issued_;      // in the channel's open group: done once flushed
  std::vector<uint8_t> issuedFlag_;  // queued channels: per task, issued
  std::vector<int64_t> stepLeft_;    // queued channels: tasks left per step
  int step_ = 0;                     // queued channels: the step being issued
  size_t localHead_ = 0;
  size_t remaining_;
  WireHeader header_;  // of the message offered for the first time (the channel copies it)
};

}  // namespace

void execute(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Channel& ch, const ExecContext& ctx) {
  SC_CHECK(blockPtrs.size() == plan.blockCounts.size());
  describedErrors(ctx, ch.rank(), [&] {
    try {
      PlanRun(plan, blockPtrs, ch, ctx).run();
    } catch (...) {
      ch.abandon();
      throw;
    }
  });
}

}  // namespace scalecomm
