#include "algo/hier.h"

#include <map>

#include "algo/ring.h"
#include "core/error.h"

namespace scalecomm {

Schedule hierAllreduce(int rank, int n, int64_t count, bool finalize, const std::vector<int>& hostOf) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  SC_CHECK(hostOf.empty() || static_cast<int>(hostOf.size()) == n, "hostOf has ", hostOf.size(), " entries for ", n,
           " ranks");
  auto host = [&](int r) { return hostOf.empty() ? 0 : hostOf[r]; };
  std::map<int, int> leaderOfHost;  // host id -> lowest rank, ordered by host id
  for (int r = n - 1; r >= 0; --r) leaderOfHost[host(r)] = r;
  std::vector<int> leaders;  // ring order: by leader rank
  for (int r = 0; r < n; ++r) {
    if (leaderOfHost[host(r)] == r) leaders.push_back(r);
  }
  const int numHosts = static_cast<int>(leaders.size());
  const int leader = leaderOfHost[host(rank)];
  int hostIndex = 0;
  while (leaders[hostIndex] != leader) ++hostIndex;

  Schedule s;
  s.algorithm = "hier";
  s.blockCounts = splitEven(count, numHosts);
  const int blocks = numHosts;
  if (n == 1) return s;

  ScheduleStep up, down;
  if (rank == leader) {
    for (int r = 0; r < n; ++r) {
      if (r == rank || host(r) != host(rank)) continue;
      for (int b = 0; b < blocks; ++b) up.ops.push_back({OpKind::RecvReduce, r, b});
      for (int b = 0; b < blocks; ++b) down.ops.push_back({OpKind::Send, r, b});
    }
  } else {
    for (int b = 0; b < blocks; ++b) up.ops.push_back({OpKind::Send, leader, b});
    for (int b = 0; b < blocks; ++b) down.ops.push_back({OpKind::Recv, leader, b});
  }
  s.steps.push_back(up);

  // The leaders' ring, its peers mapped from host index to leader rank; the
  // other ranks hold the same number of empty steps.
  Schedule ring = ringAllreduce(rank == leader ? hostIndex : 0, numHosts, count, finalize);
  for (ScheduleStep& step : ring.steps) {
    if (rank != leader) {
      step.ops.clear();
    } else {
      for (ScheduleOp& op : step.ops) {
        if (op.kind != OpKind::Finalize) op.peer = leaders[op.peer];
      }
    }
    s.steps.push_back(step);
  }
  s.steps.push_back(down);
  return s;
}

}  // namespace scalecomm
