// scalecomm algo: collectives on the ranks' shared windows (one host).
//
// Contract: where every rank of the group shares this host's memory the
// Communicator holds every rank's window (transport/shm.h). A `shared`
// allreduce copies this rank's input into its own window once, publishes it,
// waits until every peer has published the same call, and reduces straight
// out of the peers' windows into its output: one flag round and one copy per
// byte, where a ring over shm links takes 2(n-1) steps of two copies each.
// Every rank folds the inputs in rank order in one pass (foldInto), so all
// ranks hold bitwise the same result. A message
// that sharedInSlices() sends in slices goes in chunks of n slices (a
// window's worth, or the message split evenly where shorter; cache-line
// aligned), one window call per chunk plus one to finish: every rank copies
// in the slices its peers fold; rank r folds slice r of every rank's chunk,
// in rank order, into its next call's window data and its output; in the
// next call every rank copies each slice out of its owner's window (one rank computes each
// slice, so all hold the same bits). A `shared` barrier is the flag round
// alone.
// Each call's header (a WireHeader: collective, seq, dtype, op, count)
// is checked against every peer's, so ranks that disagree on the collective,
// its order or its arguments get Error(InvalidArgument) naming both sides,
// as over the links; a rank waiting over the links looks at its peers'
// windows the same way (Channel::peerOnWindow, algo/executor.cc), and one
// waiting on the windows at its late peers' links. Waiting: spin, yield, sleep (Communicator::idle); a dead
// or closed peer raises Error(Io), abort() Error(Aborted), ctx.deadline
// Error(Timeout) naming the ranks that have not arrived. After an error the
// caller must poison the group (a window may hold a partial call).
// Thread safety: one call at a time per Communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/executor.h"
#include "comm/communicator.h"

namespace scalecomm {

// Bytes one shared call carries on this communicator; 0 without windows.
int64_t sharedWindowBytes(const Communicator& comm);

// Whether a shared allreduce of `bytes` on n ranks runs in slices (every
// rank folds 1/n and copies the rest out: 2 (n-1)/n of the message read
// across cores, in two flag rounds per chunk and one more) rather than in
// one call (every rank reads all n inputs: (n-1) across cores). Above the
// window always; from 3 ranks also above kSlicesFromBytes, where reading
// every peer's input cost more than the extra flag round (measured: 1.7x-2x
// faster at 256-512 KiB on 3-4 ranks, docs/performance.md).
constexpr int64_t kSlicesFromBytes = 128 * 1024;
inline bool sharedInSlices(int n, int64_t bytes, int64_t windowBytes) {
  return n > 1 && (bytes > windowBytes || (n > 2 && bytes > kSlicesFromBytes));
}

// In place, any count; ctx.op is the reduction (Avg divides by the world size
// at the end; PremulSum's scaling is the caller's).
void sharedAllreduce(Communicator& comm, void* data, int64_t count, const ExecContext& ctx);

// `work` holds n blocks of perRank elements; block `rank` ends as the fold,
// in rank order, of every rank's block `rank` (the others are left as they
// were). In window-sized chunks, one flag round each (a deterministic
// group's reduce_scatter, algo/ordered.h).
void sharedReduceScatter(Communicator& comm, void* work, int64_t perRank, const ExecContext& ctx);

void sharedBarrier(Communicator& comm, const ExecContext& ctx);

}  // namespace scalecomm
