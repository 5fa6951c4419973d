// scalecomm algo: ring and chain schedules.
//
// Ring allreduce (n ranks, N bytes): reduce-scatter then allgather around the
// ring, each n-1 steps of one chunk (N/n bytes) to the right neighbour.
//   bytes sent per rank: 2 (n-1)/n N      latency: 2 (n-1) alpha
//   optimal bandwidth term; latency grows linearly in n.
// Ring allgather (n blocks of N/n): n-1 steps, (n-1)/n N bytes per rank.
// Chain broadcast: the ring opened at the root; the buffer streams through in
// segments, so time ~ (n-1 + S) alpha_seg for S segments (pipelined).
// Dissemination barrier: ceil(log2 n) steps of a 1-byte token to rank+2^k.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule ringAllreduce(int rank, int n, int64_t count, bool finalize);
// blocks[i] is rank i's contribution of `perRank` elements.
Schedule ringAllgather(int rank, int n, int64_t perRank);
Schedule chainBroadcast(int rank, int n, int root, int64_t count);
Schedule disseminationBarrier(int rank, int n);

}  // namespace scalecomm
