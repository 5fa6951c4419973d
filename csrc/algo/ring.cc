#include "algo/ring.h"

#include "core/error.h"

namespace scalecomm {

std::vector<int64_t> splitEven(int64_t count, int n) {
  std::vector<int64_t> out(n, count / n);
  for (int64_t i = 0; i < count % n; ++i) out[i] += 1;
  return out;
}

Schedule ringAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  Schedule s;
  s.algorithm = "ring";
  s.blockCounts = splitEven(count, n);
  const int right = modRank(rank + 1, n), left = modRank(rank - 1, n);
  for (int k = 0; k < n - 1; ++k) {  // reduce-scatter
    s.steps.push_back(
        {{{OpKind::Send, right, modRank(rank - k, n)}, {OpKind::RecvReduce, left, modRank(rank - k - 1, n)}}});
  }
  if (finalize) s.steps.push_back({{{OpKind::Finalize, -1, modRank(rank + 1, n)}}});
  for (int k = 0; k < n - 1; ++k) {  // allgather
    s.steps.push_back({{{OpKind::Send, right, modRank(rank + 1 - k, n)}, {OpKind::Recv, left, modRank(rank - k, n)}}});
  }
  return s;
}

Schedule ringAllgather(int rank, int n, int64_t perRank) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && perRank >= 0);
  Schedule s;
  s.algorithm = "ring";
  s.blockCounts.assign(n, perRank);
  const int right = modRank(rank + 1, n), left = modRank(rank - 1, n);
  for (int k = 0; k < n - 1; ++k) {
    s.steps.push_back({{{OpKind::Send, right, modRank(rank - k, n)}, {OpKind::Recv, left, modRank(rank - k - 1, n)}}});
  }
  return s;
}

Schedule chainBroadcast(int rank, int n, int root, int64_t count) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "chain";
  s.blockCounts = {count};
  const int pos = modRank(rank - root, n);
  ScheduleStep step;
  if (pos > 0) step.ops.push_back({OpKind::Recv, modRank(rank - 1, n), 0});
  if (pos < n - 1) step.ops.push_back({OpKind::Send, modRank(rank + 1, n), 0});
  if (!step.ops.empty()) s.steps.push_back(step);
  return s;
}

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
