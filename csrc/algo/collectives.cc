#include "algo/collectives.h"

#include <algorithm>
#include <atomic>
#include <functional>

#include "algo/barrier.h"
#include "algo/chain.h"
#include "algo/direct.h"
#include "algo/executor.h"
#include "algo/native.h"
#include "algo/plan.h"
#include "algo/registry.h"
#include "algo/ring.h"
#include "algo/shared.h"
#include "algo/tree.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "core/error.h"
#include "core/logging.h"

namespace scalecomm {

namespace {

int64_t segmentElems(const CollectiveOptions& opts, DataType dtype) {
  return std::max<int64_t>(1, opts.segmentBytes / static_cast<int64_t>(elementSize(dtype)));
}

}  // namespace

const PreparedPlan& preparePlan(PlanKey key, int n, const CollectiveOptions& opts,
                                const std::function<Schedule()>& build, PreparedPlan& local) {
  const int64_t segElems =
      key.dtype == DataType::Opaque && key.segmentElems > 0 ? key.segmentElems : segmentElems(opts, key.dtype);
  const int64_t segBytes = segElems * static_cast<int64_t>(elementSize(key.dtype));
  key.segmentElems = segElems;
  const bool paced = opts.sendAheadBytes > 0 && key.kind != CollectiveKind::Barrier;
  key.paceSegments = paced ? (opts.sendAheadBytes + segBytes - 1) / segBytes : 0;
  if (opts.plans != nullptr) return opts.plans->obtain(key, n, build);
  local.schedule = build();
  local.plan = compilePlan(local.schedule, n, key.segmentElems, key.paceSegments);
  return local;
}

namespace {

// PREMUL_SUM's pre-multiplication, on the channel's memory.
void scaleLocal(Channel& ch, void* data, int64_t count, DataType dtype, double factor) {
  ch.reducer().scale(data, count, dtype, factor);
  ch.reducer().fence();
}

// The call's algorithm: opts.algorithm, or the collective's default where
// none or auto is named.
const Algorithm& chosen(const CollectiveOptions& opts, CollectiveKind kind) {
  const Algorithm* a = opts.algorithm.get();
  return a == nullptr || a->kind == AlgorithmKind::Auto ? defaultAlgorithm(kind) : *a;
}

// Runs `call` with the entry's own runner (native and phased entries) where
// the call moves bytes between ranks; true when it ran (a runner may decline).
bool ranRunner(const Algorithm& a, Channel& ch, const NativeCall& call, double premulFactor,
               const CollectiveOptions& opts) {
  return a.run != nullptr && ch.size() > 1 && call.count > 0 && a.run(ch, call, premulFactor, opts);
}

[[noreturn]] void failNoSchedule(const Algorithm& a, CollectiveKind kind) {
  fail(ErrorKind::InvalidArgument, "scalecomm ", collectiveName(kind), ": algorithm ", a.name, " has no ",
       collectiveName(kind), " schedule; choose one of: ", [&] {
         std::string out;
         for (const std::string& name : selectableAlgorithms(collectiveName(kind)))
           out += (out.empty() ? "" : ", ") + name;
         return out;
       }());
}

std::vector<uint8_t*> chunkPointers(void* data, const std::vector<int64_t>& counts, DataType dtype) {
  std::vector<uint8_t*> ptrs;
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t c : counts) {
    ptrs.push_back(p);
    p += c * static_cast<int64_t>(elementSize(dtype));
  }
  return ptrs;
}

}  // namespace

