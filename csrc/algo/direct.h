// scalecomm algo: direct (one-shot) allreduce for small messages.
//
// Reduce-scatter: every rank sends chunk q of its buffer straight to rank q
// and reduces the n-1 copies of its own chunk (in a fixed peer order, so the
// result is deterministic); allgather: every rank sends its reduced chunk to
// every other rank.
//   bytes sent per rank: 2 (n-1)/n N (as ring)
//   latency: 2 alpha, with n-1 messages in flight per rank per step
// Best for small N, where ring's 2(n-1) latency terms dominate; the all-pairs
// traffic makes it worse than ring for large N on shared links.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule directAllreduce(int rank, int n, int64_t count, bool finalize);

}  // namespace scalecomm
