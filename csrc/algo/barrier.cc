#include "algo/barrier.h"

#include "core/error.h"

namespace scalecomm {

Schedule disseminationBarrier(int rank, int n) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n);
  Schedule s;
  s.algorithm = "dissemination";
  s.blockCounts = {1};
  for (int dist = 1; dist < n; dist *= 2) {
    s.steps.push_back({{{OpKind::Send, modRank(rank + dist, n), 0}, {OpKind::Recv, modRank(rank - dist, n), 0}}});
  }
  return s;
}

}  // namespace scalecomm
