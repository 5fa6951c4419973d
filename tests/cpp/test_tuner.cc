// auto's online choice (select/tuner.h): the confidence interval of a median,
// exploration in interleaved rounds, the decision rule (a winner must beat the
// model's choice beyond the noise), drift, the cache's round trip; and on a
// live group, every rank deciding alike with exact results throughout; the
// Selector (select/selector.h) on its own.
#include <algorithm>
#include <cmath>
#include <deque>
#include <future>
#include <map>
#include <random>
#include <set>

#include "comm/loopback_mesh.h"
#include "group/group.h"
#include "harness.h"
#include "select/selection.h"
#include "select/selector.h"
#include "select/tuner.h"

using namespace scalecomm;

namespace {

// Three algorithms, the first ("a") the model's choice; every size served.
OnlineTuner makeTuner(TunerSettings s = {}, std::vector<std::string> names = {"a", "b", "c"}) {
  auto ranker = [names](int64_t) {
    return std::vector<std::pair<std::string, double>>{{names[0], 1e-5}, {names[1], 1.2e-5}, {names[2], 2e-5}};
  };
  return OnlineTuner(ranker, [](const std::string&, int64_t) { return true; }, s);
}

// Runs one exploration of `bytes`: `timeOf(algorithm, call)` is this rank's
// time; returns the account of the decision.
std::string explore(OnlineTuner& t, int64_t bytes, const std::function<double(const std::string&, int)>& timeOf) {
  for (int call = 0; call < 1000; ++call) {
    const OnlineTuner::Pick p = t.pick(bytes);
    CHECK(p.candidate >= 0);
    std::vector<double> agree = t.record(p, timeOf(p.algorithm.str(), call));
    if (agree.empty()) continue;
    const std::string what = t.agreed(p, agree);  // one rank: its times are the maximum
    if (t.report().front().phase == "exploiting") return what;
  }
  CHECK(false);
  return "";
}

std::string winner(const OnlineTuner& t, int64_t bytes) {
  for (const auto& b : t.report())
    if (b.bytes == OnlineTuner::bucketBytes(OnlineTuner::bucketOf(bytes))) return b.algorithm;
  return "";
}

}  // namespace

TEST(median_interval_covers_ninety_percent_with_order_statistics) {
  CHECK(medianInterval(8) == std::make_pair(1, 6));  // [x(2), x(7)]: 93% (x(3)..x(6) would be 71%)
  CHECK(medianInterval(16) == std::make_pair(4, 11));
  CHECK(medianInterval(3) == std::make_pair(0, 2));  // too few for 90%: the whole range
  CHECK(medianInterval(1) == std::make_pair(0, 0));
}

TEST(buckets_are_powers_of_two) {
  CHECK_EQ(OnlineTuner::bucketOf(0), 0);
  CHECK_EQ(OnlineTuner::bucketOf(1), 0);
  CHECK_EQ(OnlineTuner::bucketOf(8), 3);
  CHECK_EQ(OnlineTuner::bucketOf(9), 4);
  CHECK_EQ(OnlineTuner::bucketOf(int64_t{1} << 30), 30);
  CHECK_EQ(OnlineTuner::bucketBytes(4), int64_t{16});
}

TEST(exploration_interleaves_every_candidate_in_each_round) {
  OnlineTuner t = makeTuner();
  std::vector<std::string> seen;
  std::vector<double> agree;
  for (int i = 0; i < 3 * 8; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    seen.push_back(p.algorithm.str());
    agree = t.record(p, 1e-5);
    // Agreements: the screening after two rounds, the race after four, the
    // decision after the last; every round is measured.
    CHECK_EQ(agree.empty(), i != 3 * 2 - 1 && i != 3 * 4 - 1 && i != 3 * 8 - 1);
    if (i == 3 * 4 - 1) CHECK_EQ(t.agreed(p, agree), std::string());  // alike: nobody leaves
    if (i == 3 * 2 - 1) {
      CHECK_EQ(agree.size(), size_t{3 * 2 + 2 * 3});  // two rounds, then each one's mean and warm mean call
      CHECK_EQ(t.agreed(p, agree), std::string());    // alike: nobody leaves
    }
  }
  for (int round = 0; round < 8; ++round) {
    std::multiset<std::string> r(seen.begin() + 3 * round, seen.begin() + 3 * round + 3);
    CHECK(r == (std::multiset<std::string>{"a", "b", "c"}));
  }
  CHECK(seen[0] != seen[3]);  // rotated: no algorithm always first
  CHECK_EQ(agree.size(), size_t{3 * 8 + 2 * 3});
}