void allreduce(Channel& ch, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
               const CollectiveOptions& opts) {
  const int n = ch.size();
  const Algorithm& a = chosen(opts, CollectiveKind::Allreduce);
  if (ranRunner(a, ch, {CollectiveKind::Allreduce, data, data, count, dtype, op, -1}, premulFactor, opts)) return;
  if (op == ReduceOp::PremulSum) scaleLocal(ch, data, count, dtype, premulFactor);
  if (count == 0 || n == 1) return;  // AVG over one rank divides by 1
  ExecContext ctx(opts, CollectiveKind::Allreduce, dtype, count);
  ctx.op = op;
  ctx.finalizeDivisor = op == ReduceOp::Avg ? n : 1;
  if (a.onWindows()) return sharedAllreduce(hostLinks(ch, "allreduce", a.name), data, count, ctx);
  const bool avg = op == ReduceOp::Avg;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Allreduce, &a, count, dtype, -1, avg, 0, 0, opts.psServers}, n, opts,
      [&] {
        if (a.allreduce == nullptr) failNoSchedule(a, CollectiveKind::Allreduce);
        return a.allreduce(ch.rank(), n, count, avg, AlgoParams{ch.hostOf(), opts.psServers});
      },
      local);
  execute(p.plan, chunkPointers(data, p.schedule.blockCounts, dtype), ch, ctx);
}

void broadcast(Channel& ch, void* data, int64_t count, DataType dtype, int root, const CollectiveOptions& opts) {
  const int n = ch.size();
  if (n == 1 || count == 0) return;
  const Algorithm& a = chosen(opts, CollectiveKind::Broadcast);
  if (ranRunner(a, ch, {CollectiveKind::Broadcast, data, data, count, dtype, ReduceOp::None, root}, 1, opts)) return;
  ExecContext ctx(opts, CollectiveKind::Broadcast, dtype, count);
  ctx.root = root;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Broadcast, &a, count, dtype, root}, n, opts,
      [&] {
        if (a.broadcast == nullptr) failNoSchedule(a, CollectiveKind::Broadcast);
        return a.broadcast(ch.rank(), n, root, count);
      },
      local);
  execute(p.plan, {static_cast<uint8_t*>(data)}, ch, ctx);
}

void allgather(Channel& ch, const std::vector<void*>& outputs, int64_t count, DataType dtype,
               const CollectiveOptions& opts) {
  const int n = ch.size();
  SC_CHECK(static_cast<int>(outputs.size()) == n);
  if (n == 1 || count == 0) return;
  const Algorithm& a = chosen(opts, CollectiveKind::Allgather);
  NativeCall native{CollectiveKind::Allgather, outputs[ch.rank()], outputs[0], count, dtype, ReduceOp::None, -1};
  native.outputs = &outputs;
  if (ranRunner(a, ch, native, 1, opts)) return;
  ExecContext ctx(opts, CollectiveKind::Allgather, dtype, count);
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Allgather, &ringAlgorithm(), count, dtype}, n, opts,
      [&] { return ringAllgather(ch.rank(), n, count); }, local);
  std::vector<uint8_t*> ptrs;
  for (void* q : outputs) ptrs.push_back(static_cast<uint8_t*>(q));
  execute(p.plan, ptrs, ch, ctx);
}

void barrier(Channel& ch, const CollectiveOptions& opts) {
  const int n = ch.size();
  if (n == 1) return;
  const Algorithm& a = chosen(opts, CollectiveKind::Barrier);
  if (ranRunner(a, ch, {CollectiveKind::Barrier, nullptr, nullptr, 1, DataType::Opaque, ReduceOp::None, -1}, 1, opts))
    return;
  uint8_t token = 0;
  ExecContext ctx(opts, CollectiveKind::Barrier, DataType::Opaque, 1);
  if (a.onWindows()) return sharedBarrier(hostLinks(ch, "barrier", a.name), ctx);
  SC_CHECK(!ch.queued(), "a barrier runs on the host links (it has no device memory to move)");
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Barrier, &defaultAlgorithm(CollectiveKind::Barrier), 1, DataType::Opaque, -1, false, 1}, n, opts,
      [&] { return disseminationBarrier(ch.rank(), n); }, local);
  execute(p.plan, {&token}, ch, ctx);
}

namespace {

std::vector<uint8_t*> bytePointers(const std::vector<void*>& ptrs) {
  std::vector<uint8_t*> out;
  for (void* p : ptrs) out.push_back(static_cast<uint8_t*>(p));
  return out;
}

}  // namespace

