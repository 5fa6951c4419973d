// scalecomm algo: chain schedules of the rooted collectives.
//
// Chain broadcast: the ring opened at the root; the buffer streams through in
// segments, so time ~ (n-1 + S) alpha_seg for S segments (pipelined).
// Chain reduce: the same chain run backwards: the rank farthest from the root
// sends its buffer to the next one, which reduces and forwards, segment by
// segment, until the root holds the result.
//   bytes sent per rank: N; time ~ (n-1 + S) alpha_seg for S segments.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule chainBroadcast(int rank, int n, int root, int64_t count);
Schedule chainReduce(int rank, int n, int root, int64_t count, bool finalize);

}  // namespace scalecomm
