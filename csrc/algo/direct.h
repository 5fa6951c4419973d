// scalecomm algo: direct (one-step, all pairs) schedules.
//
// Direct allreduce: reduce-scatter in which every rank sends chunk q of its
// buffer straight to rank q and reduces the n-1 copies of its own chunk (in a
// fixed peer order, so the result is deterministic); then an allgather in
// which every rank sends its reduced chunk to every other rank.
//   bytes sent per rank: 2 (n-1)/n N (as ring)
//   latency: 2 alpha, with n-1 messages in flight per rank per step
// Best for small N, where ring's 2(n-1) latency terms dominate; the all-pairs
// traffic makes it worse than ring for large N on shared links.
// Direct gather / scatter (root): every non-root rank exchanges its block with
// the root in one step; the root has n-1 messages in flight.
//   bytes at the root: (n-1)/n N; latency: alpha (+ n-1 message overheads).
// Direct all-to-all: every rank sends block q of its input to rank q and
// receives block q of its output from rank q, all in one step; blocks may
// have different sizes (uneven splits); block q of the output is block
// n + q of the schedule.
#pragma once

#include <vector>

#include "algo/schedule.h"

namespace scalecomm {

Schedule directAllreduce(int rank, int n, int64_t count, bool finalize);
Schedule directGather(int rank, int n, int root, int64_t perRank);
Schedule directScatter(int rank, int n, int root, int64_t perRank);
Schedule directAlltoall(int rank, int n, const std::vector<int64_t>& sendCounts,
                        const std::vector<int64_t>& recvCounts);

}  // namespace scalecomm
