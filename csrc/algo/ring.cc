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

Schedule ringReduceScatter(int rank, int n, int64_t perRank, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && perRank >= 0);
  Schedule s;
  s.algorithm = "ring";
  s.blockCounts.assign(n, perRank);
  const int right = modRank(rank + 1, n), left = modRank(rank - 1, n);
  for (int k = 0; k < n - 1; ++k) {
    s.steps.push_back(
        {{{OpKind::Send, right, modRank(rank - 1 - k, n)}, {OpKind::RecvReduce, left, modRank(rank - 2 - k, n)}}});
  }
  if (finalize) s.steps.push_back({{{OpKind::Finalize, -1, rank}}});
  return s;
}

}  // namespace scalecomm
