// The online tuner's decision rules (select/tuner.h): the decision after
// the last round, the race, the screening, and the ranks' agreement.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "select/tuner.h"
#include "select/tuner_detail.h"

namespace scalecomm {

using tuner_detail::median;
using tuner_detail::summarize;
using tuner_detail::Summary;
using tuner_detail::us;

std::string OnlineTuner::decide(Bucket& k, int bucket, const std::vector<double>& maxed) {
  const int c = static_cast<int>(k.cands.size());
  const int rounds = k.rounds;
  std::vector<double> favourite(rounds);
  for (int r = 0; r < rounds; ++r) favourite[r] = maxed[r * c];
  int winner = 0;
  std::vector<Summary> own(c);
  for (int q = 0; q < c; ++q) {
    std::vector<double> mine(rounds), ratio(rounds);
    for (int r = 0; r < rounds; ++r) {
      mine[r] = maxed[r * c + q];
      ratio[r] = favourite[r] > 0 ? mine[r] / favourite[r] : 1.0;
    }
    own[q] = summarize(mine);
    k.info[q].median = own[q].median;
    k.info[q].ratioHigh = summarize(ratio).hi;
  }
  // q beats the favourite when it is faster beyond the noise: paired by
  // round (its ratio's interval below 1), or unpaired (its interval below
  // the favourite's), which holds where the rounds' noise is not shared.
  for (int q = 1; q < c; ++q) {
    const bool beats = k.info[q].ratioHigh < 1.0 || own[q].hi < own[0].lo;
    if (beats && k.info[q].median < k.info[winner].median) winner = q;
  }
  // Inconclusive: a candidate's median is kExtendMargin below the winner's
  // but inside the noise. Measure the two alone, in twice the rounds, once
  // per exploration; the decision then stands.
  int challenger = winner;
  for (int q = 0; q < c; ++q)
    if (k.info[q].median < k.info[challenger].median) challenger = q;
  if (!k.extended && challenger != winner && k.info[challenger].median < k.info[winner].median * (1 - kExtendMargin)) {
    std::vector<std::pair<std::string, double>> evidence = std::move(k.evidence);  // explore() clears it
    for (const Candidate& x : k.info) evidence.emplace_back(x.algorithm, x.median);
    agreeMeans(k, maxed, rounds * c);
    keepOnly(k, {winner, challenger});  // the favourite (winner 0) or the one that beat it, first
    explore(k, true);                   // the same exploration, extended
    k.evidence = std::move(evidence);
    k.extended = true;
    k.screens = 2;
    k.rounds = 2 * settings_.rounds;
    k.local.assign(2 * k.rounds, 0.0);
    pace(k, {k.info[0].median, k.info[1].median}, -1);
    std::ostringstream o;
    o << "auto: allreduce of up to " << bucketBytes(bucket) << " bytes: " << k.info[1].algorithm << " ("
      << us(k.info[1].median) << " us) against " << k.info[0].algorithm << " (" << us(k.info[0].median)
      << " us) is inside the noise; measuring the two in " << k.rounds << " more rounds";
    return o.str();
  }
  std::vector<double> w(rounds);
  for (int r = 0; r < rounds; ++r) w[r] = maxed[r * c + winner];
  const Summary s = summarize(w);
  const bool changed = k.winnerLabel != k.cands[winner] || k.source != "explored";
  // A drift that found the same winner was the machine, not the choice: ask for a longer one next time.
  if (k.afterDrift) k.idleDrifts = k.winnerLabel != k.cands[winner] ? 0 : std::min(k.idleDrifts + 1, kMaxIdleDrifts);
  k.afterDrift = false;
  k.median = s.median;
  k.lo = s.lo;
  k.hi = s.hi;
  k.slowest = *std::max_element(w.begin(), w.end());
  k.source = "explored";
  exploit(k, k.cands[winner]);
  std::ostringstream o;
  o << "auto measured allreduce of up to " << bucketBytes(bucket) << " bytes (max over ranks, median of " << rounds
    << " rounds):";
  for (int q = 0; q < c; ++q) o << (q ? "," : "") << " " << k.info[q].algorithm << " " << us(k.info[q].median) << " us";
  o << "; picks " << k.info[winner].algorithm << " [" << us(s.lo) << "-" << us(s.hi) << " us]"
    << (k.favourite.empty()                       ? " (against the cached winner)"
        : k.info[winner].algorithm == k.favourite ? " (the model's choice)"
                                                  : " (model: " + k.favourite + ")")
    << (changed ? "" : ", unchanged");
  return o.str();
}

std::string OnlineTuner::race(Bucket& k, int bucket, const std::vector<double>& maxed) {
  k.screens = 2;
  const int c = static_cast<int>(k.cands.size());
  constexpr int R = kRaceRounds;
  if (static_cast<int>(maxed.size()) != c * R + 2 * c) return "";
  agreeMeans(k, maxed, c * R);
  std::vector<double> medians(c);
  for (int q = 0; q < c; ++q) {
    std::vector<double> v(R);
    for (int r = 0; r < R; ++r) v[r] = maxed[r * c + q];
    medians[q] = median(v);
  }
  const int leader = static_cast<int>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  std::vector<int> keep;
  std::ostringstream dropped;
  for (int q = 0; q < c; ++q) {
    bool slower = q != 0 && q != leader;  // never the favourite (the decision compares with it) nor the leader
    for (int r = 0; r < R && slower; ++r) slower = maxed[r * c + q] > kRaceMargin * maxed[r * c + leader];
    if (!slower) {
      keep.push_back(q);
      continue;
    }
    dropped << (dropped.tellp() > 0 ? ", " : "") << k.info[q].algorithm << " " << us(medians[q]) << " us";
    k.evidence.emplace_back(k.info[q].algorithm, medians[q]);
  }
  std::vector<double> keptMedians;
  for (int q : keep) keptMedians.push_back(medians[q]);
  if (static_cast<int>(keep.size()) == c) {
    pace(k, keptMedians, -1);
    return "";
  }
  const std::string leaderName = k.info[leader].algorithm;
  keepMeasured(k, keep, R);
  pace(k, keptMedians, -1);
  std::ostringstream o;
  o << "auto: allreduce of up to " << bucketBytes(bucket) << " bytes: " << dropped.str() << " slower than "
    << leaderName << " (" << us(medians[leader]) << " us) by over " << kRaceMargin << "x in each of " << R
    << " rounds; measuring the rest";
  return o.str();
}

std::string OnlineTuner::screen(Bucket& k, int bucket, const std::vector<double>& maxed) {
  k.screens = 1;
  const int c = static_cast<int>(k.cands.size());
  if (static_cast<int>(maxed.size()) != c * kScreenRounds + 2 * c) return "";
  agreeMeans(k, maxed, c * kScreenRounds);
  auto worst = [&](int q) {
    double w = 0;
    for (int r = 0; r < kScreenRounds; ++r) w = std::max(w, maxed[r * c + q]);
    return w;
  };
  auto best = [&](int q) {
    double b = maxed[q];
    for (int r = 1; r < kScreenRounds; ++r) b = std::min(b, maxed[r * c + q]);
    return b;
  };
  double reference = worst(0);
  for (int q = 1; q < c; ++q) reference = std::min(reference, worst(q));
  std::vector<int> keep = {0};  // never the favourite: the decision compares with it
  std::ostringstream dropped;
  for (int q = c - 1; q >= 1; --q) {
    if (best(q) <= kScreenFactor * reference) {
      keep.insert(keep.begin() + 1, q);
      continue;
    }
    dropped << (dropped.tellp() > 0 ? ", " : "") << k.info[q].algorithm << " " << us(best(q)) << " us";
    k.evidence.emplace_back(k.info[q].algorithm, best(q));  // its fastest screening round
  }
  std::vector<double> medians;  // the median of two rounds: their mean
  for (int q : keep) {
    double sum = 0;
    for (int r = 0; r < kScreenRounds; ++r) sum += maxed[r * c + q];
    medians.push_back(sum / kScreenRounds);
  }
  if (dropped.tellp() == 0) {
    pace(k, medians, -1);
    return "";
  }
  keepMeasured(k, keep, kScreenRounds);
  pace(k, medians, -1);
  std::ostringstream o;
  o << "auto: allreduce of up to " << bucketBytes(bucket) << " bytes: " << dropped.str() << " took over "
    << kScreenFactor << "x the fastest (" << us(reference) << " us) in " << kScreenRounds
    << " rounds; measuring the rest";
  return o.str();
}

std::string OnlineTuner::agreed(const Pick& p, const std::vector<double>& maxed, double seconds) {
  if (p.bucket < 0) return "";
  std::lock_guard<std::mutex> g(mu_);
  Bucket& k = buckets_[p.bucket];
  k.agreementSeconds += seconds;
  const Pending pending = k.pending;
  k.pending = Pending::None;
  if (pending == Pending::Decide && maxed.size() == k.local.size() + 2 * k.cands.size())
    return decide(k, p.bucket, maxed);
  if (pending == Pending::Screen) return screen(k, p.bucket, maxed);
  if (pending == Pending::Race) return race(k, p.bucket, maxed);
  if (pending != Pending::Check || maxed.empty()) return "";
  ++k.driftChecks;
  k.sinceCheck = 0;
  const double m = maxed[0];
  // Only slower counts: calls of one algorithm back to back often run
  // faster than the interleaved rounds did, and a machine that got faster
  // for every candidate is left to the periodic re-exploration.
  // The limit: the winner's slowest measured round, widened. Not the upper end
  // of its median's interval, which narrows as rounds are added while the
  // median of a 16-call window varies as much as one round does.
  if (m <= k.slowest * kDriftFactor) {
    k.slowChecks = 0;
    k.checkEvery = std::min(k.checkEvery * 2, settings_.maxCheck);
    return "";
  }
  // One slow window may be a hiccup (a peer descheduled): look again over new calls.
  if (++k.slowChecks < (2 << k.idleDrifts)) {
    k.checkEvery = std::max<int64_t>(settings_.firstCheck, static_cast<int64_t>(k.recent.size()));
    return "";
  }
  ++k.drifts;
  k.afterDrift = true;
  std::ostringstream o;
  o << "auto: allreduce of up to " << bucketBytes(p.bucket) << " bytes now takes " << us(m) << " us with "
    << k.winnerLabel << ", over " << kDriftFactor << "x its slowest measured round (" << us(k.slowest) << " us) in "
    << k.slowChecks << " checks in a row; measuring again";
  reexplore(k, p.bucket);
  return o.str();
}

}  // namespace scalecomm
