#include "algo/ps.h"

#include "core/error.h"

namespace scalecomm {

Schedule psAllreduce(int rank, int n, int64_t count, bool finalize, int servers) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  SC_CHECK(servers >= 1 && servers <= n, "parameter-server count ", servers, " must lie in [1, ", n, "]");
  Schedule s;
  s.algorithm = "ps";
  s.blockCounts = splitEven(count, servers);
  const bool isServer = rank < servers;
  ScheduleStep push, fin, pull;
  for (int j = 0; j < servers; ++j) {
    if (j != rank) push.ops.push_back({OpKind::Send, j, j});
  }
  if (isServer) {
    for (int k = 1; k < n; ++k) push.ops.push_back({OpKind::RecvReduce, modRank(rank + k, n), rank});
    if (finalize) fin.ops.push_back({OpKind::Finalize, -1, rank});
    for (int k = 1; k < n; ++k) pull.ops.push_back({OpKind::Send, modRank(rank + k, n), rank});
  }
  for (int j = 0; j < servers; ++j) {
    if (j != rank) pull.ops.push_back({OpKind::Recv, j, j});
  }
  if (n == 1) return s;
  s.steps.push_back(push);
  if (finalize) s.steps.push_back(fin);
  s.steps.push_back(pull);
  return s;
}

}  // namespace scalecomm
