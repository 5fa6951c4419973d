#include "algo/cost_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "algo/collectives.h"
#include "algo/registry.h"
#include "algo/shared.h"
#include "algo/tree.h"
#include "core/error.h"

namespace scalecomm {

namespace {

std::set<int> sampleRanks(int n, const AlgoParams& algo) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  std::set<int> sample = {0, std::min(1, n - 1), n / 2, n - 1, std::max(0, 2 * (n - p) - 1), std::max(0, n - p)};
  // One rank per tree level (the first and second of each): trees are active
  // at one level per step.
  for (int64_t first = 1; first - 1 < n; first *= 2) {
    sample.insert(static_cast<int>(first - 1));
    if (first < n) sample.insert(static_cast<int>(first));
  }
  for (int r = 0; r < static_cast<int>(algo.hostOf.size()); ++r) {
    if (algo.hostOf[r] != algo.hostOf[0]) {
      sample.insert(r);
      if (r + 1 < n) sample.insert(r + 1);
      break;
    }
  }
  return sample;
}

struct RankStep {
  double fill = 0;
  double sentRest = 0, recvRest = 0;
  // With shared host links: the inter-host part, charged to the host instead
  // (seconds at the inter-host beta; fill = first segments).
  double nicSentFill = 0, nicSent = 0, nicRecvFill = 0, nicRecv = 0;
  bool talks = false;
};

RankStep priceStep(const Schedule& s, const ScheduleStep& step, int rank, size_t elementBytes, const CostParams& c,
                   const AlgoParams& algo, bool sharedNic) {
  const double seg = c.segmentBytes > 0 ? static_cast<double>(c.segmentBytes) : std::numeric_limits<double>::infinity();
  auto sameHost = [&](int peer) {
    return !algo.hostOf.empty() && algo.hostOf[peer] == algo.hostOf[rank] && c.intraAlpha >= 0;
  };
  double alpha = 0, sent = 0, sentFill = 0, recv = 0, recvFill = 0, reduced = 0;
  RankStep out;
  std::set<std::pair<int, bool>> seen;  // (peer, is send): a send and a receive with one peer overlap
  for (const ScheduleOp& op : step.ops) {
    const double bytes = static_cast<double>(s.blockCounts[op.block]) * static_cast<double>(elementBytes);
    // An empty block moves no bytes, but a rank on the block's path still
    // waits for its turn: price it as a zero-byte message (one alpha), so a
    // ring of n ranks with fewer than n elements still costs 2 (n-1) alpha.
    if (op.kind == OpKind::Finalize) continue;
    const bool intra = sameHost(op.peer);
    const double beta = intra && c.intraBeta >= 0 ? c.intraBeta : c.beta;
    alpha = std::max(alpha, intra ? c.intraAlpha : c.alpha);
    seen.insert({op.peer, op.kind == OpKind::Send});
    // Sends and receives use the two directions of a full-duplex link; each
    // direction's bytes are serialised (one NIC or memory bus per rank).
    const bool toHostNic = sharedNic && algo.hostOf[op.peer] != algo.hostOf[rank];
    if (toHostNic) {
      (op.kind == OpKind::Send ? out.nicSent : out.nicRecv) += beta * bytes;
      (op.kind == OpKind::Send ? out.nicSentFill : out.nicRecvFill) += beta * std::min(bytes, seg);
    } else {
      (op.kind == OpKind::Send ? sent : recv) += beta * bytes;
      (op.kind == OpKind::Send ? sentFill : recvFill) += beta * std::min(bytes, seg);
    }
    if (op.kind == OpKind::RecvReduce) reduced += bytes;
  }
  if (seen.empty()) return out;
  out.talks = true;
  const int sends = static_cast<int>(std::count_if(seen.begin(), seen.end(), [](auto& x) { return x.second; }));
  const int msgs = std::max(sends, static_cast<int>(seen.size()) - sends);
  const double reducedFill = std::min(reduced, seg);
  out.fill = alpha + c.overhead * std::max(0, msgs - 1) + std::max(sentFill, recvFill) + c.gamma * reducedFill;
  out.sentRest = sent - sentFill;
  out.recvRest = recv - recvFill + c.gamma * (reduced - reducedFill);
  return out;
}

}  // namespace

double predictSeconds(const std::function<Schedule(int)>& makeSchedule, int n, size_t elementBytes,
                      const CostParams& params, const AlgoParams& algo) {
  // Several hosts: the ranks of a host share its network link, so their
  // inter-host bytes add up per host and step. That needs every rank (up to
  // kAllRanks; beyond, the sample, and each rank is priced as if alone).
  constexpr int kAllRanks = 4096;
  const bool sharedNic = spansHosts(algo.hostOf) && n <= kAllRanks;
  std::set<int> ranks = sampleRanks(n, algo);
  if (sharedNic) {
    for (int r = 0; r < n; ++r) ranks.insert(r);
  }
  std::vector<double> stepFill;
  // per step: host -> (sent fill, sent, recv fill, recv)
  std::vector<std::map<int, std::array<double, 4>>> hostStep;
  double rest = 0;
  for (int r : ranks) {
    Schedule s = makeSchedule(r);
    if (stepFill.size() < s.steps.size()) {
      stepFill.resize(s.steps.size(), 0.0);
      hostStep.resize(s.steps.size());
    }
    double sentRest = 0, recvRest = 0;
    for (size_t k = 0; k < s.steps.size(); ++k) {
      RankStep c = priceStep(s, s.steps[k], r, elementBytes, params, algo, sharedNic);
      stepFill[k] = std::max(stepFill[k], c.fill);
      sentRest += c.sentRest;
      recvRest += c.recvRest;
      if (sharedNic && (c.nicSent > 0 || c.nicRecv > 0)) {
        auto& h = hostStep[k][algo.hostOf[r]];
        h[0] += c.nicSentFill;
        h[1] += c.nicSent;
        h[2] += c.nicRecvFill;
        h[3] += c.nicRecv;
      }
    }
    rest = std::max({rest, sentRest, recvRest});
  }
  std::map<int, std::array<double, 2>> hostRest;  // host -> (sent, recv) beyond the fill
  for (size_t k = 0; k < hostStep.size(); ++k) {
    for (const auto& [host, v] : hostStep[k]) {
      stepFill[k] = std::max(stepFill[k], params.alpha + std::max(v[0], v[2]));
      hostRest[host][0] += v[1] - v[0];
      hostRest[host][1] += v[3] - v[2];
    }
  }
  for (const auto& [host, v] : hostRest) rest = std::max({rest, v[0], v[1]});
  double total = rest;
  for (double c : stepFill) total += c;
  return total;
}

double predictAllreduceSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params,
                               const AlgoParams& algo) {
  const Algorithm* entry = findAllreduceAlgorithm(algorithm);
  if (entry != nullptr && entry->onWindows()) {
    // Shared windows (algo/shared.h), one host. In one call (sharedInSlices
    // false): one flag round (measured, or a message's latency), the input
    // copied in once and n inputs read while reducing: n + 1 copies. In
    // slices: one flag round per chunk (window-sized, or the whole message
    // where shorter) and one more; (n-1)/n of the input copied in, the own
    // slice (1/n) reduced from n inputs and copied out of the window, (n-1)/n
    // copied out: (2n-1)/n copies. A copy costs windowBeta per byte (probed
    // on the windows, whose bytes stay in the cores' caches; unset: half a
    // link byte, which costs two copies, into the ring and out) up to the
    // window; a larger buffer streams from memory, at half a link byte.
    const double alpha = params.windowAlpha >= 0  ? params.windowAlpha
                         : params.intraAlpha >= 0 ? params.intraAlpha
                                                  : params.alpha;
    const double beta = params.intraBeta >= 0 ? params.intraBeta : params.beta;
    const double b = static_cast<double>(std::max<int64_t>(bytes, 0));
    const bool cached = algo.windowBytes <= 0 || bytes <= algo.windowBytes;
    const double copy = cached && params.windowBeta >= 0 ? params.windowBeta : beta / 2;
    if (algo.windowBytes <= 0 || !sharedInSlices(n, bytes, algo.windowBytes)) {
      return params.call + alpha + copy * b * (n + 1) + params.gamma * b * (n - 1);
    }
    const double chunks = std::ceil(b / static_cast<double>(algo.windowBytes));
    return params.call + alpha * (chunks + 1) + copy * b * (2 * n - 1) / n + params.gamma * b * (n - 1) / n;
  }
  // Priced as float32 (empty blocks still cost their alpha; see priceStep).
  const int64_t count = std::max<int64_t>(bytes / 4, 1);
  return params.call + predictSeconds([&](int r) { return allreduceSchedule(algorithm, r, n, count, false, algo); }, n,
                                      4, params, algo);
}

double predictRootedSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params) {
  if (n <= 1 || bytes <= 0) return 0;
  // The chain's one step hides n-1 hops behind data dependencies; price it in
  // closed form: the first segment crosses n-1 links, the rest streams.
  const double seg = params.segmentBytes > 0 ? std::min<double>(params.segmentBytes, bytes) : bytes;
  if (algorithm == "chain") return (n - 1) * (params.alpha + params.beta * seg) + params.beta * (bytes - seg);
  const Algorithm& a = findRootedAlgorithm(algorithm);
  const int64_t count = std::max<int64_t>(bytes / 4, 1);
  return predictSeconds([&](int r) { return a.broadcast(r, n, 0, count); }, n, 4, params);
}

std::string chooseAllreduce(int n, int64_t bytes, const CostParams& params, const AlgoParams& algo,
                            const std::vector<std::string>& candidates) {
  std::string best;
  double bestTime = 0, ringTime = -1;
  for (const std::string& a : candidates.empty() ? allreduceAlgorithms() : candidates) {
    if (!allreduceServes(a, n, bytes, algo)) continue;
    const double t = predictAllreduceSeconds(a, n, bytes, params, algo);
    if (a == "ring") ringTime = t;
    if (best.empty() || t < bestTime) {
      best = a;
      bestTime = t;
    }
  }
  // Near-ties go to ring: where the model sees the same bandwidth term (rhd
  // and ring are both bandwidth-optimal) its latency difference is noise, and
  // ring's small pipelined messages measured faster under DDP on rate-limited
  // links (docs/algorithms.md, "near-ties").
  if (ringTime >= 0 && ringTime <= bestTime * (1 + kRingMargin)) return "ring";
  return best;
}

std::string chooseRooted(int n, int64_t bytes, const CostParams& params) {
  std::string best;
  double bestTime = 0;
  for (const Algorithm* a : rootedAlgorithms()) {
    const double t = predictRootedSeconds(a->name, n, bytes, params);
    if (best.empty() || t < bestTime) {
      best = a->name;
      bestTime = t;
    }
  }
  return best;
}

}  // namespace scalecomm