TEST(a_trial_is_a_block_of_calls_timed_on_its_second_half) {
  TunerSettings s;
  s.blockBytes = 4 * 4096;  // 4 calls per trial at 4096 bytes
  OnlineTuner t = makeTuner(s);
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(4096)), 4);
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(8)), kMaxBlock);
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(4 * 4096)), 2);  // below 1: a warm-up call and a timed one
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(16 * 4096)), 2);
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(32 * 4096)), 1);  // past kWarmUpBlocks blocks: one call
  CHECK_EQ(t.blockLength(OnlineTuner::bucketOf(1 << 20)), 1);
  // b's first two calls after a switch take 100 us (its buffers are cold),
  // the rest 7 us; a and c take 10 and 20 us throughout. Timed on the block's
  // second half, b is the faster (one-call trials would see only the 100 us).
  std::vector<std::string> seen;
  const std::string what = explore(t, 4096, [&](const std::string& a, int) {
    const bool cold = seen.size() < 2 || seen[seen.size() - 2] != a || seen.back() != a;
    seen.push_back(a);
    if (a == "b") return cold ? 100e-6 : 7e-6;
    return a == "a" ? 10e-6 : 20e-6;
  });
  CHECK_EQ(winner(t, 4096), std::string("b"));
  CHECK(std::fabs(t.report().front().median - 7e-6) < 1e-12);
  CHECK(seen.size() % 4 == 0);
  for (size_t i = 0; i < seen.size(); i += 4)  // blocks of one candidate, rotated by round
    CHECK(seen[i] == seen[i + 1] && seen[i] == seen[i + 2] && seen[i] == seen[i + 3]);
  const auto report = t.report();  // (a loop over report().front()'s member would outlive the vector)
  for (const auto& c : report.front().candidates) CHECK_EQ(c.trials % 4, int64_t{0});
  CHECK(t.describe(OnlineTuner::bucketOf(4096)).find("runs b") != std::string::npos);
  OnlineTuner u = makeTuner(s);
  u.pick(4096);
  CHECK(u.describe(OnlineTuner::bucketOf(4096)).find("of 4 calls each (timed on the last 2)") != std::string::npos);
  // One call per trial (blockBytes 0) on the same times: b always cold, a wins.
  OnlineTuner one = makeTuner();
  seen.clear();
  explore(one, 4096, [&](const std::string& a, int) {
    const bool cold = seen.size() < 2 || seen[seen.size() - 2] != a || seen.back() != a;
    seen.push_back(a);
    if (a == "b") return cold ? 100e-6 : 7e-6;
    return a == "a" ? 10e-6 : 20e-6;
  });
  CHECK_EQ(winner(one, 4096), std::string("a"));
  // A trial of one block's bytes or more still warms up: b's first call after
  // a switch is cold, every later one 7 us; timed on the second call, b wins.
  OnlineTuner warm = makeTuner(s);
  seen.clear();
  explore(warm, 8 * 4096, [&](const std::string& a, int) {
    const bool cold = seen.empty() || seen.back() != a;
    seen.push_back(a);
    if (a == "b") return cold ? 100e-6 : 7e-6;
    return a == "a" ? 10e-6 : 20e-6;
  });
  CHECK_EQ(winner(warm, 8 * 4096), std::string("b"));
}

TEST(a_clearly_faster_algorithm_wins_and_noise_leaves_the_models_choice) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  {  // b is 30% faster than a in every round: b
    OnlineTuner t = makeTuner();
    const std::string what = explore(t, 4096, [&](const std::string& a, int) {
      return (a == "a" ? 10e-6 : a == "b" ? 7e-6 : 20e-6) * noise(rng);
    });
    CHECK_EQ(winner(t, 4096), std::string("b"));
    CHECK(what.find("picks b") != std::string::npos);
  }
  {  // b 2% faster on median, each round's noise +-10% and not shared: the model's a
    OnlineTuner t = makeTuner();
    explore(t, 4096, [&](const std::string& a, int call) {
      const double wobble = 1 + 0.1 * std::sin(call * (a == "a" ? 1.3 : 2.9));
      return (a == "a" ? 10e-6 : a == "b" ? 9.8e-6 : 20e-6) * wobble;
    });
    CHECK_EQ(winner(t, 4096), std::string("a"));
  }
  {  // the model's choice is fastest: kept, and the band brackets its median
    OnlineTuner t = makeTuner();
    explore(t, 4096, [&](const std::string& a, int) { return (a == "a" ? 5e-6 : 9e-6) * noise(rng); });
    const auto r = t.report().front();
    CHECK_EQ(r.algorithm, std::string("a"));
    CHECK(r.lo <= r.median && r.median <= r.hi && r.lo >= 4.5e-6 && r.hi <= 5.5e-6);
    CHECK_EQ(r.phase, std::string("exploiting"));
    CHECK_EQ(r.source, std::string("explored"));
  }
}

TEST(an_inconclusive_lead_is_measured_again_in_twice_the_rounds) {
  // b's median is 10% below a's, but in 3 of 8 rounds it is slower: not
  // beyond the noise. The two run alone in 16 more rounds, where b is faster
  // in every one: b wins on that evidence.
  OnlineTuner t = makeTuner({}, {"a", "b", "c"});
  bool extended = false;
  std::string decision;
  int roundB = 0;
  for (int call = 0; call < 1000 && decision.empty(); ++call) {
    const OnlineTuner::Pick p = t.pick(4096);
    CHECK(p.candidate >= 0);
    double s = 10e-6;
    if (p.algorithm.str() == "c") s = 12e-6;
    if (p.algorithm.str() == "b") s = extended ? 9e-6 : (roundB++ % 3 == 0 ? 11e-6 : 9e-6);
    std::vector<double> agree = t.record(p, s);
    if (agree.empty()) continue;
    const std::string what = t.agreed(p, agree);
    if (what.find("measuring the two in 16 more rounds") != std::string::npos) {
      CHECK(!extended);
      extended = true;
      CHECK_EQ(t.report().front().candidates.size(), size_t{2});
    } else if (t.report().front().phase == "exploiting") {
      decision = what;
    }
  }
  CHECK(extended);
  CHECK_EQ(winner(t, 4096), std::string("b"));
  CHECK(decision.find("(model: a)") != std::string::npos);
  // Every candidate's first medians stay in the evidence the cache keeps.
  CHECK_EQ(t.decided().front().measured.size(), size_t{3});
}