void reduce(Channel& ch, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor, int root,
            const CollectiveOptions& opts) {
  const int n = ch.size();
  const Algorithm& a = chosen(opts, CollectiveKind::Reduce);
  if (ranRunner(a, ch, {CollectiveKind::Reduce, data, data, count, dtype, op, root}, premulFactor, opts)) return;
  if (op == ReduceOp::PremulSum) scaleLocal(ch, data, count, dtype, premulFactor);
  if (count == 0 || n == 1) return;
  ExecContext ctx(opts, CollectiveKind::Reduce, dtype, count);
  ctx.op = op;
  ctx.root = root;
  ctx.finalizeDivisor = op == ReduceOp::Avg ? n : 1;
  const bool avg = op == ReduceOp::Avg;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Reduce, &a, count, dtype, root, avg}, n, opts,
      [&] {
        if (a.reduce == nullptr) failNoSchedule(a, CollectiveKind::Reduce);
        return a.reduce(ch.rank(), n, root, count, avg);
      },
      local);
  execute(p.plan, {static_cast<uint8_t*>(data)}, ch, ctx);
}

void reduceScatter(Channel& ch, void* work, int64_t perRank, DataType dtype, ReduceOp op, double premulFactor,
                   const CollectiveOptions& opts) {
  const int n = ch.size();
  const Algorithm& a = chosen(opts, CollectiveKind::ReduceScatter);
  auto* mine = static_cast<uint8_t*>(work) + ch.rank() * perRank * static_cast<int64_t>(elementSize(dtype));
  if (ranRunner(a, ch, {CollectiveKind::ReduceScatter, work, mine, perRank, dtype, op, -1}, premulFactor, opts)) return;
  if (op == ReduceOp::PremulSum) scaleLocal(ch, work, perRank * n, dtype, premulFactor);
  if (perRank == 0 || n == 1) return;
  ExecContext ctx(opts, CollectiveKind::ReduceScatter, dtype, perRank);
  ctx.op = op;
  ctx.finalizeDivisor = op == ReduceOp::Avg ? n : 1;
  const bool avg = op == ReduceOp::Avg;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::ReduceScatter, &ringAlgorithm(), perRank, dtype, -1, avg}, n, opts,
      [&] { return ringReduceScatter(ch.rank(), n, perRank, avg); }, local);
  execute(p.plan, chunkPointers(work, p.schedule.blockCounts, dtype), ch, ctx);
}

namespace {

void rooted(Channel& ch, CollectiveKind kind, const std::vector<void*>& blocks, int64_t perRank, DataType dtype,
            int root, const CollectiveOptions& opts) {
  const int n = ch.size();
  if (perRank == 0 || n == 1) return;
  ExecContext ctx(opts, kind, dtype, perRank);
  ctx.root = root;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {kind, &defaultAlgorithm(kind), perRank, dtype, root}, n, opts,
      [&] {
        return kind == CollectiveKind::Gather ? directGather(ch.rank(), n, root, perRank)
                                              : directScatter(ch.rank(), n, root, perRank);
      },
      local);
  execute(p.plan, bytePointers(blocks), ch, ctx);
}

}  // namespace

void gather(Channel& ch, const std::vector<void*>& blocks, int64_t perRank, DataType dtype, int root,
            const CollectiveOptions& opts) {
  rooted(ch, CollectiveKind::Gather, blocks, perRank, dtype, root, opts);
}

void scatter(Channel& ch, const std::vector<void*>& blocks, int64_t perRank, DataType dtype, int root,
             const CollectiveOptions& opts) {
  rooted(ch, CollectiveKind::Scatter, blocks, perRank, dtype, root, opts);
}

void alltoall(Channel& ch, const std::vector<void*>& sendBlocks, const std::vector<int64_t>& sendCounts,
              const std::vector<void*>& recvBlocks, const std::vector<int64_t>& recvCounts, DataType dtype,
              const CollectiveOptions& opts) {
  const int n = ch.size();
  if (n == 1) return;
  // Splits legitimately differ between ranks; each message's size is checked instead.
  ExecContext ctx(opts, CollectiveKind::Alltoall, dtype, 0);
  // Per-call splits: compiled for this call only.
  CollectiveOptions uncached = opts;
  uncached.plans = nullptr;
  PreparedPlan local;
  const PreparedPlan& p = preparePlan(
      {CollectiveKind::Alltoall, &defaultAlgorithm(CollectiveKind::Alltoall), 0, dtype}, n, uncached,
      [&] { return directAlltoall(ch.rank(), n, sendCounts, recvCounts); }, local);
  std::vector<void*> ptrs = sendBlocks;
  ptrs.insert(ptrs.end(), recvBlocks.begin(), recvBlocks.end());
  execute(p.plan, bytePointers(ptrs), ch, ctx);
}

