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

namespace {

// Every non-root rank exchanges its own block with the root in one step.
Schedule directRooted(int rank, int n, int root, int64_t perRank, bool toRoot) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && perRank >= 0);
  Schedule s;
  s.algorithm = "direct";
  s.blockCounts.assign(n, perRank);
  ScheduleStep step;
  if (rank == root) {
    for (int k = 1; k < n; ++k) {
      const int q = modRank(root + k, n);
      step.ops.push_back({toRoot ? OpKind::Recv : OpKind::Send, q, q});
    }
  } else {
    step.ops.push_back({toRoot ? OpKind::Send : OpKind::Recv, root, rank});
  }
  s.steps.push_back(step);
  return s;
}

}  // namespace

Schedule directGather(int rank, int n, int root, int64_t perRank) { return directRooted(rank, n, root, perRank, true); }

Schedule directScatter(int rank, int n, int root, int64_t perRank) {
  return directRooted(rank, n, root, perRank, false);
}

Schedule directAlltoall(int rank, int n, const std::vector<int64_t>& sendCounts,
                        const std::vector<int64_t>& recvCounts) {
  SC_CHECK(static_cast<int>(sendCounts.size()) == n && static_cast<int>(recvCounts.size()) == n);
  Schedule s;
  s.algorithm = "direct";
  s.emptyBlocksAreMessages = true;
  s.blockCounts = sendCounts;
  s.blockCounts.insert(s.blockCounts.end(), recvCounts.begin(), recvCounts.end());
  ScheduleStep step;
  for (int k = 1; k < n; ++k) {
    const int to = modRank(rank + k, n), from = modRank(rank - k, n);
    step.ops.push_back({OpKind::Send, to, to, rank});  // wire id: the sender's rank
    step.ops.push_back({OpKind::Recv, from, n + from, from});
  }
  s.steps.push_back(step);
  return s;
}

}  // namespace scalecomm