TEST(a_far_slower_candidate_leaves_after_the_screening_rounds) {
  OnlineTuner t = makeTuner();
  const std::string what = explore(t, 4096, [&](const std::string& a, int) {
    return a == "a" ? 10e-6 : a == "b" ? 9e-6 : 50e-6;  // c: 5x
  });
  const auto r = t.report().front();
  CHECK_EQ(r.candidates.size(), size_t{2});
  CHECK_EQ(r.candidates[1].algorithm, std::string("b"));
  CHECK_EQ(r.candidates[0].trials, int64_t{8});  // the 2 screening rounds count among the 8
  CHECK_EQ(r.candidates[1].trials, int64_t{8});
  CHECK_EQ(r.trials, int64_t{8 + 8 + 2});  // c: the 2 screening rounds
  CHECK_EQ(r.algorithm, std::string("b"));
  // c ran twice only. One 1.3x slower than the fastest passes the
  // screening, and leaves at the race, after 4 measured rounds, each slower
  // than the leader b; its median stays in the evidence.
  OnlineTuner u = makeTuner();
  explore(u, 4096, [&](const std::string& a, int) { return a == "a" ? 10e-6 : a == "b" ? 9e-6 : 11.7e-6; });
  CHECK_EQ(u.report().front().candidates.size(), size_t{2});
  const auto measured = u.decided().front().measured;
  CHECK(std::find(measured.begin(), measured.end(), std::make_pair(std::string("c"), 11.7e-6)) != measured.end());
  CHECK_EQ(u.report().front().trials, int64_t{3 * 4 + 2 * 4});  // c: 4 rounds; a, b: 4 more
}

TEST(one_slow_outlier_per_candidate_does_not_decide) {
  // a is faster in every round but one, where it takes 10x (a page fault, a
  // preempted core): medians, not means, decide.
  OnlineTuner t = makeTuner();
  explore(t, 4096, [&](const std::string& a, int call) {
    if (a == "a") return call == 12 ? 100e-6 : 10e-6;
    return a == "b" ? 11e-6 : 30e-6;
  });
  CHECK_EQ(winner(t, 4096), std::string("a"));
}

TEST(exploiting_runs_the_winner_and_a_drift_explores_again) {
  TunerSettings s;
  s.firstCheck = 16;
  OnlineTuner t = makeTuner(s);
  explore(t, 4096, [&](const std::string& a, int) { return a == "b" ? 5e-6 : 10e-6; });
  CHECK_EQ(winner(t, 4096), std::string("b"));
  // Stable: checks pass and their interval doubles.
  int checks = 0;
  for (int i = 0; i < 48; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    CHECK_EQ(p.algorithm.str(), std::string("b"));
    CHECK_EQ(p.candidate, -1);
    std::vector<double> v = t.record(p, 5e-6);
    if (!v.empty()) {
      ++checks;
      CHECK_EQ(v.size(), size_t{1});
      CHECK_EQ(t.agreed(p, v), std::string());
    }
  }
  CHECK_EQ(checks, 2);  // after 16 calls, then after 32 more
  // One slow window (a hiccup) is looked at again, not acted on: fast calls after it clear it.
  for (int i = 0; i < 64 + 16; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    CHECK_EQ(p.candidate, -1);
    std::vector<double> v = t.record(p, i < 64 ? 20e-6 : 5e-6);
    if (!v.empty()) CHECK_EQ(t.agreed(p, v), std::string());
  }
  CHECK_EQ(t.report().front().phase, std::string("exploiting"));
  CHECK_EQ(t.report().front().drifts, int64_t{0});
  // The machine changes: b takes 4x as long. Two checks in a row send the bucket back to exploring.
  std::string what;
  for (int i = 0; i < 256 && what.empty(); ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    std::vector<double> v = t.record(p, 20e-6);
    if (!v.empty()) what = t.agreed(p, v);
  }
  CHECK(what.find("measuring again") != std::string::npos);
  CHECK_EQ(t.report().front().phase, std::string("exploring"));
  CHECK(t.pick(4096).candidate >= 0);
}

// Drift checks until the bucket explores again, with b taking `seconds` per call.
static int checksUntilDrift(OnlineTuner& t, double seconds) {
  int checks = 0;
  for (int i = 0; i < 4096; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    CHECK_EQ(p.candidate, -1);
    std::vector<double> v = t.record(p, seconds);
    if (v.empty()) continue;
    ++checks;
    if (t.agreed(p, v).find("measuring again") != std::string::npos) return checks;
  }
  CHECK(false);
  return checks;
}

TEST(a_drift_that_keeps_the_winner_makes_the_next_one_need_more_checks) {
  // A machine whose speed swings: every re-measurement finds b again, so each
  // drift needs twice the slow checks in a row of the last (2, 4, 8, ...).
  TunerSettings s;
  s.firstCheck = 16;
  OnlineTuner t = makeTuner(s);
  auto bFastest = [](const std::string& a, int) { return a == "b" ? 5e-6 : 10e-6; };
  explore(t, 4096, bFastest);
  CHECK_EQ(checksUntilDrift(t, 20e-6), 2);
  explore(t, 4096, bFastest);
  CHECK_EQ(checksUntilDrift(t, 20e-6), 4);
  explore(t, 4096, bFastest);
  CHECK_EQ(checksUntilDrift(t, 20e-6), 8);
  // This time the machine changed for good: c wins, and the next drift needs 2 again.
  explore(t, 4096, [](const std::string& a, int) { return a == "c" ? 4e-6 : 20e-6; });
  CHECK_EQ(winner(t, 4096), std::string("c"));
  CHECK_EQ(checksUntilDrift(t, 40e-6), 2);
  CHECK_EQ(t.report().front().drifts, int64_t{4});
}

