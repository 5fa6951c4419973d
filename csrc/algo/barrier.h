// scalecomm algo: barrier schedule.
//
// Dissemination barrier: ceil(log2 n) steps; in step k every rank sends a
// 1-byte token to rank + 2^k and waits for the one from rank - 2^k. After the
// last step every rank has (transitively) heard from every other.
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule disseminationBarrier(int rank, int n);

}  // namespace scalecomm
