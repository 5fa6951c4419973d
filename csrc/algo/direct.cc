#include "algo/direct.h"

#include "core/error.h"

namespace scalecomm {

Schedule directAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  Schedule s;
  s.algorithm = "direct";
  s.blockCounts = splitEven(count, n);
  ScheduleStep rs, ag;
  for (int k = 1; k < n; ++k) {
    const int to = (rank + k) % n, from = (rank - k + n) % n;
    rs.ops.push_back({OpKind::Send, to, to});
    rs.ops.push_back({OpKind::RecvReduce, from, rank});
  }
  if (n > 1) s.steps.push_back(rs);
  if (finalize) s.steps.push_back({{{OpKind::Finalize, -1, rank}}});
  for (int k = 1; k < n; ++k) {
    const int to = (rank + k) % n, from = (rank - k + n) % n;
    ag.ops.push_back({OpKind::Send, to, rank});
    ag.ops.push_back({OpKind::Recv, from, from});
  }
  if (n > 1) s.steps.push_back(ag);
  return s;
}

}  // namespace scalecomm