TEST(a_drift_is_judged_against_the_winners_slowest_round_not_its_medians_interval) {
  // b takes 5-6 us, and 9 us in one round: its median's interval ends at
  // 6 us. A window 1.3x past that but inside 1.3x the slowest round is the
  // winner's own noise, not a drift.
  TunerSettings s;
  s.firstCheck = 16;
  OnlineTuner t = makeTuner(s);
  int trialsOfB = 0;
  explore(t, 4096, [&](const std::string& a, int) {
    if (a != "b") return 20e-6;
    const int k = trialsOfB++ % 9;
    return k == 4 ? 9e-6 : 5e-6 * (1 + 0.02 * k);
  });
  CHECK_EQ(winner(t, 4096), std::string("b"));
  const double hi = t.report().front().hi;
  CHECK(hi < 7e-6);  // the interval's end is far below the slowest round (9 us)
  for (int i = 0; i < 256; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    std::vector<double> v = t.record(p, 9e-6 * 1.3 * 0.99);
    if (!v.empty()) CHECK_EQ(t.agreed(p, v), std::string());
  }
  CHECK_EQ(t.report().front().drifts, int64_t{0});
}

TEST(the_report_names_the_last_winner_while_a_re_exploration_drops_candidates) {
  // c (third) wins; then it slows down and the bucket is explored again, in
  // which b leaves at the screening: the report must still name c (its
  // index no longer points into the candidates; ASan catches a stale read).
  TunerSettings s;
  s.firstCheck = 16;
  OnlineTuner t = makeTuner(s);
  explore(t, 4096, [&](const std::string& a, int) { return a == "c" ? 5e-6 : a == "b" ? 5.1e-6 : 10e-6; });
  CHECK_EQ(winner(t, 4096), std::string("c"));
  CHECK_EQ(t.report().front().candidates.size(), size_t{3});  // b stayed (within 5% of c)
  bool again = false;
  for (int i = 0; i < 128 && !again; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    std::vector<double> v = t.record(p, 50e-6);
    if (!v.empty()) again = t.agreed(p, v).find("measuring again") != std::string::npos;
  }
  CHECK(again);
  bool screened = false;  // b has left, the re-exploration goes on
  for (int i = 0; i < 64 && !screened; ++i) {
    const OnlineTuner::Pick p = t.pick(4096);
    const std::string a = p.algorithm.str();
    std::vector<double> v = t.record(p, a == "b" ? 40e-6 : a == "c" ? 9e-6 : 10e-6);
    if (!v.empty()) t.agreed(p, v);
    const auto r = t.report().front();
    screened = r.phase == "exploring" && r.candidates.size() == 2;
  }
  CHECK(screened);
  CHECK_EQ(t.report().front().candidates.size(), size_t{2});
  CHECK_EQ(t.report().front().algorithm, std::string("c"));
  CHECK_EQ(t.decided().front().algorithm, std::string("c"));
}

TEST(a_paced_exploration_adds_at_most_its_budget_and_pauses_on_the_fastest_so_far) {
  // True times: b 5 us, a (the model's choice) 10 us, c 20 us; the model
  // predicts a 10, b 12, c 20 us. With a 2% budget the leader runs alone
  // before each round; until the screening it is the model's choice (a), then
  // the fastest measured (b). Against the leader of the moment, what the
  // trials add stays within 2% of the time from each pause's start.
  TunerSettings s;
  s.explorePercent = 2;
  OnlineTuner t = makeTuner(s);
  auto truth = [](const std::string& a) { return a == "b" ? 5e-6 : a == "a" ? 10e-6 : 20e-6; };
  double total = 0, excess = 0;
  int64_t calls = 0, paused = 0;
  std::string leader = "a";
  std::vector<std::string> leaders;
  while (calls < 100000) {
    const OnlineTuner::Pick p = t.pick(4096);
    ++calls;
    const double secs = truth(p.algorithm.str());
    total += secs;
    if (p.candidate < 0 && t.report().front().phase == "exploring") {
      ++paused;
      CHECK(!p.measured);
      leader = p.algorithm.str();
      if (leaders.empty() || leaders.back() != leader) leaders.push_back(leader);
    } else if (p.candidate >= 0) {
      excess += std::max(0.0, secs - truth(leader));
    }
    std::vector<double> agree = t.record(p, secs);
    if (!agree.empty()) t.agreed(p, agree);
    if (t.report().front().phase == "exploiting") break;
  }
  const auto report = t.report();
  CHECK_EQ(report.front().algorithm, std::string("b"));
  CHECK_EQ(report.front().paced, paused);
  CHECK(leaders == (std::vector<std::string>{"a", "b"}));
  // The model's pace before round 1: E = 2 us + 10 us over a's 10 us, x 49, less the round's 3 calls.
  CHECK(paused > 2 * 56);
  CHECK(excess <= 0.02 * total);
  CHECK(excess > 0.002 * total);  // the budget is spent, not hoarded
  // Unpaced (100), the same exploration makes no pauses.
  TunerSettings all;
  OnlineTuner u = makeTuner(all);
  explore(u, 4096, [&](const std::string& a, int) { return truth(a); });
  CHECK_EQ(u.report().front().paced, int64_t{0});
  CHECK_EQ(winner(u, 4096), std::string("b"));
  // The log says so.
  OnlineTuner v = makeTuner(s);
  v.pick(4096);
  CHECK(
      v.describe(OnlineTuner::bucketOf(4096)).find("within 2% of the bucket's time: 56 calls of a before this round") !=
      std::string::npos);
}

