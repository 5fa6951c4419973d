#include "algo/chain.h"

#include "core/error.h"

namespace scalecomm {

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

Schedule chainReduce(int rank, int n, int root, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "chain";
  s.blockCounts = {count};
  const int pos = modRank(rank - root, n);
  ScheduleStep step;
  if (pos < n - 1) step.ops.push_back({OpKind::RecvReduce, modRank(rank + 1, n), 0});
  if (pos > 0) step.ops.push_back({OpKind::Send, modRank(rank - 1, n), 0});
  s.steps.push_back(step);
  // Every rank has the same step count, because the step travels in headers.
  ScheduleStep fin;
  if (finalize && pos == 0) fin.ops.push_back({OpKind::Finalize, -1, 0});
  if (finalize) s.steps.push_back(fin);
  return s;
}

}  // namespace scalecomm
