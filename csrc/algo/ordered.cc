#include "algo/ordered.h"

#include <algorithm>
#include <vector>

#include "algo/collectives.h"
#include "algo/executor.h"
#include "algo/native.h"
#include "algo/registry.h"
#include "algo/shared.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "core/error.h"

namespace scalecomm {

Schedule orderedToOwners(int rank, int n, const std::vector<int64_t>& chunkCounts) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && static_cast<int>(chunkCounts.size()) == n);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = chunkCounts;
  for (int p = 0; p < n; ++p) s.blockCounts.push_back(p == rank ? 0 : chunkCounts[rank]);
  ScheduleStep step;
  for (int k = 1; k < n; ++k) {
    const int to = modRank(rank + k, n), from = modRank(rank - k, n);
    step.ops.push_back({OpKind::Send, to, to, /*wire=*/to});
    step.ops.push_back({OpKind::Recv, from, n + from, /*wire=*/rank});
  }
  if (n > 1) s.steps.push_back(step);
  return s;
}

Schedule orderedFromOwners(int rank, int n, const std::vector<int64_t>& chunkCounts) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && static_cast<int>(chunkCounts.size()) == n);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = chunkCounts;
  ScheduleStep step;
  for (int k = 1; k < n; ++k) {
    const int to = modRank(rank + k, n), from = modRank(rank - k, n);
    step.ops.push_back({OpKind::Send, to, rank, /*wire=*/n + rank});
    step.ops.push_back({OpKind::Recv, from, from, /*wire=*/n + from});
  }
  if (n > 1) s.steps.push_back(step);
  return s;
}

Schedule orderedChainReduce(int rank, int n, int root, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = {count};
  if (n == 1) return s;
  // The chain 0 -> 1 -> ... -> n-2 (rank k adds its values to the fold so
  // far: v_k + acc == acc + v_k), then the root adds the chain's fold and
  // rank n-1's values: as many hops as the chain schedule's n-1. Every rank
  // has the same steps (the step travels in headers).
  const int end = n - 2;
  ScheduleStep chain, last, fin;
  if (rank >= 1 && rank <= end) chain.ops.push_back({OpKind::RecvReduce, rank - 1, 0});
  if (rank < end) chain.ops.push_back({OpKind::Send, rank + 1, 0});
  if (root == n - 1 || root == end) {  // the root holds one of the two: it adds the other
    const int other = root == n - 1 ? end : n - 1;
    if (rank == other) last.ops.push_back({OpKind::Send, root, 0});
    if (rank == root) last.ops.push_back({OpKind::RecvReduce, other, 0});
  } else {  // the root's own values went down the chain: it takes v(n-1), then adds the fold
    if (rank == n - 1 || rank == end) last.ops.push_back({OpKind::Send, root, 0});
    if (rank == root) {
      last.ops.push_back({OpKind::Recv, n - 1, 0});
      last.ops.push_back({OpKind::RecvReduce, end, 0});
    }
  }
  if (finalize && rank == root) fin.ops.push_back({OpKind::Finalize, -1, 0});
  s.steps = {chain, last};
  if (finalize) s.steps.push_back(fin);
  return s;
}

Schedule orderedChainAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = {count};
  if (n == 1) return s;
  ScheduleStep up, fin, down;  // every rank has the same steps (the step travels in headers)
  if (rank > 0) up.ops.push_back({OpKind::RecvReduce, rank - 1, 0});
  if (rank < n - 1) up.ops.push_back({OpKind::Send, rank + 1, 0});
  if (finalize && rank == n - 1) fin.ops.push_back({OpKind::Finalize, -1, 0});
  if (rank < n - 1) down.ops.push_back({OpKind::Recv, rank + 1, 0});
  if (rank > 0) down.ops.push_back({OpKind::Send, rank - 1, 0});
  s.steps.push_back(up);
  if (finalize) s.steps.push_back(fin);
  s.steps.push_back(down);
  return s;
}

