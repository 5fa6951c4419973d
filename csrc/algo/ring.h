// scalecomm algo: ring schedules.
//
// Ring allreduce (n ranks, N bytes): reduce-scatter then allgather around the
// ring, each n-1 steps of one chunk (N/n bytes) to the right neighbour.
//   bytes sent per rank: 2 (n-1)/n N      latency: 2 (n-1) alpha
//   optimal bandwidth term; latency grows linearly in n.
// Ring allgather (n blocks of N/n): n-1 steps, (n-1)/n N bytes per rank.
// Ring reduce-scatter (n equal blocks): n-1 steps, rank r ends owning block r.
//   bytes sent per rank: (n-1)/n N; latency (n-1) alpha.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule ringAllreduce(int rank, int n, int64_t count, bool finalize);
// blocks[i] is rank i's contribution of `perRank` elements.
Schedule ringAllgather(int rank, int n, int64_t perRank);
Schedule ringReduceScatter(int rank, int n, int64_t perRank, bool finalize);

}  // namespace scalecomm
