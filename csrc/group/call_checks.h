// scalecomm group: what a call may ask for, checked before it is numbered.
//
// Contract: checkCall() raises Error(InvalidArgument) "scalecomm <name> (rank
// r): ..." naming the argument and what is allowed, for: counts (>= 0, and
// their bytes within int64), buffers present where bytes go, roots in range,
// one block per rank where the kind has them, all-to-all splits, the (op,
// dtype) pair, and an allreduce algorithm named for the call that cannot take
// its message (a size limit, or the shared windows' size `windowBytes`, 0
// when the group has none). Peers are checked where the call is numbered.
// It reads only the call; nothing is sent, so the group stays usable.
// Stateless, thread safe.
#pragma once

#include <cstdint>

#include "group/group.h"

namespace scalecomm {

void checkCall(const Call& call, int rank, int size, int64_t windowBytes);

}  // namespace scalecomm
