// scalecomm algo: pairwise allreduce, the one-step allreduce of two ranks.
//
// Steps (groups of at most 2 ranks): one. Each rank sends its whole buffer to
// the other and reduces the other's into its own (segment s is reduced only
// after segment s was sent: the plan's write-after-read edge). Bytes on the
// wire per rank: count (the same as ring at n = 2); latency: one alpha (ring,
// rhd and direct take two). Both ranks compute a + b in the same IEEE
// operation (addition, multiplication, min and max are commutative), so their
// results are bitwise equal. With more ranks the reduction order would differ
// per rank, so the algorithm refuses n > 2.
#pragma once

#include <cstdint>

#include "algo/schedule.h"

namespace scalecomm {

Schedule pairwiseAllreduce(int rank, int n, int64_t count, bool finalize);

}  // namespace scalecomm
