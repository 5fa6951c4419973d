#include "algo/shared.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "comm/reducer.h"
#include "comm/stream_channel.h"
#include "comm/wire.h"
#include "core/error.h"
#include "core/spin.h"

namespace scalecomm {

static_assert(sizeof(WireHeader) == kWindowHeaderBytes, "a window call's header is a wire header");

int64_t sharedWindowBytes(const Communicator& comm) {
  return comm.windows() != nullptr ? comm.windows()->windowBytes() : 0;
}

namespace {

constexpr int kQuickPolls = 512;
constexpr int64_t kCacheLine = 64;

ShmWindows& windowsOf(Communicator& comm, const ExecContext& ctx) {
  ShmWindows* w = comm.windows();
  if (w == nullptr) {
    fail(ErrorKind::InvalidArgument, describe(ctx, comm.rank()),
         ": algorithm shared needs every rank of the group on this host, linked by shared memory, with "
         "SCALECOMM_SHM_WINDOW_BYTES > 0; choose auto or ring");
  }
  return *w;
}

WireHeader headerOf(const ExecContext& ctx, int64_t bytes) {
  WireHeader h = collectiveHeader(ctx);
  h.payloadBytes = bytes;
  return h;
}

// Whether the peer's next message over its link belongs to this exchange
// (seq and part): then it runs it over the links while this rank is on the
// windows.
void checkPeerNotOnLinks(Communicator& comm, int peer, const WireHeader& mine, const ExecContext& ctx) {
  WireHeader next;
  if (comm.link(peer).peek(&next, sizeof(next)) != sizeof(next)) return;
  if (next.magic == kWireMagic && next.seq == mine.seq && next.part == mine.part &&
      next.collective != static_cast<uint8_t>(CollectiveKind::SendRecv)) {
    failHeaderMismatch(ctx, comm.rank(), peer, next, mine);
  }
}

[[noreturn]] void failTimeout(Communicator& comm, ShmWindows& w, uint64_t call, const ExecContext& ctx) {
  std::ostringstream late;
  for (int q = 0; q < w.size(); ++q) {
    const uint64_t posted = w.posted(q).load(std::memory_order_acquire);
    if (q == w.rank() || posted >= call) continue;
    late << (late.tellp() > 0 ? ", " : "") << "rank " << q << " (" << call - posted << " shared call"
         << (call - posted == 1 ? "" : "s") << " behind)";
  }
  fail(ErrorKind::Timeout, describe(ctx, comm.rank()), ": Timed out after ", ctx.call.timeoutMs, " ms waiting for ",
       late.str(), " to publish its part in the shared window. That rank may not have called ",
       collectiveName(ctx.collective),
       ", or is slow, stuck or dead. The group is unusable now: destroy it and create a new one "
       "(raise the timeout with init_process_group(timeout=...) if the peer is just slow).");
}

// After a window call that every peer has posted: a collective's message
// that a peer sent this rank over a link for an earlier call and this rank
// never received means the ranks ran that call differently (a broadcast or
// scatter whose root differed: each root sent and returned). Every message
// a peer sent before posting this call is in the link by now (shm rings take
// it whole, or the peer would still be sending), and this rank received
// every message of its own earlier calls, so the next one on a link, unless
// point-to-point, belongs to this call or a later one. Looked at only when
// this rank moved a collective's message over links since its last look.
void checkNoUnreceivedMessages(Communicator& comm, const WireHeader& mine, const ExecContext& ctx) {
  if (mine.seq == 0 || !comm.channel().takeCollectiveTraffic()) return;
  for (int q = 0; q < comm.size(); ++q) {
    if (q == comm.rank() || !comm.hasLink(q)) continue;
    WireHeader next;
    if (comm.link(q).peek(&next, sizeof(next)) != sizeof(next)) continue;
    if (next.magic != kWireMagic || isLeave(next) || next.seq >= mine.seq ||
        next.collective == static_cast<uint8_t>(CollectiveKind::SendRecv))
      continue;
    failHeaderMismatch(ctx, comm.rank(), q, next, mine);  // an earlier call's message: never received
  }
}

// Publishes this rank's header and data of `call` and waits until every peer has
// published theirs; then checks their headers against ours.
void exchange(Communicator& comm, ShmWindows& w, uint64_t call, const WireHeader& mine, const ExecContext& ctx) {
  const int n = w.size();
  const int rank = w.rank();
  std::memcpy(w.header(rank, call), &mine, sizeof(mine));
  w.post(call);
  auto arrived = [&] {
    for (int q = 0; q < n; ++q) {
      if (q != rank && w.posted(q).load(std::memory_order_acquire) < call) return false;
    }
    return true;
  };
  // A peer already in this call arrives within a few cache-line transfers:
  // poll with nothing else in the loop first, then take the slow path
  // (clock, liveness, abort, the idle ladder). Not where waiting must not
  // spin (more ranks than cores): there the peer needs this core to arrive.
  const int quickPolls = comm.spinMicros() > 0 ? kQuickPolls : 0;
  for (int i = 0; i < quickPolls && !arrived(); ++i) SC_CPU_RELAX();
  if (!arrived()) {
    const Clock::time_point since = Clock::now();
    const std::function<bool()> allArrived = arrived;  // idle's re-check before it sleeps (built once)
    thread_local std::vector<int> late;
    for (;;) {
      late.clear();
      for (int q = 0; q < n; ++q) {
        if (q != rank && w.posted(q).load(std::memory_order_acquire) < call) late.push_back(q);
      }
      if (late.empty()) break;
      for (int q : late) {
        try {
          comm.link(q).checkPeer();
        } catch (const Error&) {
          // A peer may publish, finish and close its links (destroy its group)
          // between our look at its counter and this check: its window stays
          // mapped here, so only a peer that never published is an error.
          if (w.posted(q).load(std::memory_order_acquire) < call) {
            failIfPeerExplains(comm.channel(), q, ctx, mine);
            throw;
          }
        }
        if (mine.seq != 0) checkPeerNotOnLinks(comm, q, mine, ctx);
      }
      if (ctx.call.deadline.expired()) failTimeout(comm, w, call, ctx);
      comm.idle(late, since, allArrived);
    }
    if (ctx.call.trace != nullptr) {
      ctx.call.trace->idle(
          std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count(),
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
    }
  }
  for (int q = 0; q < n; ++q) {
    if (q == rank) continue;
    WireHeader got;
    std::memcpy(&got, w.header(q, call), sizeof(got));
    if (std::memcmp(&got, &mine, sizeof(got)) != 0) failHeaderMismatch(ctx, rank, q, got, mine);
  }
  checkNoUnreceivedMessages(comm, mine, ctx);
}

// A message larger than the window, in chunks of n slices (slice q starts on
// a cache line; every chunk uses the same slice offsets, the last one clamps
// them), one window call per chunk plus one to finish, each a chunk's bytes
// of the log. Call k carries, in this rank's window data, its input slices
// q != r of chunk k (for their owners) and, in its own slice's place, its
// result for slice r of chunk k-1. After the exchange it copies every peer's
// chunk k-1 result slice out of that peer's data, then folds slice r of chunk
// k in rank order (its own input read in place, the peers' from their data)
// into slice r of its next call's data and into its output, both written in
// the one pass (foldInto). The next call's data is free to
// write: it overlaps neither call k's nor, as every peer has published call
// k, anything a peer still reads. A byte of the
// user's buffer is read once and written once (the memory traffic of one
// memcpy); each slice is computed by one rank, so every rank holds the same
// bits.
void allreduceInChunks(Communicator& comm, ShmWindows& w, uint8_t* data, int64_t count, const ExecContext& ctx) {
  const int n = w.size();
  const int rank = w.rank();
  const auto es = static_cast<int64_t>(elementSize(ctx.dtype));
  const int64_t unit = std::max<int64_t>(1, kCacheLine / es);  // elements per cache line
  const int64_t perRank = w.windowBytes() / es / n;
  // A slice per rank of a window-sized chunk, or of the message where that is
  // shorter (cache-line units either way, where the window allows).
  const int64_t even = ((count + n - 1) / n + unit - 1) / unit * unit;
  const int64_t slice = perRank >= unit ? std::min(perRank / unit * unit, even) : perRank;  // elements
  if (slice == 0) {
    fail(ErrorKind::InvalidArgument, describe(ctx, comm.rank()), ": algorithm shared needs a window of at least ",
         n * es, " bytes for ", n, " ranks of ", dataTypeName(ctx.dtype), " (SCALECOMM_SHM_WINDOW_BYTES is ",
         w.windowBytes(), "); raise it or choose auto or ring");
  }
  const int64_t chunk = slice * n;
  const int64_t chunks = (count + chunk - 1) / chunk;
  const int64_t chunkBytes = chunk * es;  // every call of the message takes this much of the log
  // Slice q of chunk k: elements [k*chunk + q*slice, + len(k, q)) of the
  // buffer, bytes [q*slice*es, + len*es) of a call's window data.
  const auto len = [&](int64_t k, int q) { return std::clamp<int64_t>(count - k * chunk - q * slice, 0, slice); };
  const auto bytesAt = [&](int q) { return q * slice * es; };
  const auto chunkAt = [&](int64_t k) { return data + k * chunk * es; };
  thread_local std::vector<const void*> inputs;  // no allocation per call
  inputs.resize(n);
  for (int64_t k = 0; k <= chunks; ++k) {
    const uint64_t call = w.nextCall(chunkBytes);
    if (k < chunks) {
      for (int q = 0; q < n; ++q) {
        if (q != rank) std::memcpy(w.data(rank) + bytesAt(q), chunkAt(k) + bytesAt(q), len(k, q) * es);
      }
    }
    const int64_t m = std::min(chunk, count - k * chunk);
    exchange(comm, w, call, headerOf(ctx, std::max<int64_t>(m, 0) * es), ctx);
    if (k > 0) {  // chunk k-1's results, one slice from each peer
      uint8_t* prev = chunkAt(k - 1);
      for (int q = 0; q < n; ++q) {
        if (q != rank) std::memcpy(prev + bytesAt(q), w.data(q) + bytesAt(q), len(k - 1, q) * es);
      }
    }
    if (k == chunks || len(k, rank) == 0) continue;
    const int64_t mine = len(k, rank);
    const int64_t at = bytesAt(rank);
    uint8_t* own = chunkAt(k) + at;
    for (int q = 0; q < n; ++q) inputs[q] = q == rank ? own : w.data(q) + at;
    foldInto(w.nextData(rank, chunkBytes) + at, own, inputs.data(), n, mine, ctx.dtype, ctx.op, ctx.finalizeDivisor);
  }
}

void allreduceOnWindows(Communicator& comm, void* data, int64_t count, const ExecContext& ctx) {
  ShmWindows& w = windowsOf(comm, ctx);
  const int n = w.size();
  const int rank = w.rank();
  if (n == 1) return;  // the data is the result (Avg divides by 1)
  const int64_t bytes = count * static_cast<int64_t>(elementSize(ctx.dtype));
  if (sharedInSlices(n, bytes, w.windowBytes()))
    return allreduceInChunks(comm, w, static_cast<uint8_t*>(data), count, ctx);
  const uint64_t call = w.nextCall(bytes);
  std::memcpy(w.data(rank), data, static_cast<size_t>(bytes));
  exchange(comm, w, call, headerOf(ctx, bytes), ctx);
  if (n == 2 && ctx.finalizeDivisor <= 1) {  // in place from the peer's window alone: a op b == b op a
    reduceInto(data, w.data(1 - rank), count, ctx.dtype, ctx.op);
    return;
  }
  thread_local std::vector<const void*> inputs;
  inputs.resize(n);
  for (int q = 0; q < n; ++q) inputs[q] = w.data(q);  // in rank order on every rank: the same bits
  foldInto(data, nullptr, inputs.data(), n, count, ctx.dtype, ctx.op, ctx.finalizeDivisor);
}

// Reduce-scatter: block q of every rank's `work` (perRank elements each)
// folded in rank order into block q of rank q's. In chunks as
// allreduceInChunks, but slice q of chunk k is elements [k*slice, +slice)
// of block q, and no results come back: one window call per chunk. Each
// byte of the input is read once (copied in, or folded from in place), and
// each rank writes its own block.
void reduceScatterOnWindows(Communicator& comm, uint8_t* work, int64_t perRank, const ExecContext& ctx) {
  ShmWindows& w = windowsOf(comm, ctx);
  const int n = w.size();
  const int rank = w.rank();
  if (n == 1 || perRank == 0) return;
  const auto es = static_cast<int64_t>(elementSize(ctx.dtype));
  const int64_t unit = std::max<int64_t>(1, kCacheLine / es);
  const int64_t perSlot = w.windowBytes() / es / n;
  const int64_t even = (perRank + unit - 1) / unit * unit;
  const int64_t slice = perSlot >= unit ? std::min(perSlot / unit * unit, even) : perSlot;
  if (slice == 0) {
    fail(ErrorKind::InvalidArgument, describe(ctx, comm.rank()), ": algorithm shared needs a window of at least ",
         n * es, " bytes for ", n, " ranks of ", dataTypeName(ctx.dtype), " (SCALECOMM_SHM_WINDOW_BYTES is ",
         w.windowBytes(), "); raise it or turn deterministic off");
  }
  const int64_t chunkBytes = slice * n * es;
  const int64_t chunks = (perRank + slice - 1) / slice;
  const auto at = [&](int q, int64_t k) { return work + (q * perRank + k * slice) * es; };
  thread_local std::vector<const void*> inputs;
  inputs.resize(n);
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t len = std::min(slice, perRank - k * slice);
    const uint64_t call = w.nextCall(chunkBytes);
    for (int q = 0; q < n; ++q) {
      if (q != rank) std::memcpy(w.data(rank) + q * slice * es, at(q, k), len * es);
    }
    exchange(comm, w, call, headerOf(ctx, len * n * es), ctx);
    uint8_t* own = at(rank, k);
    if (n == 2 && ctx.finalizeDivisor <= 1) {  // in place from the peer's window alone: a op b == b op a
      reduceInto(own, w.data(1 - rank) + rank * slice * es, len, ctx.dtype, ctx.op);
      continue;
    }
    for (int q = 0; q < n; ++q) inputs[q] = q == rank ? own : w.data(q) + rank * slice * es;
    foldInto(own, nullptr, inputs.data(), n, len, ctx.dtype, ctx.op, ctx.finalizeDivisor);  // in place
  }
}

}  // namespace

void sharedReduceScatter(Communicator& comm, void* work, int64_t perRank, const ExecContext& ctx) {
  describedErrors(ctx, comm.rank(), [&] { reduceScatterOnWindows(comm, static_cast<uint8_t*>(work), perRank, ctx); });
}

void sharedAllreduce(Communicator& comm, void* data, int64_t count, const ExecContext& ctx) {
  describedErrors(ctx, comm.rank(), [&] { allreduceOnWindows(comm, data, count, ctx); });
}

void sharedBarrier(Communicator& comm, const ExecContext& ctx) {
  describedErrors(ctx, comm.rank(), [&] {
    ShmWindows& w = windowsOf(comm, ctx);
    exchange(comm, w, w.nextCall(0), headerOf(ctx, 0), ctx);
  });
}

}  // namespace scalecomm