Plan pointToPointPlan(const std::vector<PointToPointOp>& ops, int worldSize, ExecContext& ctx,
                      std::vector<uint8_t*>& ptrs) {
  Schedule s;
  s.algorithm = "direct";
  ScheduleStep step;
  for (const PointToPointOp& op : ops) {
    const int block = static_cast<int>(s.blockCounts.size());
    s.blockCounts.push_back(op.count * static_cast<int64_t>(elementSize(op.dtype)));  // bytes
    step.ops.push_back({op.send ? OpKind::Send : OpKind::Recv, op.peer, block, /*wire=*/0});
    ptrs.push_back(static_cast<uint8_t*>(op.data));
    ctx.messages.push_back({op.pairSeq, op.tag, op.count, op.dtype});
  }
  s.steps.push_back(step);
  // Segments in bytes, as the executor counts them for dtype Opaque.
  return compilePlan(s, worldSize, std::max<int64_t>(1, ctx.call.segmentBytes));
}

void pointToPointBatch(Channel& ch, const std::vector<PointToPointOp>& ops, const CollectiveOptions& opts) {
  ExecContext ctx(opts, CollectiveKind::SendRecv, DataType::Opaque, 0);
  std::vector<uint8_t*> ptrs;
  const Plan plan = pointToPointPlan(ops, ch.size(), ctx, ptrs);
  execute(plan, ptrs, ch, ctx);
}

PendingMessage::PendingMessage(const PointToPointOp& op, const CollectiveOptions& opts, int worldSize)
    : op_(op), opts_(opts), ctx_(opts_, CollectiveKind::SendRecv, DataType::Opaque, 0) {
  plan_ = pointToPointPlan({op}, worldSize, ctx_, ptrs_);
}

bool PendingMessage::advance(Channel& ch, bool& moved) {
  const auto& queue = op_.send ? plan_.sendQueue[op_.peer] : plan_.recvQueue[op_.peer];
  describedErrors(ctx_, ch.rank(), [&] {
    const ExecHeaderCheck check(ctx_, ch.rank());
    while (head_ < queue.size()) {
      const Task& t = plan_.tasks[queue[head_]];
      if (!started_) {
        header_ = taskHeader(ctx_, t);
        started_ = true;
      }
      const ChannelMessage m{t.peer, ptrs_[t.block] + t.offset, t.count, DataType::Opaque, ReduceOp::None, &header_};
      Channel::Progress p;
      try {
        p = op_.send ? ch.send(m) : ch.recv(m, check);
      } catch (const Error&) {
        if (op_.send) failIfPeerExplains(ch, t.peer, ctx_, header_);
        throw;
      }
      if (p == Channel::Progress::None) return;
      moved = true;
      if (p != Channel::Progress::Done) return;  // Partial: offered again next time
      started_ = false;
      ++head_;
    }
  });
  return head_ == queue.size();
}

void PendingMessage::failTimeout(int rank) const {
  describedErrors(ctx_, rank, [&] {
    fail(ErrorKind::Timeout, "Timed out after ", opts_.timeoutMs, " ms waiting for rank ", op_.peer, " to ",
         op_.send ? "receive" : "send", " message ", op_.pairSeq, " (tag ", op_.tag, ", ", op_.count, " elements). ",
         "That rank may not have posted the matching ", op_.send ? "recv" : "send",
         ", or is slow, stuck or dead. The group is unusable now: destroy it and create a new one.");
  });
  std::abort();  // unreachable: fail throws
}

