#include "algo/pairwise.h"

#include "core/error.h"

namespace scalecomm {

Schedule pairwiseAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  if (n > 2) {
    fail(ErrorKind::InvalidArgument,
         "scalecomm allreduce: algorithm pairwise serves groups of at most 2 ranks; this "
         "group has ",
         n, " (choose ring, rhd, tree or direct)");
  }
  Schedule s;
  s.algorithm = "pairwise";
  s.blockCounts = {count};
  if (n == 2) {
    const int peer = 1 - rank;
    s.steps.push_back({{{OpKind::Send, peer, 0}, {OpKind::RecvReduce, peer, 0}}});
  }
  if (finalize) s.steps.push_back({{{OpKind::Finalize, -1, 0}}});
  return s;
}

}  // namespace scalecomm
