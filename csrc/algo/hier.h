// scalecomm algo: two-level (hierarchical) allreduce.
//
// Ranks are grouped by host (hostOf[r], e.g. from the rendezvous); each host's
// lowest rank is its leader. With H hosts, L_h ranks on host h and N bytes,
// in H blocks (one per leader in the ring):
//   1. intra reduce (one step): every non-leader sends its buffer to its
//      leader, which reduces the L_h - 1 copies into its own (shm, fast);
//   2. inter ring allreduce among the H leaders (2 (H-1) steps of N/H), the
//      only traffic that crosses hosts [then the AVG finalize];
//   3. intra broadcast (one step): the leader sends the result to its ranks.
//   inter-host bytes per leader: 2 (H-1)/H N (instead of every rank crossing)
//   latency: 2 alpha_intra + 2 (H-1) alpha_inter
// Pays when hosts hold several ranks and the links between hosts are much
// slower than shared memory; on one host it is a central reduce + broadcast.
// An empty hostOf means one host.
#pragma once

#include <vector>

#include "algo/schedule.h"

namespace scalecomm {

Schedule hierAllreduce(int rank, int n, int64_t count, bool finalize, const std::vector<int>& hostOf);

}  // namespace scalecomm
