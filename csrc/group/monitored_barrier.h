// scalecomm group: the monitored barrier (torch.distributed.monitored_barrier).
//
// Contract: rank 0 hears from every rank, then releases them; a rank that
// does not arrive within the deadline is named in the error on rank 0 (all
// missing ranks with waitAllRanks), and the others then time out waiting for
// rank 0. Built from point-to-point messages: outSeq[r] is this rank's next
// per-pair number towards r (rank 0: every peer; others: rank 0), and
// received[r] counts the messages received from r (advanced here). Messages
// follow gloo's wording, which users and PyTorch's tests search for.
// Runs on the group's executing thread.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/collectives.h"

namespace scalecomm {

void monitoredBarrier(Communicator& comm, bool waitAllRanks, std::vector<uint64_t>& received,
                      const std::vector<uint64_t>& outSeq, const CollectiveOptions& base);

}  // namespace scalecomm
