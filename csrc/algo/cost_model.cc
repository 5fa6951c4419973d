#include "algo/cost_model.h"

#include <algorithm>
#include <set>
#include <vector>

#include "algo/collectives.h"

namespace scalecomm {

double predictSeconds(const std::function<Schedule(int)>& makeSchedule, int n, size_t elementBytes,
                      const CostParams& params) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  std::set<int> sample = {0, std::min(1, n - 1), n / 2, n - 1, std::max(0, 2 * (n - p) - 1), std::max(0, n - p)};
  std::vector<double> stepMax;
  for (int r : sample) {
    Schedule s = makeSchedule(r);
    if (stepMax.size() < s.steps.size()) stepMax.resize(s.steps.size(), 0.0);
    for (size_t k = 0; k < s.steps.size(); ++k) {
      double sent = 0, reduced = 0;
      int messages = 0;
      for (const ScheduleOp& op : s.steps[k].ops) {
        if (op.kind == OpKind::Finalize) continue;
        const double bytes = static_cast<double>(s.blockCounts[op.block]) * static_cast<double>(elementBytes);
        if (bytes == 0) continue;
        ++messages;
        if (op.kind == OpKind::Send) sent += bytes;
        if (op.kind == OpKind::RecvReduce) reduced += bytes;
      }
      // Count messages per step once per direction pair: a send and a receive
      // with the same peer overlap (full duplex).
      int distinct = 0;
      std::set<std::pair<int, bool>> seen;
      for (const ScheduleOp& op : s.steps[k].ops) {
        if (op.kind == OpKind::Finalize || s.blockCounts[op.block] == 0) continue;
        if (seen.insert({op.peer, op.kind == OpKind::Send}).second) ++distinct;
      }
      const int sends = static_cast<int>(std::count_if(seen.begin(), seen.end(), [](auto& x) { return x.second; }));
      const int recvs = distinct - sends;
      const int msgs = std::max(sends, recvs);
      double cost = messages > 0 ? params.alpha + params.overhead * std::max(0, msgs - 1) + params.beta * sent +
                                       params.gamma * reduced
                                 : 0.0;
      stepMax[k] = std::max(stepMax[k], cost);
    }
  }
  double total = 0;
  for (double c : stepMax) total += c;
  return total;
}

double predictAllreduceSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params) {
  // Priced as float32, with at least one element per rank: with fewer, most
  // blocks are empty and the sampled ranks would miss the steps in which the
  // few non-empty blocks hop from rank to rank (one alpha each).
  const int64_t count = std::max<int64_t>(bytes / 4, n);
  return predictSeconds([&](int r) { return allreduceSchedule(algorithm, r, n, count, false); }, n, 4, params);
}

std::string chooseAllreduce(int n, int64_t bytes, const CostParams& params) {
  std::string best;
  double bestTime = 0;
  for (const std::string& a : allreduceAlgorithms()) {
    const double t = predictAllreduceSeconds(a, n, bytes, params);
    if (best.empty() || t < bestTime) {
      best = a;
      bestTime = t;
    }
  }
  return best;
}

}  // namespace scalecomm
