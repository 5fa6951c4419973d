// scalecomm algo: parameter-server allreduce, centralised or sharded.
//
// S server ranks (0..S-1, 1 <= S <= n) each own one of S near-equal slices of
// the buffer. Push (one step): every rank sends slice j to server j, and
// server j reduces the n-1 slices it receives into its own. [Finalize at the
// servers.] Pull (one step): server j sends its reduced slice to every other
// rank. S = 1 is the classic central server; S = n equals `direct`; between
// them is the sharded server of BytePS with servers co-located on workers.
//   bytes a server receives and sends: (n-1) N / S; a worker: N - N/S each way
//   latency: 2 alpha (+ n-1 message overheads at each server)
// The servers are the bottleneck unless S is close to n; a central server
// is the baseline that every ring and tree is measured against.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule psAllreduce(int rank, int n, int64_t count, bool finalize, int servers);

}  // namespace scalecomm