Schedule orderedGather(int rank, int n, int root, int64_t count) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = {count};
  for (int q = 0; q < n; ++q) s.blockCounts.push_back(rank == root ? count : 0);
  ScheduleStep step;
  if (rank == root) {
    for (int k = 1; k < n; ++k) {
      const int q = modRank(root + k, n);
      step.ops.push_back({OpKind::Recv, q, 1 + q, /*wire=*/1 + q});
    }
  } else {
    step.ops.push_back({OpKind::Send, root, 0, /*wire=*/1 + rank});
  }
  if (n > 1) s.steps.push_back(step);
  return s;
}

Schedule orderedStarBroadcast(int rank, int n, int root, int64_t count) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = {count};
  ScheduleStep step;
  if (rank == root) {
    for (int k = 1; k < n; ++k) step.ops.push_back({OpKind::Send, modRank(root + k, n), 0, /*wire=*/n + 1});
  } else {
    step.ops.push_back({OpKind::Recv, root, 0, /*wire=*/n + 1});
  }
  if (n > 1) s.steps.push_back(step);
  return s;
}

Schedule orderedRelay(int rank, int n, int root, int64_t count, bool finalize, bool toAll) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "ordered";
  s.blockCounts = {count};
  if (n == 1) return s;
  // Every rank has the same steps (the step travels in headers). Rank 0's
  // receive-reduces write one block in program order, so the plan folds
  // segment s of rank k only after that of rank k-1: the left fold.
  for (int k = 1; k < n; ++k) {
    ScheduleStep in;
    if (rank == 0) in.ops.push_back({OpKind::RecvReduce, k, 0});
    if (rank == k) in.ops.push_back({OpKind::Send, 0, 0});
    s.steps.push_back(in);
  }
  if (finalize) {
    ScheduleStep fin;
    if (rank == 0) fin.ops.push_back({OpKind::Finalize, -1, 0});
    s.steps.push_back(fin);
  }
  ScheduleStep out;
  if (toAll) {
    if (rank == 0)
      for (int k = 1; k < n; ++k) out.ops.push_back({OpKind::Send, k, 0});
    else
      out.ops.push_back({OpKind::Recv, 0, 0});
  } else if (root != 0) {
    if (rank == 0) out.ops.push_back({OpKind::Send, root, 0});
    if (rank == root) out.ops.push_back({OpKind::Recv, 0, 0});
  }
  if (toAll || root != 0) s.steps.push_back(out);
  return s;
}

bool orderedChainPays(const std::vector<int>& hostOf) {
  if (!hostsHoldSeveral(hostOf)) return false;
  std::vector<int> seen;
  for (size_t r = 0; r < hostOf.size(); ++r) {
    if (r > 0 && hostOf[r] == hostOf[r - 1]) continue;
    if (std::find(seen.begin(), seen.end(), hostOf[r]) != seen.end()) return false;  // a host comes back
    seen.push_back(hostOf[r]);
  }
  return true;
}

namespace {

// Which plan of a call a cached plan is (PlanKey::variant).
enum Phase : int64_t { kToOwners = 1, kFromOwners = 2, kChain = 3, kGather = 4, kStarBroadcast = 5, kRelay = 6 };

Communicator& orderedLinks(Channel& ch, CollectiveKind kind) {
  if (Communicator* c = ch.communicator()) return *c;
  fail(ErrorKind::InvalidArgument, "scalecomm ", collectiveName(kind), " (rank ", ch.rank(),
       "): algorithm ordered folds on host memory, not on device memory; a deterministic group stages CUDA tensors "
       "through host memory");
}

// Where the chunks of one collective live.
struct Chunks {
  std::vector<int64_t> counts;   // elements per chunk
  std::vector<uint8_t*> blocks;  // the buffer's chunks, then the scratch slots
};

// The calling thread's scratch: grown to the largest call it served.
uint8_t* scratch(size_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes) {
    buf.clear();
    buf.shrink_to_fit();
    buf.resize(bytes);
  }
  return buf.data();
}