TEST(raising_the_share_mid_pause_runs_the_rest_of_the_exploration_back_to_back) {
  // Paced at 2%, the first pause (56 calls of the model's choice, see above)
  // is under way; at 100 the next pick is a trial and no pause follows. Back
  // at 2 in the middle of the exploration, the next round waits again, for
  // what the trials so far cost. Picks before, between and after match a
  // tuner that was told the same at the same calls.
  auto truth = [](const std::string& a) { return a == "b" ? 5e-6 : a == "a" ? 10e-6 : 20e-6; };
  auto run = [&](std::vector<std::string>* picks) {
    TunerSettings s;
    s.explorePercent = 2;
    OnlineTuner t = makeTuner(s);
    auto step = [&] {
      const OnlineTuner::Pick p = t.pick(4096);
      picks->push_back(p.algorithm.str() + (p.candidate >= 0 ? "*" : ""));
      std::vector<double> agree = t.record(p, truth(p.algorithm.str()));
      if (!agree.empty()) t.agreed(p, agree);
      return p;
    };
    for (int i = 0; i < 10; ++i) CHECK(step().candidate < 0);  // pausing
    CHECK_EQ(t.explorePercent(), 2);
    t.setExplorePercent(100);
    CHECK_EQ(t.explorePercent(), 100);
    for (int i = 0; i < 6; ++i) CHECK(step().candidate >= 0);  // two rounds of three: no pause between
    CHECK_EQ(t.report().front().paced, int64_t{10});
    t.setExplorePercent(2);
    CHECK(step().candidate < 0);  // the third round waits
    int64_t pausing = 1;
    while (step().candidate < 0) ++pausing;
    CHECK(pausing > 10);
    return t.report().front().paced;
  };
  std::vector<std::string> one, two;
  const int64_t paced = run(&one);
  CHECK_EQ(run(&two), paced);
  CHECK(one == two);
  // Out of range: the nearest share.
  OnlineTuner t = makeTuner({});
  t.setExplorePercent(0);
  CHECK_EQ(t.explorePercent(), 1);
}

TEST(a_paced_exploration_charges_the_trials_warm_up_calls) {
  // Blocks of 4 calls; every candidate's first call after a switch takes
  // 100 us more (cold buffers), which the blocks' medians leave out: b wins at
  // 5 us back to back. The budget charges what the trials cost, warm-up
  // included, against the leader's calls back to back.
  TunerSettings s;
  s.blockBytes = 4 * 4096;
  s.explorePercent = 2;
  OnlineTuner t = makeTuner(s);
  auto steady = [](const std::string& a) { return a == "b" ? 5e-6 : a == "a" ? 10e-6 : 20e-6; };
  std::string last;
  double total = 0, excess = 0;
  std::string leader = "a";
  for (int64_t call = 0; call < 1000000; ++call) {
    const OnlineTuner::Pick p = t.pick(4096);
    const std::string a = p.algorithm.str();
    const double secs = steady(a) + (a != last ? 100e-6 : 0);
    last = a;
    total += secs;
    if (p.candidate < 0)
      leader = a;
    else
      excess += std::max(0.0, secs - steady(leader));
    std::vector<double> agree = t.record(p, secs);
    if (!agree.empty()) t.agreed(p, agree);
    if (t.report().front().phase == "exploiting") break;
  }
  CHECK_EQ(winner(t, 4096), std::string("b"));
  CHECK(excess <= 0.02 * total);
}

TEST(a_pause_is_priced_with_the_outliers_every_call_meets) {
  // Every call, pause or trial, of any algorithm, takes 200 us more one time
  // in four (a peer arriving late, as in a training step): the outliers cost
  // the pauses as much as the trials. The leader's pause call is priced at
  // its warm mean, outliers included; priced at its median (5 us against
  // means of 55-70 us) every trial call would look 50 us dearer than a
  // pause, and the pauses per trial call grew 8x here (302 against 37). The
  // noisier means still cost some (the decision takes more rounds, and the
  // screening keeps more candidates).
  auto run = [](bool outliers) {
    TunerSettings s;
    s.blockBytes = 4 * 4096;
    s.explorePercent = 2;
    OnlineTuner t = makeTuner(s);
    std::mt19937 rng(7);
    for (int64_t call = 0; call < 1000000; ++call) {
      const OnlineTuner::Pick p = t.pick(4096);
      const std::string a = p.algorithm.str();
      const bool late = outliers && rng() % 4 == 0;
      const double secs = (a == "b" ? 5e-6 : a == "a" ? 10e-6 : 20e-6) + (late ? 200e-6 : 0);
      std::vector<double> agree = t.record(p, secs);
      if (!agree.empty()) t.agreed(p, agree);
      const auto r = t.report().front();
      if (r.phase == "exploiting") return static_cast<double>(r.paced) / static_cast<double>(r.trials);
    }
    CHECK(false);
    return 0.0;
  };
  const double quiet = run(false), noisy = run(true);
  CHECK(noisy < 3 * quiet);
}

