// scalecomm algo: schedules of rooted collectives and of exchanges.
//
// Chain reduce (root): the ring opened at the root, run backwards: the rank
// farthest from the root sends its buffer to the next one, which reduces and
// forwards, segment by segment (pipelined), until the root holds the result.
//   bytes sent per rank: N; time ~ (n-1 + S) alpha_seg for S segments.
// Ring reduce-scatter (n equal blocks): n-1 steps, rank r ends owning block r.
//   bytes sent per rank: (n-1)/n N; latency (n-1) alpha.
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

Schedule chainReduce(int rank, int n, int root, int64_t count, bool finalize);
Schedule ringReduceScatter(int rank, int n, int64_t perRank, bool finalize);
Schedule directGather(int rank, int n, int root, int64_t perRank);
Schedule directScatter(int rank, int n, int root, int64_t perRank);
Schedule directAlltoall(int rank, int n, const std::vector<int64_t>& sendCounts,
                        const std::vector<int64_t>& recvCounts);

}  // namespace scalecomm