Chunks chunksOf(void* data, std::vector<int64_t> counts, DataType dtype, int rank) {
  Chunks c;
  c.counts = std::move(counts);
  const int n = static_cast<int>(c.counts.size());
  const int64_t esize = static_cast<int64_t>(elementSize(dtype));
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t count : c.counts) {
    c.blocks.push_back(p);
    p += count * esize;
  }
  const int64_t slotBytes = c.counts[rank] * esize;
  uint8_t* slots = scratch(static_cast<size_t>(slotBytes * n));
  for (int q = 0; q < n; ++q) c.blocks.push_back(slots + q * slotBytes);
  return c;
}

// Runs one plan of a call (cached by its phase, and by whether it finalizes);
// its schedule addresses the first of `blocks` (the phases 1 and gather
// also the scratch slots).
void runPhase(Channel& ch, const ExecContext& ctx, Phase phase, const CollectiveOptions& opts,
              const std::function<Schedule()>& build, const std::vector<uint8_t*>& blocks, bool finalize = false) {
  static const Algorithm& ordered = algorithmNamed("ordered");
  PreparedPlan local;
  const PreparedPlan& p =
      preparePlan({ctx.collective, &ordered, ctx.totalCount, ctx.dtype, ctx.root, finalize, 0, 0, phase}, ch.size(),
                  opts, build, local);
  execute(p.plan, std::vector<uint8_t*>(blocks.begin(), blocks.begin() + p.plan.blockCounts.size()), ch, ctx);
}

// Phases 1 and 2: every rank's chunk q to rank q, folded there in rank order
// into this rank's own chunk.
void foldAtOwners(Channel& ch, const ExecContext& ctx, const CollectiveOptions& opts, Chunks& c) {
  const int n = ch.size(), q = ch.rank();
  runPhase(ch, ctx, kToOwners, opts, [&] { return orderedToOwners(q, n, c.counts); }, c.blocks);
  if (c.counts[q] == 0) return;
  std::vector<const void*> in(n);
  for (int p = 0; p < n; ++p) in[p] = p == q ? c.blocks[q] : c.blocks[n + p];
  foldInto(c.blocks[q], nullptr, in.data(), n, c.counts[q], ctx.dtype, ctx.op, ctx.finalizeDivisor);  // in place
}

// Every rank's whole buffer to `root`, which folds them in rank order into
// its own `data`.
void foldAtRoot(Channel& ch, const ExecContext& ctx, const CollectiveOptions& opts, void* data, int64_t count,
                int root) {
  const int n = ch.size(), rank = ch.rank();
  const int64_t bytes = count * static_cast<int64_t>(elementSize(ctx.dtype));
  std::vector<uint8_t*> blocks{static_cast<uint8_t*>(data)};
  uint8_t* slots = rank == root ? scratch(static_cast<size_t>(bytes * n)) : nullptr;
  for (int q = 0; q < n; ++q) blocks.push_back(slots ? slots + q * bytes : nullptr);
  runPhase(ch, ctx, kGather, opts, [&] { return orderedGather(rank, n, root, count); }, blocks);
  if (rank != root) return;
  std::vector<const void*> in(n);
  for (int q = 0; q < n; ++q) in[q] = q == root ? data : blocks[1 + q];
  foldInto(data, nullptr, in.data(), n, count, ctx.dtype, ctx.op, ctx.finalizeDivisor);  // in place
}

ExecContext contextFor(const CollectiveOptions& opts, CollectiveKind kind, DataType dtype, int64_t count, ReduceOp op,
                       int n) {
  ExecContext ctx(opts, kind, dtype, count);
  ctx.op = op;
  ctx.finalizeDivisor = op == ReduceOp::Avg ? n : 1;
  return ctx;
}