TEST(buckets_are_independent_and_a_single_candidate_is_decided_at_once) {
  using Ranked = std::vector<std::pair<std::string, double>>;
  auto ranker = [](int64_t bytes) {
    if (bytes <= 8) return Ranked{{"a", 1e-6}};  // one algorithm serves
    // c is 50x and d 100x the favourite: c is measured anyway (the model's
    // first three always are), d is beyond the spread
    if (bytes <= 64) return Ranked{{"a", 1e-6}, {"b", 2e-6}, {"c", 5e-5}, {"d", 1e-4}};
    return Ranked{{"a", 1e-5}, {"b", 1e-5}};
  };
  OnlineTuner t(ranker, [](const std::string&, int64_t) { return true; });
  const OnlineTuner::Pick tiny = t.pick(8);
  CHECK_EQ(tiny.candidate, -1);  // a alone, no exploration
  CHECK_EQ(tiny.algorithm.str(), std::string("a"));
  CHECK(t.pick(64).candidate >= 0);
  CHECK_EQ(t.report()[1].candidates.size(), size_t{3});
  CHECK_EQ(t.report()[1].candidates[2].algorithm, std::string("c"));
  CHECK(t.pick(1 << 20).candidate >= 0);  // another bucket explores
}

TEST(a_candidate_that_cannot_serve_a_message_of_its_bucket_leaves_it) {
  auto ranker = [](int64_t bytes) {
    if (bytes > 4032) return std::vector<std::pair<std::string, double>>{{"ring", 2e-5}};
    return std::vector<std::pair<std::string, double>>{{"pairwise", 1e-5}, {"ring", 2e-5}};
  };
  OnlineTuner t(ranker, [](const std::string& a, int64_t bytes) { return a != "pairwise" || bytes <= 4032; });
  OnlineTuner::Pick p = t.pick(4000);  // bucket (2048, 4096], first trial: pairwise
  CHECK_EQ(p.algorithm.str(), std::string("pairwise"));
  p = t.pick(4096);  // the next trial is ring's, which takes 4096 B
  CHECK_EQ(p.algorithm.str(), std::string("ring"));
  p = t.pick(4096);  // round 1 starts with ring (rotated)
  p = t.pick(4096);  // pairwise's turn, which cannot take 4096 B: it leaves; ring alone is decided
  CHECK_EQ(p.algorithm.str(), std::string("ring"));
  CHECK_EQ(p.candidate, -1);
  CHECK_EQ(t.report().front().source, std::string("model"));
  CHECK_EQ(t.pick(4000).algorithm.str(), std::string("ring"));
}

TEST(decisions_round_trip_through_the_cache_text) {
  const std::vector<std::string> names = {"ring", "rhd", "tree"};  // the file names real algorithms
  OnlineTuner t = makeTuner({}, names);
  explore(t, 1 << 20, [&](const std::string& a, int) { return a == "tree" ? 3e-4 : 9e-4; });
  TuningTable table;
  table.key = "scalecomm-test world=2";
  table.world = 2;
  table.allreduce = t.decided();
  CHECK_EQ(table.allreduce.size(), size_t{1});
  const TuningTable back = TuningTable::parse(table.str(), "test");
  CHECK_EQ(back.key, table.key);
  CHECK_EQ(back.allreduce.size(), size_t{1});
  CHECK_EQ(back.allreduce[0].algorithm, std::string("tree"));
  CHECK_EQ(back.allreduce[0].bytes, int64_t{1} << 20);
  CHECK(std::fabs(back.allreduce[0].median - 3e-4) < 1e-12);
  CHECK_EQ(back.allreduce[0].measured.size(), size_t{3});  // rhd (3x) left at the screening, its time kept
  OnlineTuner u = makeTuner({}, names);
  u.load(back.allreduce);
  const OnlineTuner::Pick p = u.pick(1 << 20);  // loaded: exploits at once
  CHECK_EQ(p.algorithm.str(), std::string("tree"));
  CHECK_EQ(p.candidate, -1);
  CHECK_EQ(u.report().front().source, std::string("cache"));
  // An old-style line (no times) loads too; a bad one names its line.
  CHECK_EQ(TuningTable::parse("world 2\nallreduce 8 tree\n", "t").allreduce[0].algorithm, std::string("tree"));
  bool threw = false;
  try {
    TuningTable::parse("allreduce 8 tree 1e-6 2e-6\n", "t");
  } catch (const Error& e) {
    threw = std::string(e.what()).find("line 1") != std::string::npos;
  }
  CHECK(threw);
}