int recvFromAny(Channel& ch, void* data, int64_t count, DataType dtype, int tag, std::vector<uint64_t>& recvSeq,
                int startPeer, const CollectiveOptions& opts) {
  Communicator& comm = hostLinks(ch, "recv from any source", "(any source)");
  const int n = ch.size(), rank = ch.rank();
  std::vector<int> peers;
  for (int k = 0; k < n; ++k) {
    const int p = modRank(startPeer + k, n);
    if (p != rank) peers.push_back(p);
  }
  // A link's own errors (a peer that died or closed its links without
  // leaving in order) name the receive they interrupted.
  auto failed = [&](const Error& e) { fail(e.kind(), "scalecomm recv from any source (rank ", rank, "): ", e.what()); };
  enum class Next { Nothing, Match, Left, Other };
  auto look = [&](int p) {
    WireHeader h;
    try {
      if (comm.link(p).peek(&h, sizeof(h)) < sizeof(h)) return Next::Nothing;
    } catch (const Error& e) {
      failed(e);
    }
    if (isLeave(h)) return Next::Left;
    const bool match = h.magic == kWireMagic && h.collective == static_cast<uint8_t>(CollectiveKind::SendRecv) &&
                       h.seq == recvSeq[p] + 1 && h.rootOrTag == tag;
    return match ? Next::Match : Next::Other;
  };
  std::vector<int> left;  // peers whose next message is their leave notice
  auto leftRanks = [&] {
    std::sort(left.begin(), left.end());
    std::string out;
    for (int p : left) out += (out.empty() ? "" : ", ") + std::to_string(p);
    return out;
  };
  auto drop = [&](size_t i) {
    left.push_back(peers[i]);
    peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(i));
  };
  Clock::time_point idleSince = Clock::now();
  for (uint64_t idleRounds = 1;; ++idleRounds) {
    for (size_t i = 0; i < peers.size();) {
      const int p = peers[i];
      const Next next = look(p);
      if (next == Next::Match) {
        CollectiveOptions o = opts;
        o.seq = ++recvSeq[p];
        recvFrom(ch, data, count, dtype, p, tag, o);
        return p;
      }
      if (next == Next::Left) {
        drop(i);
        continue;
      }
      ++i;
    }
    if (peers.empty()) {
      fail(ErrorKind::Io, "scalecomm recv from any source (rank ", rank, "): every peer left the group (ranks ",
           leftRanks(), ") before sending a message with tag ", tag,
           ": the message this receive waits for was never sent (check the senders' tags and counts)");
    }
    if (opts.deadline.expired()) {
      fail(ErrorKind::Timeout, "scalecomm recv from any source (rank ", rank, "): Timed out after ", opts.timeoutMs,
           " ms: no rank sent a message with tag ", tag,
           " (only each peer's next message is considered, in the order that peer sent them",
           left.empty() ? "" : "; ranks " + leftRanks() + " left the group", ")");
    }
    if (idleRounds % 64 == 0) {
      for (size_t i = 0; i < peers.size();) {
        try {
          comm.link(peers[i]).checkPeer();
        } catch (const Error& e) {
          // Closed after its last message arrived: the next look takes a
          // match or the notice. A whole header of another message stays
          // queued for the receive it is for, and the closed peer sends
          // nothing after it: this receive no longer waits on that peer.
          const Next next = look(peers[i]);
          if (next == Next::Nothing) failed(e);
          if (next == Next::Other) {
            drop(i);
            continue;
          }
        }
        ++i;
      }
    }
    comm.idle(peers, idleSince);
  }
}

void sendTo(Channel& ch, const void* data, int64_t count, DataType dtype, int peer, int tag,
            const CollectiveOptions& opts) {
  // The executor only reads blocks that it sends.
  pointToPointBatch(ch, {{true, const_cast<void*>(data), count, dtype, peer, tag, opts.seq}}, opts);
}

void recvFrom(Channel& ch, void* data, int64_t count, DataType dtype, int peer, int tag,
              const CollectiveOptions& opts) {
  pointToPointBatch(ch, {{false, data, count, dtype, peer, tag, opts.seq}}, opts);
}

}  // namespace scalecomm