void orderedAllreduce(Channel& ch, void* data, int64_t count, DataType dtype, ReduceOp op,
                      const CollectiveOptions& opts) {
  const int n = ch.size();
  const ExecContext ctx = contextFor(opts, CollectiveKind::Allreduce, dtype, count, op, n);
  Communicator& comm = orderedLinks(ch, CollectiveKind::Allreduce);
  if (sharedWindowBytes(comm) > 0) return sharedAllreduce(comm, data, count, ctx);
  const int64_t bytes = count * static_cast<int64_t>(elementSize(dtype));
  if (orderedStarServes(n, bytes)) {
    foldAtRoot(ch, ctx, opts, data, count, 0);
    return runPhase(ch, ctx, kStarBroadcast, opts, [&] { return orderedStarBroadcast(ch.rank(), n, 0, count); },
                    {static_cast<uint8_t*>(data)});
  }
  const bool avg = op == ReduceOp::Avg;
  if (orderedChainPays(ch.hostOf())) {
    CollectiveOptions chain = opts;
    chain.segmentBytes = orderedChainSegmentBytes(opts.segmentBytes, bytes);
    return runPhase(
        ch, ctx, kChain, chain, [&] { return orderedChainAllreduce(ch.rank(), n, count, avg); },
        {static_cast<uint8_t*>(data)}, avg);
  }
  if (orderedRelayServes(n, bytes, ch.hostOf())) {
    return runPhase(
        ch, ctx, kRelay, opts, [&] { return orderedRelay(ch.rank(), n, 0, count, avg, /*toAll=*/true); },
        {static_cast<uint8_t*>(data)}, avg);
  }
  Chunks c = chunksOf(data, splitEven(count, n), dtype, ch.rank());
  foldAtOwners(ch, ctx, opts, c);
  runPhase(ch, ctx, kFromOwners, opts, [&] { return orderedFromOwners(ch.rank(), n, c.counts); }, c.blocks);
}

void orderedReduceScatter(Channel& ch, void* work, int64_t perRank, DataType dtype, ReduceOp op,
                          const CollectiveOptions& opts) {
  const int n = ch.size();
  Communicator& comm = orderedLinks(ch, CollectiveKind::ReduceScatter);
  const ExecContext ctx = contextFor(opts, CollectiveKind::ReduceScatter, dtype, perRank, op, n);
  if (sharedWindowBytes(comm) > 0) return sharedReduceScatter(comm, work, perRank, ctx);
  Chunks c = chunksOf(work, std::vector<int64_t>(n, perRank), dtype, ch.rank());
  foldAtOwners(ch, ctx, opts, c);
}

}  // namespace

bool orderedRun(Channel& ch, const NativeCall& call, double premulFactor, const CollectiveOptions& opts) {
  const int n = ch.size();
  const bool scatter = call.kind == CollectiveKind::ReduceScatter;
  const int64_t bytes = call.count * static_cast<int64_t>(elementSize(call.dtype));
  const bool reduce = call.kind == CollectiveKind::Reduce;
  const bool star = reduce && orderedStarServes(n, bytes);
  const bool relay = reduce && !star && orderedRelayServes(n, bytes, ch.hostOf());
  if (call.kind != CollectiveKind::Allreduce && !scatter && !star && !relay) return false;  // the entry's chain
  if (call.op == ReduceOp::PremulSum) {
    void* data = scatter ? const_cast<void*>(call.send) : call.recv;
    ch.reducer().scale(data, scatter ? call.count * n : call.count, call.dtype, premulFactor);
    ch.reducer().fence();
  }
  if (scatter) {
    orderedReduceScatter(ch, const_cast<void*>(call.send), call.count, call.dtype, call.op, opts);
  } else if (reduce) {
    ExecContext ctx = contextFor(opts, CollectiveKind::Reduce, call.dtype, call.count, call.op, n);
    ctx.root = call.root;
    orderedLinks(ch, CollectiveKind::Reduce);
    if (star) {
      foldAtRoot(ch, ctx, opts, call.recv, call.count, call.root);
    } else {
      const bool avg = call.op == ReduceOp::Avg;
      runPhase(
          ch, ctx, kRelay, opts,
          [&] { return orderedRelay(ch.rank(), n, call.root, call.count, avg, /*toAll=*/false); },
          {static_cast<uint8_t*>(call.recv)}, avg);
    }
  } else {
    orderedAllreduce(ch, call.recv, call.count, call.dtype, call.op, opts);
  }
  return true;
}

}  // namespace scalecomm