namespace {

// n groups over loopback, auto online with trials of kBlock calls; every rank
// runs `calls` allreduces of 4096 bytes (inline and on the worker
// alternately, with up to `inFlight` submitted before the oldest is waited
// for; `before` runs ahead of each submission) and checks each result
// exactly. Returns the groups (shut down) and each rank's trial counts.
struct LiveRun {
  std::vector<std::shared_ptr<Group>> groups;
  std::vector<std::map<std::string, uint64_t>> trials;
};
constexpr int kBlock = 2;
LiveRun runLive(int n, int calls, const std::function<void(int, Group&)>& setUp = {}, int explorePercent = 100,
                int inFlight = 1, const std::function<void(int rank, int call, Group&)>& before = {}) {
  LoopbackFabric fabric(n, 1 << 16);
  auto comms = loopbackCommunicators(fabric, 0);
  GroupConfig cfg;
  cfg.timeoutMs = 20000;
  cfg.autotune = "online";
  cfg.autoBlockBytes = kBlock * 4096;
  cfg.autoExplorePercent = explorePercent;  // 100: the rounds back to back
  CostParams costs;
  costs.alpha = 5e-6;
  costs.overhead = 5e-6;
  costs.beta = 1e-9;
  LiveRun run;
  for (auto& c : comms) run.groups.push_back(Group::create(std::move(c), cfg, costs));
  run.trials.resize(n);
  const auto errors = sctest::onThreads(n, [&](int rank) {
    Group& g = *run.groups[rank];
    if (setUp) setUp(rank, g);
    struct Pending {
      int call;
      std::vector<float> v;
      std::future<std::string> done;
    };
    std::deque<Pending> pending;
    auto finish = [&] {
      Pending& p = pending.front();
      CHECK_EQ(p.done.get(), std::string());
      for (float x : p.v) CHECK_EQ(x, static_cast<float>(n * (n + 1) / 2 + n * p.call));
      pending.pop_front();
    };
    for (int i = 0; i < calls; ++i) {
      if (before) before(rank, i, g);
      pending.push_back(Pending{i, std::vector<float>(1024, static_cast<float>(rank + 1 + i)), {}});
      const Group::Prepared& site = g.prepare(CallKind::Allreduce, "allreduce", 4096);
      CHECK_EQ(site.algorithm.str(), std::string("auto"));
      Call c;
      c.kind = CallKind::Allreduce;
      c.name = site.title;
      c.algorithm = site.algorithm;
      c.data = pending.back().v.data();
      c.count = 1024;
      c.dtype = DataType::Float32;
      c.op = ReduceOp::Sum;
      c.blocking = inFlight == 1 && i % 2 == 0;  // inline and on the worker alike
      auto done = std::make_shared<std::promise<std::string>>();
      pending.back().done = done->get_future();
      c.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
      g.submit(std::move(c));
      if (static_cast<int>(pending.size()) >= inFlight) finish();
    }
    while (!pending.empty()) finish();
    for (const auto& [name, s] : g.stats())
      if (name.find("(trial)") != std::string::npos) run.trials[rank][name] = s.calls;
  });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
  for (auto& g : run.groups) g->shutdown();
  return run;
}

// Every rank reports the same decision on the same evidence, and ran the same trials.
void checkAlike(const LiveRun& run) {
  const auto report = run.groups[0]->selector().tuning();
  CHECK_EQ(report.size(), size_t{1});
  CHECK_EQ(report[0].phase, std::string("exploiting"));
  CHECK(report[0].candidates.size() >= 2);
  for (size_t r = 1; r < run.groups.size(); ++r) {
    const auto other = run.groups[r]->selector().tuning();
    CHECK_EQ(other[0].algorithm, report[0].algorithm);
    CHECK_EQ(other[0].median, report[0].median);  // agreed values: the same bits
    CHECK(run.trials[r] == run.trials[0]);
  }
}

}  // namespace

TEST(every_rank_of_a_live_group_decides_alike_with_exact_results) {
  LiveRun run = runLive(3, 160 * kBlock);
  checkAlike(run);
  const auto report = run.groups[0]->selector().tuning();
  for (const auto& c : report[0].candidates) {
    CHECK_EQ(run.trials[0]["allreduce:" + c.algorithm + " (trial)"], static_cast<uint64_t>(c.trials));
    CHECK_EQ(c.trials % kBlock, int64_t{0});
  }
  CHECK(run.groups[0]->stats().count("allreduce:" + report[0].algorithm) == 1);  // then it exploits
}

TEST(a_live_group_extends_an_inconclusive_exploration_alike_on_every_rank) {
  // Every rank reports the same made-up times: tree 10% faster than the
  // rest but slower in every third round, so the decision is extended; the
  // ranks go through it together, with exact results throughout.
  LiveRun run = runLive(3, 200 * kBlock, [](int, Group& g) {
    auto count = std::make_shared<int>(0);
    g.selector().skewTimesForTest([count](const std::string& a, double) {
      if (a != "tree") return 10e-6;
      return (*count)++ % 3 == 0 ? 11e-6 : 9e-6;
    });
  });
  checkAlike(run);
  int64_t trials = 0;
  const auto report = run.groups[0]->selector().tuning();
  for (const auto& c : report[0].candidates) trials += c.trials;
  CHECK(trials > 2 * 16 * kBlock);  // the extension's rounds ran
}

TEST(one_rank_measuring_differently_cannot_split_the_decision) {
  // Rank 1 sees every algorithm but tree as 20 ms; ranks 0 and 2 see tree
  // as the slowest (50 us against 5 us): alone, they would never take it.
  // The ranks decide on the slowest rank's times, so every rank takes tree.
  // (Made-up times on every rank: real ones on threads sharing two cores
  // drift, and a drift re-explores.)
  LiveRun run = runLive(3, 120 * kBlock, [](int rank, Group& g) {
    if (rank == 1) {
      g.selector().skewTimesForTest([](const std::string& a, double) { return a == "tree" ? 10e-6 : 20e-3; });
    } else {
      g.selector().skewTimesForTest([](const std::string& a, double) { return a == "tree" ? 50e-6 : 5e-6; });
    }
  });
  checkAlike(run);
  const auto report = run.groups[0]->selector().tuning();
  bool explored = false;
  for (const auto& c : report[0].candidates) explored = explored || c.algorithm == "tree";
  CHECK(explored);
  CHECK_EQ(report[0].algorithm, std::string("tree"));
}

