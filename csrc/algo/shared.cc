#include "algo/shared.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "comm/reducer.h"
#include "comm/stream_channel.h"
#include "comm/wire.h"
#include "core/error.h"
#include "core/spin.h"

namespace scalecomm {

static_assert(sizeof(WireHeader) == kWindowHeaderBytes, "a window cell's header is a wire header");

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

// Whether the peer's next message over its link belongs to this collective:
// then it runs the collective over the links while this rank is on the windows.
void checkPeerNotOnLinks(Communicator& comm, int peer, const WireHeader& mine, const ExecContext& ctx) {
  WireHeader next;
  if (comm.link(peer).peek(&next, sizeof(next)) != sizeof(next)) return;
  if (next.magic == kWireMagic && next.seq == mine.seq &&
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

// Publishes this rank's cell of `call` and waits until every peer has
// published theirs; then checks their headers against ours.
void exchange(Communicator& comm, ShmWindows& w, uint64_t call, const WireHeader& mine, const ExecContext& ctx) {
  const int n = w.size();
  const int rank = w.rank();
  std::memcpy(w.header(rank, call), &mine, sizeof(mine));
  w.posted(rank).store(call, std::memory_order_release);
  auto arrived = [&] {
    for (int q = 0; q < n; ++q) {
      if (q != rank && w.posted(q).load(std::memory_order_acquire) < call) return false;
    }
    return true;
  };
  // A peer already in this call arrives within a few cache-line transfers:
  // poll with nothing else in the loop first, then take the slow path
  // (clock, liveness, abort, the idle ladder).
  for (int i = 0; i < kQuickPolls && !arrived(); ++i) SC_CPU_RELAX();
  if (!arrived()) {
    const Clock::time_point since = Clock::now();
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
          // between our look at its counter and this check: its cell stays
          // mapped here, so only a peer that never published is an error.
          if (w.posted(q).load(std::memory_order_acquire) < call) throw;
        }
        if (mine.seq != 0) checkPeerNotOnLinks(comm, q, mine, ctx);
      }
      if (ctx.call.deadline.expired()) failTimeout(comm, w, call, ctx);
      comm.idle(late, since);
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
}

// A message larger than the window, one window-sized chunk at a time, two
// window calls per chunk. Call c: every rank copies its chunk into its cell.
// Call c+1: rank r folds slice r of every rank's call-c cell, in rank order,
// into slice r of its own call-(c+1) cell; once every rank has published that,
// every rank copies each slice out of its owner's cell. A byte is copied in
// once, read once by the rank that reduces it and copied out once per rank;
// each slice is computed by one rank, so every rank holds the same bits.
void allreduceInChunks(Communicator& comm, ShmWindows& w, uint8_t* data, int64_t count, const ExecContext& ctx) {
  const int n = w.size();
  const int rank = w.rank();
  const auto es = static_cast<int64_t>(elementSize(ctx.dtype));
  const int64_t chunk = w.windowBytes() / es;                  // elements
  const int64_t unit = std::max<int64_t>(1, kCacheLine / es);  // slices start on cache lines
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t m = std::min(chunk, count - first);
    uint8_t* mine = data + first * es;
    const WireHeader header = headerOf(ctx, m * es);
    const uint64_t in = w.nextCall();
    std::memcpy(w.data(rank, in), mine, static_cast<size_t>(m * es));
    exchange(comm, w, in, header, ctx);
    const int64_t per = (m + n - 1) / n;
    const int64_t sliceElems = (per + unit - 1) / unit * unit;
    const auto lo = [&](int q) { return std::min<int64_t>(m, q * sliceElems); };
    const auto len = [&](int q) { return lo(q + 1) - lo(q); };
    const uint64_t out = w.nextCall();
    if (len(rank) > 0) {
      const int64_t at = lo(rank) * es;
      uint8_t* dst = w.data(rank, out) + at;
      reduceFrom(dst, w.data(0, in) + at, w.data(1, in) + at, len(rank), ctx.dtype, ctx.op);
      for (int q = 2; q < n; ++q) reduceInto(dst, w.data(q, in) + at, len(rank), ctx.dtype, ctx.op);
      if (ctx.finalizeDivisor > 1) divideInPlace(dst, len(rank), ctx.dtype, ctx.finalizeDivisor);
    }
    exchange(comm, w, out, header, ctx);
    for (int q = 0; q < n; ++q) {
      const int64_t at = lo(q) * es;
      std::memcpy(mine + at, w.data(q, out) + at, static_cast<size_t>(len(q) * es));
    }
  }
}

void allreduceOnWindows(Communicator& comm, void* data, int64_t count, const ExecContext& ctx) {
  ShmWindows& w = windowsOf(comm, ctx);
  const int n = w.size();
  const int rank = w.rank();
  const int64_t bytes = count * static_cast<int64_t>(elementSize(ctx.dtype));
  if (bytes > w.windowBytes()) {
    if (n > 1) allreduceInChunks(comm, w, static_cast<uint8_t*>(data), count, ctx);
    return;
  }
  const uint64_t call = w.nextCall();
  std::memcpy(w.data(rank, call), data, static_cast<size_t>(bytes));
  exchange(comm, w, call, headerOf(ctx, bytes), ctx);
  Reducer& reducer = comm.channel().reducer();
  if (n == 2) {
    reducer.reduce(data, w.data(1 - rank, call), count, ctx.dtype, ctx.op);  // a op b == b op a
  } else {
    if (rank != 0) std::memcpy(data, w.data(0, call), static_cast<size_t>(bytes));
    for (int q = 1; q < n; ++q) reducer.reduce(data, w.data(q, call), count, ctx.dtype, ctx.op);
  }
  if (ctx.finalizeDivisor > 1) reducer.divide(data, count, ctx.dtype, ctx.finalizeDivisor);
  reducer.fence();
}

}  // namespace

void checkPeersNotOnWindows(Communicator& comm, const std::vector<int>& peers, const ExecContext& ctx) {
  ShmWindows* w = comm.windows();
  if (w == nullptr || ctx.call.seq == 0 || ctx.collective == CollectiveKind::SendRecv) return;
  for (int q : peers) {
    const uint64_t posted = w->posted(q).load(std::memory_order_acquire);
    if (posted == 0) continue;
    WireHeader got;
    std::memcpy(&got, w->header(q, posted), sizeof(got));
    if (got.magic == kWireMagic && got.seq == ctx.call.seq)
      failHeaderMismatch(ctx, comm.rank(), q, got, collectiveHeader(ctx));
  }
}

void sharedAllreduce(Communicator& comm, void* data, int64_t count, const ExecContext& ctx) {
  describedErrors(ctx, comm.rank(), [&] { allreduceOnWindows(comm, data, count, ctx); });
}

void sharedBarrier(Communicator& comm, const ExecContext& ctx) {
  describedErrors(ctx, comm.rank(), [&] {
    ShmWindows& w = windowsOf(comm, ctx);
    exchange(comm, w, w.nextCall(), headerOf(ctx, 0), ctx);
  });
}

}  // namespace scalecomm
