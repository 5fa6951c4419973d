#include "algo/executor.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>

#include "algo/registry.h"
#include "algo/shared.h"
#include "comm/reducer.h"
#include "core/error.h"

namespace scalecomm {

std::string describe(const ExecContext& ctx, int rank) {
  return strCat("scalecomm ", collectiveName(ctx.collective), " (rank ", rank, ", seq ", ctx.call.seq, ")");
}

namespace {

constexpr size_t kSmallMessage = 8192;
const uint8_t kZeros[kWireAlign] = {0};

// The algorithm whose wireId is `id`, for messages; "another algorithm" when unknown.
std::string algorithmNamed(uint32_t id) {
  if (id == 0) return "(none)";
  for (const char* c : {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "barrier"}) {
    for (const std::string& name : selectableAlgorithms(c))
      if (wireId(name.data(), name.size()) == id) return name;
  }
  for (const char* name : {"auto", "mpi"})
    if (wireId(name, std::strlen(name)) == id) return name;
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
  if (got.seq != want.seq || got.collective != want.collective) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " is at ",
         collectiveName(static_cast<CollectiveKind>(got.collective)), " seq ", got.seq, " while this rank is at ",
         collectiveName(ctx.collective), " seq ", want.seq,
         "; all ranks must call the same collectives in the same order");
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
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer, " runs it with algorithm ", algorithmNamed(got.algorithm),
         " but this rank with ", ctx.call.algorithm.empty() ? "(none)" : ctx.call.algorithm,
         "; every rank must select the same algorithm (the same SCALECOMM_ALGO, options and per-call choice)");
  }
  if (got.settings != want.settings) {
    fail(ErrorKind::InvalidArgument, who, ": rank ", peer,
         " cuts its messages differently: its SCALECOMM_SEGMENT_BYTES or SCALECOMM_PS_SERVERS differ from this "
         "rank's (",
         ctx.call.segmentBytes, " and ", ctx.call.psServers, "); set the same values on every rank");
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

namespace {

struct SendProgress {
  SendProgress() {}  // user-provided: buf is not zeroed per peer per call (it is filled before it is read)
  uint64_t pos = 0;
  bool active = false;
  bool small = false;
  WireHeader hdr{};
  std::array<uint8_t, kSmallMessage> buf;
};

// Returns true when the task's message has been fully handed to the link.
bool progressSend(Link& link, const Task& t, uint8_t* data, const ExecContext& ctx, size_t es, SendProgress& sp,
                  bool& moved) {
  const int64_t payload = t.count * static_cast<int64_t>(es);
  const uint64_t total = paddedMessageBytes(payload);
  if (!sp.active) {
    sp.active = true;
    sp.pos = 0;
    sp.hdr = expectedHeader(ctx, t, es);
    sp.small = total <= kSmallMessage;
    if (sp.small) {
      std::memcpy(sp.buf.data(), &sp.hdr, sizeof(WireHeader));
      std::memcpy(sp.buf.data() + sizeof(WireHeader), data, static_cast<size_t>(payload));
      std::memset(sp.buf.data() + sizeof(WireHeader) + payload, 0, total - sizeof(WireHeader) - payload);
    }
  }
  while (sp.pos < total) {
    size_t n;
    if (sp.small) {
      n = link.trySend(sp.buf.data() + sp.pos, total - sp.pos);
    } else if (sp.pos < sizeof(WireHeader)) {
      n = link.trySend(reinterpret_cast<const uint8_t*>(&sp.hdr) + sp.pos, sizeof(WireHeader) - sp.pos);
    } else if (sp.pos < sizeof(WireHeader) + payload) {
      uint64_t off = sp.pos - sizeof(WireHeader);
      n = link.trySend(data + off, payload - off);
    } else {
      n = link.trySend(kZeros, total - sp.pos);
    }
    if (n == 0) return false;
    moved = true;
    sp.pos += n;
  }
  sp.active = false;
  return true;
}

class RecvProgress : public RecvConsumer {
 public:
  enum Stage { Idle, Header, Payload, Pad, Done };

  void start(const Task& t, uint8_t* dst, const ExecContext& ctx, Reducer& reducer, size_t es, int rank) {
    task_ = &t;
    reducer_ = &reducer;
    dst_ = dst;
    ctx_ = &ctx;
    es_ = es;
    rank_ = rank;
    want_ = expectedHeader(ctx, t, es);
    payload_ = static_cast<uint64_t>(want_.payloadBytes);
    pad_ = paddedMessageBytes(want_.payloadBytes) - sizeof(WireHeader) - payload_;
    pos_ = 0;
    stage_ = Header;
  }
  Stage stage() const { return stage_; }
  void reset() { stage_ = Idle; }

  size_t consume(const uint8_t* data, size_t avail) override {
    size_t used = 0;
    if (stage_ == Header) {
      if (avail < sizeof(WireHeader)) return 0;
      WireHeader got;
      std::memcpy(&got, data, sizeof(got));
      if (std::memcmp(&got, &want_, sizeof(got)) != 0) failHeaderMismatch(*ctx_, rank_, task_->peer, got, want_);
      used = sizeof(WireHeader);
      stage_ = payload_ > 0 ? Payload : (pad_ > 0 ? Pad : Done);
      pos_ = 0;
    }
    if (stage_ == Payload) {
      uint64_t take = std::min<uint64_t>(avail - used, payload_ - pos_);
      take -= take % es_;
      if (take > 0) {
        if (task_->kind == OpKind::RecvReduce) {
          reducer_->reduce(dst_ + pos_, data + used, static_cast<int64_t>(take / es_), ctx_->dtype, ctx_->op);
        } else {
          std::memcpy(dst_ + pos_, data + used, take);
        }
        pos_ += take;
        used += take;
      }
      if (pos_ == payload_) {
        stage_ = pad_ > 0 ? Pad : Done;
        pos_ = 0;
      }
    }
    if (stage_ == Pad) {
      uint64_t take = std::min<uint64_t>(avail - used, pad_ - pos_);
      pos_ += take;
      used += take;
      if (pos_ == pad_) stage_ = Done;
    }
    return used;
  }

 private:
  const Task* task_ = nullptr;
  uint8_t* dst_ = nullptr;
  const ExecContext* ctx_ = nullptr;
  Reducer* reducer_ = nullptr;
  size_t es_ = 1;
  int rank_ = 0;
  WireHeader want_{};
  uint64_t payload_ = 0, pad_ = 0, pos_ = 0;
  Stage stage_ = Idle;
};

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

void run(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Communicator& comm, const ExecContext& ctx) {
  const size_t es = elementSize(ctx.dtype);
  const int n = comm.size();
  const int rank = comm.rank();
  Reducer& reducer = ctx.reducer();
  std::vector<uint8_t> done(plan.tasks.size(), 0);
  std::vector<size_t> sendHead(n, 0), recvHead(n, 0);
  size_t localHead = 0;
  size_t remaining = plan.tasks.size();
  std::vector<SendProgress> sendProg(n);
  std::vector<RecvProgress> recvProg(n);
  auto ready = [&](const Task& t) {
    for (int32_t d : t.deps)
      if (!done[d]) return false;
    return true;
  };
  auto addr = [&](const Task& t) { return blockPtrs[t.block] + t.offset * static_cast<int64_t>(es); };
  auto finish = [&](int32_t id) {
    done[id] = 1;
    --remaining;
  };

  ExecTrace* trace = ctx.call.trace;
  auto nowNs = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  };
  auto traceStart = [&](const Task& t) {
    if (trace) trace->taskStarted(t.kind, t.step, t.peer, nowNs());
  };
  auto traceEnd = [&](const Task& t) {
    if (trace) trace->taskFinished(t.kind, t.step, t.peer, t.count * static_cast<int64_t>(es), nowNs());
  };

  bool idle = false;
  Clock::time_point idleSince;
  uint64_t idleRounds = 0;
  while (remaining > 0) {
    bool moved = false;
    for (int p : plan.peers) {
      const auto& sq = plan.sendQueue[p];
      while (sendHead[p] < sq.size()) {
        const Task& t = plan.tasks[sq[sendHead[p]]];
        if (!ready(t)) break;
        if (!sendProg[p].active) traceStart(t);
        if (!progressSend(comm.link(p), t, addr(t), ctx, es, sendProg[p], moved)) break;
        traceEnd(t);
        finish(sq[sendHead[p]++]);
      }
      const auto& rq = plan.recvQueue[p];
      while (recvHead[p] < rq.size()) {
        const Task& t = plan.tasks[rq[recvHead[p]]];
        RecvProgress& rp = recvProg[p];
        if (rp.stage() == RecvProgress::Idle) {
          if (!ready(t)) break;
          rp.start(t, addr(t), ctx, reducer, es, rank);
          traceStart(t);
        }
        while (rp.stage() != RecvProgress::Done) {
          if (comm.link(p).tryRecv(rp) == 0) break;
          moved = true;
        }
        if (rp.stage() != RecvProgress::Done) break;
        if (t.kind == OpKind::RecvReduce) reducer.fence();  // later tasks may send this memory
        rp.reset();
        traceEnd(t);
        finish(rq[recvHead[p]++]);
      }
    }
    while (localHead < plan.localQueue.size()) {
      const Task& t = plan.tasks[plan.localQueue[localHead]];
      if (!ready(t)) break;
      traceStart(t);
      if (ctx.finalizeDivisor != 1) {
        reducer.divide(addr(t), t.count, ctx.dtype, ctx.finalizeDivisor);
        reducer.fence();
      }
      traceEnd(t);
      finish(plan.localQueue[localHead++]);
      moved = true;
    }
    if (moved) {
      if (idle && trace) {
        trace->idle(std::chrono::duration_cast<std::chrono::nanoseconds>(idleSince.time_since_epoch()).count(),
                    nowNs());
      }
      idle = false;
      continue;
    }
    if (!idle) {
      idle = true;
      idleSince = Clock::now();
    }
    if (ctx.call.deadline.expired()) failTimeout(plan, ctx, rank, sendHead, recvHead);
    if (++idleRounds % 256 == 0) checkPeersNotOnWindows(comm, plan.peers, ctx);
    comm.idle(plan.peers, idleSince);
  }
}

}  // namespace

void execute(const Plan& plan, const std::vector<uint8_t*>& blockPtrs, Communicator& comm, const ExecContext& ctx) {
  SC_CHECK(blockPtrs.size() == plan.blockCounts.size());
  describedErrors(ctx, comm.rank(), [&] { run(plan, blockPtrs, comm, ctx); });
}

}  // namespace scalecomm
