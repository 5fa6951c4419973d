#include "select/tuner.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "select/tuner_detail.h"

namespace scalecomm {

using tuner_detail::median;
using tuner_detail::summarize;
using tuner_detail::Summary;
using tuner_detail::us;

std::pair<int, int> medianInterval(int n, double coverage) {
  if (n <= 1) return {0, std::max(n - 1, 0)};
  // P(Bin(n, 1/2) <= j), accumulated; the interval [x(k), x(n+1-k)] (1-based)
  // covers the median with probability 1 - 2 P(Bin <= k-1).
  double below = 0, term = std::pow(0.5, n);
  int k = 1;
  for (int j = 0; j < n; ++j) {
    below += term;                        // P(Bin <= j)
    if (1 - 2 * below < coverage) break;  // [x(j+1), x(n-j)] would cover too little
    k = j + 1;
    term = term * (n - j) / (j + 1);
  }
  k = std::min(k, (n + 1) / 2);
  return {k - 1, n - k};
}

OnlineTuner::OnlineTuner(Ranker ranker, Serves serves, TunerSettings settings)
    : ranker_(std::move(ranker)), serves_(std::move(serves)), settings_(settings) {
  settings_.rounds = std::max(settings_.rounds, 1);
  settings_.maxCandidates = std::max(settings_.maxCandidates, 1);
}

int OnlineTuner::bucketOf(int64_t bytes) {
  int b = 0;
  while (b < 63 && (int64_t{1} << b) < bytes) ++b;
  return b;
}

int OnlineTuner::blockLength(int bucket) const {
  if (settings_.blockBytes <= 0) return 1;
  const int64_t bytes = bucketBytes(bucket);
  const int64_t least = bytes <= kWarmUpBlocks * settings_.blockBytes ? 2 : 1;
  return static_cast<int>(std::clamp<int64_t>(settings_.blockBytes / bytes, least, kMaxBlock));
}

Label OnlineTuner::modelPickLocked(int64_t bytes) {
  auto it = modelPicks_.find(bytes);
  if (it != modelPicks_.end()) return it->second;
  if (modelPicks_.size() >= 4096) modelPicks_.clear();
  const auto ranked = ranker_(bytes);
  return modelPicks_.emplace(bytes, Label(ranked.empty() ? std::string("ring") : ranked.front().first)).first->second;
}

Label OnlineTuner::modelPick(int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  return modelPickLocked(bytes);
}

void OnlineTuner::rankCandidates(Bucket& k, int64_t bytes) {
  const auto ranked = ranker_(bytes);
  double fastest = 0;
  for (size_t i = 0; i < ranked.size(); ++i) fastest = i ? std::min(fastest, ranked[i].second) : ranked[i].second;
  std::vector<Candidate> before = std::move(k.info);
  k.cands.clear();
  k.info.clear();
  for (const auto& [name, t] : ranked) {
    if (static_cast<int>(k.cands.size()) >= settings_.maxCandidates) break;
    if (static_cast<int>(k.cands.size()) >= kMinCandidates && t > fastest * settings_.spread) continue;
    k.cands.emplace_back(name);
    k.info.push_back(Candidate{name, t});
  }
  if (k.cands.empty()) {  // nothing serves it (cannot happen for a group's sizes): ring
    k.cands.emplace_back("ring");
    k.info.push_back(Candidate{"ring", 0});
  }
  for (Candidate& c : k.info) {  // the report's trial counts run over every exploration
    for (const Candidate& b : before) {
      if (b.algorithm != c.algorithm) continue;
      c.trials = b.trials;
      c.trialSeconds = b.trialSeconds;
    }
  }
  k.favourite = k.info.front().algorithm;
}

void OnlineTuner::start(Bucket& k, int64_t bytes) {
  rankCandidates(k, bytes);
  k.exploreAfter = settings_.reexploreAfter;
  k.size = bytes;
  k.block = blockLength(bucketOf(bytes));
  if (k.cands.size() == 1) {
    k.source = "model";
    exploit(k, k.cands[0]);
  } else {
    explore(k);
  }
}

void OnlineTuner::reexplore(Bucket& k, int bucket) {
  // Every candidate the model ranks close, not only those left by the last
  // exploration's eliminations: what changed may favour one that left.
  rankCandidates(k, k.size > 0 ? k.size : bucketBytes(bucket));
  if (k.cands.size() > 1) {
    explore(k);
    return;
  }
  k.source = "model";
  k.median = k.lo = k.hi = k.slowest = 0;
  k.afterDrift = false;
  exploit(k, k.cands[0]);
}

void OnlineTuner::explore(Bucket& k, bool continuing) {
  // Until the ranks agree on times, the model's predictions pace it, and the
  // last winner (else the favourite) leads. Continuing, the calls spent so
  // far stay charged (as gone) and the agreed means stand.
  std::vector<double> predicted;
  std::vector<Bucket::Spend> spend(k.cands.size());
  int lead = 0;
  for (size_t q = 0; q < k.cands.size(); ++q) {
    predicted.push_back(k.info[q].predicted);
    const bool agreed = continuing && q < k.spend.size();
    spend[q].mean = agreed ? k.spend[q].mean : predicted[q];
    spend[q].warm = agreed ? k.spend[q].warm : predicted[q];
    if (!k.winnerLabel.empty() && k.cands[q] == k.winnerLabel) lead = static_cast<int>(q);
  }
  if (continuing) {
    for (const Bucket::Spend& x : k.spend) k.gone.push_back(x);
  } else {
    k.gone.clear();
    k.pausedThis = 0;
    ++k.explorations;
  }
  k.spend = std::move(spend);
  k.extended = false;
  k.evidence.clear();
  k.phase = Phase::Exploring;
  k.screens = 0;
  k.step = 0;
  k.blockTimed = 0;
  k.rounds = settings_.rounds;
  k.local.assign(k.cands.size() * k.rounds, 0.0);
  pace(k, predicted, lead);
}

void OnlineTuner::pace(Bucket& k, const std::vector<double>& median, int lead) {
  k.pausedAt = -1;
  k.pauseLeft = 0;
  if (lead < 0) {
    for (int q = 0; q < static_cast<int>(median.size()); ++q)
      if (median[q] > 0 && (lead < 0 || median[q] < median[lead])) lead = q;
  }
  if (lead < 0 || lead >= static_cast<int>(k.cands.size())) lead = 0;
  k.leader = k.cands[lead];
  const double warm = lead < static_cast<int>(k.spend.size()) ? k.spend[lead].warm : 0;
  k.leaderSeconds = warm > 0 ? warm : lead < static_cast<int>(median.size()) ? median[lead] : 0;
}

void OnlineTuner::agreeMeans(Bucket& k, const std::vector<double>& maxed, int times) {
  const size_t c = k.spend.size();
  if (maxed.size() < times + 2 * c) return;
  for (size_t q = 0; q < c; ++q) {
    k.spend[q].mean = maxed[times + q];
    k.spend[q].warm = maxed[times + c + q];
  }
}

std::vector<double> OnlineTuner::withMeans(const Bucket& k, int times) {
  std::vector<double> v(k.local.begin(), k.local.begin() + times);
  for (const Bucket::Spend& x : k.spend) v.push_back(x.calls ? x.seconds / x.calls : 0.0);
  for (const Bucket::Spend& x : k.spend) v.push_back(x.warmCalls ? x.warmSeconds / x.warmCalls : 0.0);
  return v;
}

int64_t OnlineTuner::pauseCalls(const Bucket& k) const {
  const double t = k.leaderSeconds;
  if (settings_.explorePercent >= 100 || t <= 0) return 0;
  double excess = 0, time = 0;
  auto add = [&](int64_t calls, double mean) {
    if (mean <= 0) return;
    excess += calls * (mean - t);  // unclamped: a faster mean saved time (and noise averages out)
    time += calls * mean;
  };
  for (const Bucket::Spend& x : k.spend) add(x.calls + k.block, x.mean);  // the next round's trials included
  for (const Bucket::Spend& x : k.gone) add(x.calls, x.mean);
  const double percent = std::max(settings_.explorePercent, 1);
  const double needed = std::ceil((excess * 100.0 / percent - time) / t) - static_cast<double>(k.pausedThis);
  return static_cast<int64_t>(std::clamp(needed, 0.0, 1e12));
}

void OnlineTuner::setExplorePercent(int percent) {
  std::lock_guard<std::mutex> g(mu_);
  settings_.explorePercent = std::clamp(percent, 1, 100);
  for (Bucket& k : buckets_) {
    // A round whose pause has begun (its trials have not) is paced again at the next pick.
    if (k.phase == Phase::Exploring && k.pausedAt == k.step) k.pausedAt = -1;
  }
}

int OnlineTuner::explorePercent() const {
  std::lock_guard<std::mutex> g(mu_);
  return settings_.explorePercent;
}

void OnlineTuner::keepOnly(Bucket& k, const std::vector<int>& keep) {
  std::vector<Label> cands;
  std::vector<Candidate> info;
  std::vector<Bucket::Spend> spend;
  for (int q : keep) {
    cands.push_back(k.cands[q]);
    info.push_back(std::move(k.info[q]));
    if (q < static_cast<int>(k.spend.size())) spend.push_back(k.spend[q]);
  }
  for (int q = 0; q < static_cast<int>(k.spend.size()); ++q)
    if (std::find(keep.begin(), keep.end(), q) == keep.end()) k.gone.push_back(k.spend[q]);
  k.cands = std::move(cands);
  k.info = std::move(info);
  k.spend = std::move(spend);
}

void OnlineTuner::keepMeasured(Bucket& k, const std::vector<int>& keep, int measured) {
  const int c = static_cast<int>(k.cands.size()), left = static_cast<int>(keep.size());
  std::vector<double> local(left * k.rounds, 0.0);
  for (int i = 0; i < left; ++i)
    for (int r = 0; r < measured; ++r) local[r * left + i] = k.local[r * c + keep[i]];
  k.local = std::move(local);
  k.step = int64_t{left} * measured * k.block;
  keepOnly(k, keep);
  k.pausedAt = -1;
}

void OnlineTuner::exploit(Bucket& k, Label winner) {
  k.phase = Phase::Exploiting;
  k.winnerLabel = winner;
  k.recentCount = 0;
  k.sinceCheck = 0;
  k.sinceExplore = 0;
  k.checkEvery = settings_.firstCheck;
  k.slowChecks = 0;
}

OnlineTuner::Pick OnlineTuner::pick(int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  const int b = bucketOf(bytes);
  Bucket& k = buckets_[b];
  const bool fresh = k.phase == Phase::Fresh;
  if (fresh) start(k, bytes);
  ++k.calls;
  Pick p;
  p.bucket = b;
  p.fresh = fresh;
  while (k.phase == Phase::Exploring) {
    const int c = static_cast<int>(k.cands.size());
    if (k.step % (int64_t{c} * k.block) == 0 && k.pausedAt != k.step) {  // a round starts: its pause first
      k.pausedAt = k.step;
      k.pauseLeft = k.pauseGiven = pauseCalls(k);
    }
    if (k.pauseLeft > 0) {
      --k.pauseLeft;
      ++k.paced;
      ++k.pausedThis;
      p.algorithm = serves_(k.leader, bytes) ? k.leader : modelPickLocked(bytes);
      return p;  // unmeasured
    }
    const int64_t i = k.step / k.block;
    const int cand = static_cast<int>((i + i / c) % c);
    if (!serves_(k.cands[cand], bytes)) {
      // A size limit inside the bucket (pairwise): the candidate leaves it,
      // and the exploration starts over without it.
      std::vector<int> keep;
      for (int q = 0; q < c; ++q)
        if (q != cand) keep.push_back(q);
      keepOnly(k, keep);
      if (k.cands.size() > 1) {
        explore(k, true);  // the same exploration, restarted
        continue;
      }
      k.source = "model";
      exploit(k, k.cands[0]);
      break;
    }
    ++k.step;
    ++k.info[cand].trials;
    p.algorithm = k.cands[cand];
    p.candidate = cand;
    p.measured = true;
    return p;
  }
  if (!serves_(k.winnerLabel, bytes)) {
    p.bucket = -1;
    p.algorithm = modelPickLocked(bytes);
    return p;
  }
  p.algorithm = k.winnerLabel;
  p.measured = true;
  return p;
}

std::vector<double> OnlineTuner::record(const Pick& p, double seconds) {
  if (!p.measured || p.bucket < 0) return {};
  std::lock_guard<std::mutex> g(mu_);
  Bucket& k = buckets_[p.bucket];
  const int c = static_cast<int>(k.cands.size());
  if (p.candidate >= 0) {
    ++k.trials;
    k.trialSeconds += seconds;
    if (p.candidate < static_cast<int>(k.info.size())) k.info[p.candidate].trialSeconds += seconds;
  }
  if (p.candidate >= 0 && k.phase == Phase::Exploring) {
    // The trial's time: the median of its block's second half.
    const int64_t j = (k.step - 1) % k.block;
    if (p.candidate < static_cast<int>(k.spend.size())) {
      Bucket::Spend& x = k.spend[p.candidate];
      ++x.calls;
      x.seconds += seconds;
      if (j >= k.block / 2) {
        ++x.warmCalls;
        x.warmSeconds += seconds;
      }
    }
    if (j == 0) k.blockTimed = 0;
    if (j >= k.block / 2 && k.blockTimed < kMaxBlock) k.blockTimes[k.blockTimed++] = seconds;
    if (j != k.block - 1) return {};
    seconds = median(std::vector<double>(k.blockTimes.begin(), k.blockTimes.begin() + k.blockTimed));
    k.blockTimed = 0;
    const int64_t trial = k.step / k.block;  // trials completed, this one included
    k.local[(trial - 1) / c * c + p.candidate] = seconds;
    if (k.screens < 2 && c > 1 && k.rounds > kRaceRounds && trial == c * kRaceRounds) {
      k.pending = Pending::Race;
      return withMeans(k, c * kRaceRounds);
    }
    if (k.screens == 0 && c > 2 && k.rounds > kScreenRounds && trial == c * kScreenRounds) {
      k.pending = Pending::Screen;
      return withMeans(k, c * kScreenRounds);
    }
    if (trial == c * k.rounds) {
      k.pending = Pending::Decide;
      return withMeans(k, c * k.rounds);
    }
    return {};
  }
  if (k.phase != Phase::Exploiting) return {};
  k.recent[k.recentCount++ % k.recent.size()] = seconds;
  ++k.sinceCheck;
  if (++k.sinceExplore >= k.exploreAfter) {
    k.exploreAfter *= 2;
    reexplore(k, p.bucket);
    return {};
  }
  if (k.sinceCheck >= k.checkEvery && k.hi > 0) {
    k.pending = Pending::Check;
    const size_t n = std::min<size_t>(k.recentCount, k.recent.size());
    return {median(std::vector<double>(k.recent.begin(), k.recent.begin() + static_cast<std::ptrdiff_t>(n)))};
  }
  return {};
}

std::string OnlineTuner::describe(int bucket) const {
  std::lock_guard<std::mutex> g(mu_);
  const Bucket& k = buckets_[bucket];
  std::ostringstream o;
  o << "auto: allreduce of up to " << bucketBytes(bucket) << " bytes: ";
  if (k.phase != Phase::Exploring) {
    o << "runs " << k.winnerLabel << " (" << (k.source == "model" ? "the model's only candidate within " : "")
      << (k.source == "model" ? std::to_string(static_cast<int>(settings_.spread)) + "x" : k.source) << ")";
    return o.str();
  }
  o << "measuring";
  for (size_t q = 0; q < k.info.size(); ++q)
    o << (q ? "," : "") << " " << k.info[q].algorithm << " (model " << us(k.info[q].predicted) << " us)";
  o << " in " << k.rounds << " interleaved rounds";
  if (k.block > 1) o << " of " << k.block << " calls each (timed on the last " << k.block - k.block / 2 << ")";
  if (k.pauseGiven > 0)
    o << "; within " << settings_.explorePercent << "% of the bucket's time: " << k.pauseGiven << " calls of "
      << k.leader.str() << " before this round (paced on the model's predictions until measured)";
  return o.str();
}

std::vector<TunerEntry> OnlineTuner::decided() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TunerEntry> out;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    const Bucket& k = buckets_[b];
    if (k.winnerLabel.empty() || k.source == "model") continue;
    TunerEntry e;
    e.bytes = bucketBytes(b);
    e.size = k.size;
    e.algorithm = k.winnerLabel.str();
    e.median = k.median;
    e.lo = k.lo;
    e.hi = k.hi;
    for (const Candidate& c : k.info)
      if (c.median > 0) e.measured.emplace_back(c.algorithm, c.median);
    for (const auto& [name, median] : k.evidence) {  // those that left (screening, race, extension)
      bool kept = false;
      for (const Candidate& c : k.info) kept = kept || c.algorithm == name;
      if (!kept && median > 0) e.measured.emplace_back(name, median);
    }
    out.push_back(std::move(e));
  }
  return out;
}