TEST(a_paced_live_group_pauses_alike_on_every_rank) {
  // tree 5 us, the rest 10 us on every rank (made up, so that drift cannot
  // re-explore); with a 20% budget the ranks pause for the same calls, with
  // exact results throughout, and then decide alike.
  LiveRun run = runLive(
      3, 600 * kBlock,
      [](int, Group& g) {
        g.selector().skewTimesForTest([](const std::string& a, double) { return a == "tree" ? 5e-6 : 10e-6; });
      },
      20);
  checkAlike(run);
  const auto report = run.groups[0]->selector().tuning();
  CHECK_EQ(report[0].algorithm, std::string("tree"));
  CHECK(report[0].paced > 0);
  for (size_t r = 1; r < run.groups.size(); ++r) CHECK_EQ(run.groups[r]->selector().tuning()[0].paced, report[0].paced);
}

TEST(a_share_set_behind_queued_calls_applies_after_them_on_every_rank) {
  // Paced at 2%, 64 calls queued at a time; every rank raises the share to
  // 100 after call 40 (ranks reach it with different calls still queued),
  // then the exploration runs back to back and every rank decides alike.
  auto shares = std::make_shared<std::vector<int>>(3, 0);
  LiveRun run = runLive(
      3, 400 * kBlock,
      [](int, Group& g) {
        g.selector().skewTimesForTest([](const std::string& a, double) { return a == "tree" ? 5e-6 : 10e-6; });
      },
      2, 64,
      [shares](int rank, int call, Group& g) {
        if (call == 40) (*shares)[rank] = g.setAutoExplorePercent(100);
      });
  checkAlike(run);
  const auto report = run.groups[0]->selector().tuning();
  CHECK_EQ(report[0].algorithm, std::string("tree"));
  CHECK_EQ(report[0].paced, int64_t{40});  // the first 40 calls paused, the rest explored
  for (int r = 0; r < 3; ++r) CHECK_EQ((*shares)[r], 2);
  CHECK_EQ(run.groups[0]->setAutoExplorePercent(7), 100);
  bool threw = false;
  try {
    run.groups[0]->setAutoExplorePercent(101);
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::InvalidArgument;
  }
  CHECK(threw);
}

// The Selector decides without a Group: the collectives with one answer are
// resolved from the layout, sites are made once, auto's pick follows the
// cost model (or the tuning cache's winner where it serves), and online auto
// leaves allreduce's sites to the per-call pick.
TEST(the_selector_decides_alone_from_its_layout_costs_and_cache) {
  CostParams costs;
  costs.alpha = 10e-6;
  costs.beta = 1e-9;
  SelectorSettings model;
  model.online = false;
  const AlgoParams oneHostNoWindows{{}, 1, 0}, windows{{}, 1, 1 << 19};
  Selector plain(0, 4, AlgorithmSelection::parse("auto"), oneHostNoWindows, costs, {}, model);
  CHECK_EQ(plain.selection().barrier, std::string("dissemination"));
  CHECK_EQ(plain.selection().allgather, std::string("ring"));
  Selector shared(0, 4, AlgorithmSelection::parse("auto"), windows, costs, {}, model);
  CHECK_EQ(shared.selection().barrier, std::string("shared"));
  bool refused = false;
  try {
    Selector(1, 4, AlgorithmSelection::parse("shared"), oneHostNoWindows, costs, {}, model);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("(rank 1): algorithm shared") != std::string::npos;
  }
  CHECK(refused);

  const int64_t big = 64 << 20;
  const std::string modelPick =
      chooseAllreduce(4, big, costs, oneHostNoWindows, autoAllreduceCandidates(4, big, oneHostNoWindows));
  const Selector::Prepared& site = plain.prepare(CollectiveKind::Allreduce, "allreduce", big);
  CHECK_EQ(site.algorithm.str(), modelPick);
  CHECK_EQ(site.title.str(), "allreduce:" + modelPick);
  CHECK(&plain.prepare(CollectiveKind::Allreduce, "allreduce", big) == &site);  // made once
  CHECK_EQ(plain.prepare(CollectiveKind::Alltoall, "all_to_all", 64).title.str(), std::string("all_to_all"));

  CHECK(modelPick != "tree");  // so the cache's winner below is visibly the cache's
  TuningTable cache = TuningTable::parse("allreduce " + std::to_string(big) + " tree\n", "test cache");
  Selector cached(0, 4, AlgorithmSelection::parse("auto"), oneHostNoWindows, costs, cache, model);
  CHECK_EQ(cached.algorithmFor(CollectiveKind::Allreduce, big).str(), std::string("tree"));
  CHECK_EQ(cached.algorithmFor(CollectiveKind::Allreduce, big, "rhd").str(), std::string("rhd"));

  SelectorSettings online;
  Selector measuring(0, 4, AlgorithmSelection::parse("auto"), oneHostNoWindows, costs, {}, online);
  CHECK(measuring.online());
  CHECK(measuring.prepare(CollectiveKind::Allreduce, "allreduce", big).algorithm.is(AlgorithmKind::Auto));
  CHECK(!Selector(0, 1, AlgorithmSelection::parse("auto"), oneHostNoWindows, costs, {}, online).online());
}

TEST_MAIN()
