#include "algo/rhd.h"

#include "core/error.h"

namespace scalecomm {

namespace {

void rangeOps(ScheduleStep& step, OpKind kind, int peer, int lo, int hi) {
  for (int b = lo; b < hi; ++b) step.ops.push_back({kind, peer, b});
}

}  // namespace

Schedule rhdAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  Schedule s;
  s.algorithm = "rhd";
  s.blockCounts = splitEven(count, p);
  // Every rank numbers steps alike (the step travels in message headers):
  // [fold] [log2 p halving] [finalize] [log2 p doubling] [unfold], where the
  // fold and unfold steps exist only when n is not a power of two.
  int log2p = 0;
  while ((1 << log2p) < p) ++log2p;
  const size_t totalSteps = (extra > 0 ? 2 : 0) + 2 * log2p + (finalize ? 1 : 0);
  // Fold: even ranks below 2*extra hand their data to the next (odd) rank.
  int newRank;
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      s.steps.resize(totalSteps);
      rangeOps(s.steps.front(), OpKind::Send, rank + 1, 0, p);
      rangeOps(s.steps.back(), OpKind::Recv, rank + 1, 0, p);
      return s;
    }
    newRank = rank / 2;
    ScheduleStep in;
    rangeOps(in, OpKind::RecvReduce, rank - 1, 0, p);
    s.steps.push_back(in);
  } else {
    newRank = rank - extra;
    if (extra > 0) s.steps.push_back({});
  }
  auto realRank = [&](int nr) { return nr < extra ? 2 * nr + 1 : nr + extra; };
  // Reduce-scatter by recursive halving.
  int lo = 0, hi = p;
  for (int d = p / 2; d >= 1; d /= 2) {
    const int partner = realRank(newRank ^ d);
    const int mid = lo + (hi - lo) / 2;
    ScheduleStep step;
    if ((newRank & d) == 0) {  // keep the lower half
      rangeOps(step, OpKind::Send, partner, mid, hi);
      rangeOps(step, OpKind::RecvReduce, partner, lo, mid);
      hi = mid;
    } else {
      rangeOps(step, OpKind::Send, partner, lo, mid);
      rangeOps(step, OpKind::RecvReduce, partner, mid, hi);
      lo = mid;
    }
    s.steps.push_back(step);
  }
  SC_CHECK(lo == newRank && hi == newRank + 1);
  if (finalize) s.steps.push_back({{{OpKind::Finalize, -1, newRank}}});
  // Allgather by recursive doubling.
  for (int d = 1; d < p; d *= 2) {
    const int partnerNew = newRank ^ d;
    const int myLo = newRank / d * d, theirLo = partnerNew / d * d;
    ScheduleStep step;
    rangeOps(step, OpKind::Send, realRank(partnerNew), myLo, myLo + d);
    rangeOps(step, OpKind::Recv, realRank(partnerNew), theirLo, theirLo + d);
    s.steps.push_back(step);
  }
  // Unfold: give the folded even partner the result.
  if (extra > 0) {
    ScheduleStep back;
    if (rank < 2 * extra) rangeOps(back, OpKind::Send, rank - 1, 0, p);
    s.steps.push_back(back);
  }
  SC_CHECK(s.steps.size() == totalSteps);
  return s;
}

}  // namespace scalecomm