void OnlineTuner::load(const std::vector<TunerEntry>& entries) {
  std::lock_guard<std::mutex> g(mu_);
  for (const TunerEntry& e : entries) {
    Bucket& k = buckets_[bucketOf(e.bytes)];
    k = Bucket();
    k.cands.emplace_back(e.algorithm);
    k.info.push_back(Candidate{e.algorithm, 0, e.median});
    for (const auto& [name, t] : e.measured) {
      if (name == e.algorithm || static_cast<int>(k.cands.size()) >= settings_.maxCandidates) continue;
      k.cands.emplace_back(name);  // explored again in the order measured
      k.info.push_back(Candidate{name, 0, t});
    }
    k.median = e.median;
    k.lo = e.lo;
    k.hi = e.hi;
    k.slowest = e.hi;  // a cached winner keeps only its band
    k.source = "cache";
    k.size = e.size;
    k.block = blockLength(bucketOf(e.bytes));
    k.exploreAfter = settings_.reexploreAfter;
    exploit(k, k.cands[0]);
  }
}

std::vector<OnlineTuner::BucketReport> OnlineTuner::report() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<BucketReport> out;
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    const Bucket& k = buckets_[b];
    if (k.phase == Phase::Fresh) continue;
    BucketReport r;
    r.bytes = bucketBytes(b);
    r.phase = k.phase == Phase::Exploring ? "exploring" : "exploiting";
    r.source = k.source;
    r.algorithm = k.winnerLabel.str();
    r.median = k.median;
    r.lo = k.lo;
    r.hi = k.hi;
    r.calls = k.calls;
    r.trials = k.trials;
    r.trialSeconds = k.trialSeconds;
    r.agreementSeconds = k.agreementSeconds;
    r.paced = k.paced;
    if (k.phase == Phase::Exploring) r.leader = k.leader.str();
    r.explorations = k.explorations;
    r.driftChecks = k.driftChecks;
    r.drifts = k.drifts;
    r.candidates = k.info;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace scalecomm
