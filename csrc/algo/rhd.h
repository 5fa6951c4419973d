// scalecomm algo: recursive halving-doubling allreduce (Rabenseifner).
//
// n ranks, p = largest power of two <= n, r = n - p extra ranks, N bytes.
// Fold (only when r > 0): of each pair (2i, 2i+1), i < r, the even rank sends
// its whole buffer to the odd one, which reduces it and stands for both.
// Reduce-scatter by recursive halving among the p ranks: log2 p steps; at the
// step with distance d a rank exchanges half of its current range with the
// partner (rank XOR d) and reduces the half it keeps; it ends owning block
// newRank of p blocks. Allgather by recursive doubling mirrors it. Unfold: the
// odd rank sends the result back to its even partner.
//   bytes sent per rank: 2 (p-1)/p N (+ N for fold and unfold ranks)
//   latency: 2 log2(p) alpha (+ 2 alpha when n is not a power of two)
// Fewer steps than ring (log vs linear in n); same bandwidth term for powers
// of two; the fold costs extra bandwidth otherwise.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule rhdAllreduce(int rank, int n, int64_t count, bool finalize);

}  // namespace scalecomm
