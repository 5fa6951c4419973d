// compress="auto" without torch: the link fit, and the choice on a simulated
// link (communication that sleeps for its bytes): a sparsifier when the link
// is slow, none when it is fast, sparsifiers only after the warm-up, a codec
// whose residual holds too much of the recent gradient left out (noise, or
// one weight of a bucket starved: before it runs where its replay on the
// sample already reads it; no replay where it cannot pay) or kept (steady
// gradients), two ranks whose compute differs from step to step
// (waits for a late peer are not the link's: no flapping on a fast link,
// still a sparsifier on a slow one, the same choice on both), and a link
// that speeds up noticed, with none then sending what the residual held
// (nothing lost), while a peer's changing lateness, or a small codec's
// time moving within the step's noise, is not taken for the link
// drifting, a codec whose call is shorter but whose step is longer
// left (the step guard), also after the link drifts, and a codec on trial
// whose step is longer than that of the codec it replaced, but not one whose
// step is within the step's noise of none's, nor one on trial against
// more of none's steps than it has, a small key's noisy
// step not charged to a large key's codecs, one that would save too little
// of the step not tried, PowerSGD a candidate only where the weights'
// shapes are known, before the window only where it saves an eighth of the
// step (once started, kept while it leads by the margin; read by the guard
// from call kAutoGuardCalls), and kept where
// its residual is noise across the recent
// gradient, a large key's codecs timed on a sample, a codec
// that takes over from another judged on its own residual, and a codec
// that lost its trial to another tried again once that one is left out or
// proves slower than it, and a codec on trial kept unless another is
// faster by the margin; a sparsifier that saves less than an eighth of the
// step kept from taking over from codecs that hold back less; a key's
// decisions counted in its calls since its tensor came.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compress/auto_select.h"
#include "harness.h"

using namespace scalecomm;
using sctest::gaussian;

namespace {

// One rank's view of a group of `size` ranks whose peers contribute zeros:
// sums come back as they went, gathered slots of the others hold zero
// payloads; every call sleeps alpha + bus bytes x beta.
struct SimulatedLink {
  int size = 4;
  double alpha = 50e-6;
  double beta = 0;         // seconds per bus byte; 0: no sleep at all
  double smallExtra = 0;   // seconds more for an allreduce of under 64 KiB (not allreduceMax)
  double gatherExtra = 0;  // seconds more for an allgather
  CompressComms comms() {
    CompressComms c;
    c.rank = 0;
    c.size = size;
    c.allreduce = [this](void*, int64_t count, DataType type, ReduceOp) {
      const double bytes = static_cast<double>(count) * elementSize(type);
      wait(bytes * 2 * (size - 1) / size);
      if (beta > 0 && bytes < 65536) std::this_thread::sleep_for(std::chrono::duration<double>(smallExtra));
    };
    c.allgatherBytes = [this](uint8_t* all, int64_t bytes) {
      std::memset(all + bytes, 0, static_cast<size_t>(bytes) * (size - 1));
      wait(static_cast<double>(bytes) * (size - 1));
      if (beta > 0) std::this_thread::sleep_for(std::chrono::duration<double>(gatherExtra));
    };
    c.allreduceMax = [this](double*, int64_t count) { wait(8.0 * count); };
    return c;
  }
  void wait(double busBytes) const {
    if (beta > 0) std::this_thread::sleep_for(std::chrono::duration<double>(alpha + busBytes * beta));
  }
};

// One rank of `ranks` on a simulated link (free until its beta is set),
// and auto with `bound` on one key; run() is one call of the key.
struct OneRank {
  SimulatedLink link;
  AutoSelection sel;
  CompressState state;
  CompressComms comms;
  OneRank(int ranks, double bound) : sel(bound) {
    link.size = ranks;
    comms = link.comms();
  }
  OneRank(const OneRank&) = delete;  // comms holds the link's address
  int run(float* x, int64_t n, const PowerSgdLayout& layout = {}) { return sel.run(x, n, true, state, comms, layout); }
};

// One rank of 4 on a simulated link of 20 MB/s of bus bandwidth, and auto
// without the accuracy guard.
struct OnSlowLink : OneRank {
  OnSlowLink() : OneRank(4, 0) { link.beta = 1.0 / 20e6; }
};

std::vector<float> values(int seed, int64_t n) { return gaussian(n, static_cast<unsigned>(seed)); }

const std::string& chosen(const CompressState& s) { return autoCandidates()[s.choice.current]; }

// One step's gradient of a side x side weight and its bias (values(seed)):
// the weight's is the rank-one u v^T, u the bias's values (so the step's
// own row factor), under `noise` times fresh Gaussian noise
// (values(seed + 600)).
std::vector<float> rankOneStep(int seed, int64_t side, const std::vector<float>& v, float noise = 0) {
  const int64_t a = side * side;
  std::vector<float> x = values(seed, a + side);
  const std::vector<float> z = noise != 0 ? values(seed + 600, a) : std::vector<float>();
  for (int64_t i = 0; i < side; ++i)
    for (int64_t j = 0; j < side; ++j) x[i * side + j] = x[a + i] * v[j] + (noise != 0 ? noise * z[i * side + j] : 0);
  return x;
}

// One rank's key of a side x side weight and its bias (PowerSGD's layout)
// on a simulated link of `busBytesPerSecond`, auto with `bound`; step()
// runs one call on rankOneStep(seed, ...) and returns the candidate it ran.
struct RankOneKey : OneRank {
  int64_t side, n;
  PowerSgdLayout layout;
  std::vector<float> v;
  RankOneKey(int64_t side_, double busBytesPerSecond, double bound, int vSeed)
      : OneRank(4, bound),
        side(side_),
        n(side_ * side_ + side_),
        layout{{side_ * side_, side_}, {side_, kPowerSgdDense}},
        v(values(vSeed, side_)) {
    link.beta = 1.0 / busBytesPerSecond;
  }
  int step(int seed, float noise = 0) {
    std::vector<float> x = rankOneStep(seed, side, v, noise);
    return run(x.data(), n, layout);
  }
};

// One training step of a key: `computeMs` of compute (the backward before
// its gradient is ready), then the key's call on values(seed, n); returns
// the candidate the call ran.
int trainingStep(AutoSelection& sel, CompressState& state, const CompressComms& comms, int64_t n, int seed,
                 int computeMs) {
  std::this_thread::sleep_for(std::chrono::milliseconds(computeMs));
  std::vector<float> x = values(seed, n);
  return sel.run(x.data(), n, true, state, comms);
}

int trainingStep(OneRank& me, int64_t n, int seed, int computeMs) {
  return trainingStep(me.sel, me.state, me.comms, n, seed, computeMs);
}

// One step's gradient of a weight whose gradient is a steady rank-one
// direction u v^T under `noise` times fresh Gaussian noise, followed by a
// bias whose gradient is steady and a hundred times smaller than b from the
// key's call `biasFrom` on (zero before; from kAutoWindowCalls + 1, a
// sparsifier's replay before it may run sees none of it): top-k at a small
// ratio never reaches the bias, PowerSGD sends it whole.
std::vector<float> rankOneWithBias(const std::vector<float>& u, const std::vector<float>& v,
                                   const std::vector<float>& b, float noise, int call, int biasFrom, int seed) {
  const int64_t rows = static_cast<int64_t>(u.size()), cols = static_cast<int64_t>(v.size()), n = rows * cols;
  std::vector<float> x = values(seed, n + static_cast<int64_t>(b.size()));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = u[i] * v[j] + noise * x[i * cols + j];
  const float scale = call >= biasFrom ? 0.01f : 0.0f;
  for (size_t j = 0; j < b.size(); ++j) x[n + static_cast<int64_t>(j)] = scale * b[j];
  return x;
}

// The running codec's residual, as last measured, is within the tests'
// bound of a third: a decision that reads it over the bound leaves it.
bool runningCodecWithinBound(const CompressState& s) {
  return !s.choice.decided || s.choice.last.residual[s.choice.current] <= 0.33;
}

int candidate(const std::string& spec) {
  const auto& c = autoCandidates();
  return static_cast<int>(std::find(c.begin(), c.end(), spec) - c.begin());
}

// The guard's last reading of a candidate is over the tests' bound of a
// third: its own residual where it ran, kAutoReplayFeedback x its replay's
// where it did not.
bool overBound(const CompressState& s, const std::string& spec) {
  const int i = candidate(spec);
  const double r = s.choice.last.residual[i];
  return r >= 0 && (s.choice.candidates[i].hasRun ? r : kAutoReplayFeedback * r) > 0.33;
}

}  // namespace

TEST(link_fit_recovers_latency_and_bandwidth) {
  LinkFit fit;
  for (double b : {1e3, 1e5, 1e7}) fit.add(b, 100e-6 + b * 1e-9);
  CHECK(std::fabs(fit.alpha() - 100e-6) < 5e-6);
  CHECK(std::fabs(fit.beta() - 1e-9) < 0.05e-9);
  CHECK(std::fabs(fit.predict(1e6) - (100e-6 + 1e-3)) < 1e-5);
  LinkFit one;  // one size class: through the origin
  one.add(1e6, 2e-3);
  CHECK(one.alpha() == 0);
  CHECK(std::fabs(one.predict(2e6) - 4e-3) < 1e-9);
  LinkFit flat;  // times that fall with size are noise: a flat link
  flat.add(1e3, 2e-3);
  flat.add(1e6, 1e-3);
  CHECK(flat.beta() == 0);
  CHECK(std::fabs(flat.predict(1e9) - 1.5e-3) < 1e-9);
}

TEST(a_slow_link_chooses_a_sparsifier_and_a_fast_one_none) {
  const int64_t n = 65536;
  for (const bool slow : {true, false}) {
    OneRank me(4, 0);
    me.link.beta = slow ? 1.0 / 20e6 : 0;                       // 20 MB/s of bus bandwidth, or free
    for (int step = 0; step < kAutoWindowCalls + 20; ++step) {  // sparsifiers wait for the window
      std::vector<float> x = values(step, n);
      me.run(x.data(), n);
    }
    CHECK(me.state.choice.decided);
    const std::string& c = chosen(me.state);
    if (slow) {
      CHECK(c.rfind("topk", 0) == 0);
      const std::vector<double>& p = me.state.choice.last.predicted;
      CHECK(p[me.state.choice.current] < 0.5 * p[0]);  // the fit saw the dense bytes' cost
    } else {
      CHECK_EQ(c, std::string("none"));
    }
    CHECK(!me.state.choice.last.reason.empty());
  }
}

namespace {

// `steps` calls of auto (the default bound, a third) on a simulated link
// of `ranks` (20 MB/s of bus bandwidth unless given), call s on input(s);
// after(s, state) looks at each call's state; after every call the running
// codec is within the bound (runningCodecWithinBound).
template <class Input, class After>
CompressState onSlowLink(int steps, Input input, After after, int ranks = 4, double bytesPerSecond = 20e6,
                         const PowerSgdLayout& layout = {}) {
  OneRank me(ranks, 0.33);
  me.link.beta = 1.0 / bytesPerSecond;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> x = input(s);
    me.run(x.data(), static_cast<int64_t>(x.size()), layout);
    CHECK(runningCodecWithinBound(me.state));
    after(s, me.state);
  }
  return me.state;
}

}  // namespace

TEST(sparsifiers_wait_for_the_window_and_noise_leaves_top_k_1_percent_out) {
  // Gaussian noise at every step: what top-k 1 % holds back is never sent
  // (fresh noise outgrows it) and stays a large share of the recent sum.
  const CompressState state = onSlowLink(
      150, [](int s) { return values(100 + s, 65536); },
      [](int s, const CompressState& st) {
        if (s + 1 < kAutoWindowCalls) CHECK(chosen(st).rfind("topk", 0) != 0);  // none or bf16 first
      });
  const AutoDecision& d = state.choice.last;
  CHECK(overBound(state, "topk:0.01"));  // measured after the warm-up (replayed or run), over the bound
  CHECK(d.reason.find("topk:0.01 left out") != std::string::npos);
  CHECK(state.choice.current != candidate("topk:0.01"));
}

TEST(steady_gradients_keep_a_sparsifier_whose_residual_is_small_against_their_sum) {
  // One direction plus a little noise: the residual is several steps'
  // gradient (far over one step's norm) but a small share of the recent
  // sum, and a slow link keeps a sparsifier. Two ranks at 10 MB/s: top-k
  // 10 %'s allgather sends two fifths of bf16's bus bytes, so the codecs'
  // times cannot tie them (at 4 ranks and 20 MB/s they could: six fifths).
  const std::vector<float> direction = values(7, 65536);
  const CompressState state = onSlowLink(
      120,
      [&](int s) {
        std::vector<float> x = values(200 + s, 65536);
        for (size_t j = 0; j < x.size(); ++j) x[j] = direction[j] + 0.3f * x[j];
        return x;
      },
      [](int, const CompressState&) {}, /*ranks=*/2, /*bytesPerSecond=*/10e6);
  const AutoDecision& d = state.choice.last;
  CHECK(chosen(state).rfind("topk", 0) == 0);
  CHECK(d.residual[state.choice.current] > 0 && d.residual[state.choice.current] <= 0.33);
}

namespace {

// The steady gradients above in a bucket of two weights: 61,440 values and
// 4,096 a hundred times smaller (a norm's gains, a bias), the small one's
// from call `smallFrom` on (zero before), two ranks on a 10 MB/s link. Top-k
// never reaches the small weight's values: its residual holds all of that
// weight's recent gradient, while the bucket's as a whole stays small.
// Returns the state; `sparsified`: calls a sparsifier ran.
CompressState starvedSmallWeight(int smallFrom, int& sparsified) {
  const int64_t large = 61440, small = 4096;
  const std::vector<float> direction = values(7, large + small);
  const auto input = [&](int s) {
    std::vector<float> x = values(200 + s, large + small);
    const float gain = s + 1 >= smallFrom ? 0.01f : 0.0f;
    for (int64_t j = 0; j < large + small; ++j) x[j] = (direction[j] + 0.3f * x[j]) * (j < large ? 1.0f : gain);
    return x;
  };
  const PowerSgdLayout weights{{large, kPowerSgdDense}, {small, kPowerSgdDense}};
  sparsified = 0;
  CompressState state = onSlowLink(
      200, input, [&](int, const CompressState& st) { sparsified += chosen(st).rfind("topk", 0) == 0; },
      /*ranks=*/2, /*bytesPerSecond=*/10e6, weights);
  std::printf("  small weight from call %d: sparsified %d of 200 calls; ended on %s: %s\n", smallFrom, sparsified,
              chosen(state).c_str(), state.choice.last.reason.c_str());
  return state;
}

}  // namespace

TEST(a_sparsifier_that_would_starve_one_weight_of_a_bucket_is_left_out_before_it_runs) {
  // Starved from the first call: each sparsifier's replay on the sample,
  // over the kAutoDecideEvery calls before the window fills, reads the
  // small weight's residual over the bound, and none is ever tried.
  int sparsified = 0;
  const CompressState state = starvedSmallWeight(1, sparsified);
  const AutoDecision& d = state.choice.last;
  CHECK_EQ(sparsified, 0);
  for (const char* spec : {"topk:0.1", "topk:0.03", "topk:0.01"}) CHECK(d.residual[candidate(spec)] > 0.33);
  CHECK(d.reason.find("topk:0.01 left out before it ran") != std::string::npos);
}

TEST(a_sparsifier_that_cannot_pay_on_the_link_is_not_replayed) {
  // The starved bucket above on a link that costs nothing: every sparsifier
  // is predicted slower than none (its codec time against none's free
  // call), so none is replayed (its residual stays unmeasured, and none
  // runs); on the slow link the same inputs replay them all (the test above).
  const int64_t large = 61440, small = 4096;
  const std::vector<float> direction = values(7, large + small);
  const PowerSgdLayout weights{{large, kPowerSgdDense}, {small, kPowerSgdDense}};
  OneRank me(2, 0.33);  // beta 0: no sleep
  int sparsified = 0;
  for (int s = 0; s < kAutoWindowCalls + 16; ++s) {
    std::vector<float> x = values(200 + s, large + small);
    for (int64_t j = 0; j < large + small; ++j) x[j] = (direction[j] + 0.3f * x[j]) * (j < large ? 1.0f : 0.01f);
    sparsified += autoCandidates()[me.run(x.data(), large + small, weights)].rfind("topk", 0) == 0;
  }
  const AutoDecision& d = me.state.choice.last;
  std::printf("  free link: sparsified %d calls; %s\n", sparsified, d.reason.c_str());
  CHECK_EQ(sparsified, 0);
  for (const char* spec : {"topk:0.1", "topk:0.03", "topk:0.01"}) {
    CHECK(d.predicted[candidate(spec)] > d.predicted[0]);
    CHECK(d.residual[candidate(spec)] < 0);  // not replayed, not run
  }
}

TEST(a_sparsifier_that_starves_one_weight_of_a_bucket_is_left_out) {
  // The small weight's gradient starts after the window has filled: the
  // replays see only the large weight's, a sparsifier runs, and the guard
  // reads its own residual over the bound and leaves it.
  int sparsified = 0;
  const CompressState state = starvedSmallWeight(kAutoWindowCalls + 1, sparsified);
  const AutoDecision& d = state.choice.last;
  CHECK(sparsified > 0);  // a sparsifier ran, and its residual was measured
  CHECK(chosen(state).rfind("topk", 0) != 0);
  for (const char* spec : {"topk:0.1", "topk:0.03", "topk:0.01"})
    CHECK(d.residual[candidate(spec)] < 0 || overBound(state, spec));  // not measured, or left out
  CHECK(d.reason.find("left out: its residual holds") != std::string::npos);
}

TEST(powersgd_is_a_candidate_only_where_the_weights_shapes_are_known_and_wins_on_low_rank_ones) {
  // A weight's gradient of rank one whose row factor is new at every step
  // (u_s v^T), and its bias, on a link that turns slow. Factored in its own shape,
  // PowerSGD sends it whole (its rank is within 4) in 2 x 512 x 4 floats
  // plus the bias, and holds nothing back; top-k holds back most of a
  // gradient whose direction changes every step (over the bound: left out).
  // The same values without their shapes (a flat tensor) never run
  // PowerSGD, and the decision prints no word about it.
  const int64_t side = 512, a = side * side, bias = side, n = a + bias;
  const PowerSgdLayout layout{{a, side}, {bias, kPowerSgdDense}};
  const std::vector<float> v = values(12, side);
  for (const bool shaped : {true, false}) {
    OneRank me(4, 0.33);
    int ranPowerSgd = 0;
    for (int s = 0; s < kAutoWindowCalls + 32; ++s) {
      // A fast link (4 GB/s: no codec saves an eighth of the step) while the
      // sparsifiers and PowerSGD wait, then a slow one
      // (1 MB/s of bus bandwidth), where the bytes outweigh any codec's time
      // (also in a sanitizer's build).
      me.link.beta = s + 8 < kAutoWindowCalls ? 1.0 / 4e9 : 1.0 / 1e6;
      std::vector<float> x = rankOneStep(300 + s, side, v);
      const int ran = me.run(x.data(), n, shaped ? layout : PowerSgdLayout{});
      ranPowerSgd += ran == candidate("powersgd:4");
      if (s + 1 < kAutoWindowCalls) CHECK(ran != candidate("powersgd:4"));  // it waits for the window, as top-k
    }
    const AutoDecision& d = me.state.choice.last;
    std::printf("  %s, powersgd ran %d times: %s\n", shaped ? "shaped" : "flat", ranPowerSgd, d.reason.c_str());
    if (shaped) {
      CHECK_EQ(chosen(me.state), std::string("powersgd:4"));
      const double r = d.residual[candidate("powersgd:4")];
      CHECK(r >= 0 && r <= 0.33);  // measured (0: it sends the rank-one part whole)
    } else {
      CHECK_EQ(ranPowerSgd, 0);
      CHECK(std::isinf(d.predicted[candidate("powersgd:4")]));
      CHECK(d.reason.find("powersgd") == std::string::npos);
    }
  }
}

TEST(powersgd_starts_before_the_window_only_where_it_saves_an_eighth_of_the_step) {
  // The rank-one gradient above, 64 x 64 and its bias, on a slow link (0.5
  // MB/s of bus bandwidth: none's call about 50 ms, bf16's 25, PowerSGD's
  // two small ones 7). With nothing else in the step PowerSGD saves over a
  // third of none's step against bf16: the first decision takes it, and
  // PowerSGD runs from the next call, long before the window;
  // behind 150 ms of compute per step the same saving is under an eighth of
  // the step, and it waits (the run stops at call 40).
  for (const int computeMs : {0, 150}) {
    RankOneKey key(64, 0.5e6, 0.33, 12);
    int firstPowerSgd = -1;
    for (int s = 0; s < 40; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(computeMs));
      if (key.step(300 + s) == candidate("powersgd:4") && firstPowerSgd < 0) firstPowerSgd = s + 1;  // its call number
    }
    const CompressState& state = key.state;
    const AutoDecision& d = state.choice.last;
    std::printf("  %d ms of compute, powersgd first ran at call %d: %s\n", computeMs, firstPowerSgd, d.reason.c_str());
    if (computeMs == 0) {
      CHECK_EQ(firstPowerSgd, static_cast<int>(kAutoFirstDecision) + 2);
      CHECK_EQ(chosen(state), std::string("powersgd:4"));
    } else {
      CHECK_EQ(firstPowerSgd, -1);
      CHECK(d.reason.find("powersgd:4 waits for the key's call 64 (before it, only where it saves 12.5 %") !=
            std::string::npos);
    }
  }
}

TEST(a_codec_on_trial_that_saves_less_than_an_eighth_of_the_step_is_not_kept) {
  // The key of the test above under noise, on a faster link (2 MB/s of bus
  // bandwidth: none's call about 12 ms, bf16's 6, PowerSGD's 2). Unread,
  // PowerSGD is not weighed against the codecs that hold back less (it has
  // no replay): behind 100 ms of compute per step it is tried once the
  // window is full. At its trial's end it is read (a share of the recent
  // gradient under the bound) and weighed like any challenger: its saving
  // is under an eighth of the step against none and bf16, which hold back
  // less, and the key goes back to one of them. With nothing else in the
  // step the same saving is over the eighth (PowerSGD starts early) and it
  // is kept. (Were the codec on trial exempt as the current codec, it would
  // run to the end behind 100 ms too.)
  const int powerSgd = candidate("powersgd:4");
  for (const int computeMs : {0, 100}) {
    RankOneKey key(64, 2e6, 0.33, 12);
    int late = 0;          // PowerSGD's calls from the window on
    std::string leftWith;  // the decision after which it stopped
    for (int s = 0; s < kAutoWindowCalls + 16; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(computeMs));
      const bool ran = key.step(300 + s, 0.5f) == powerSgd;
      if (!ran && late > 0 && leftWith.empty()) leftWith = key.state.choice.last.reason;
      late += ran && s + 1 >= kAutoWindowCalls;
    }
    const AutoDecision& d = key.state.choice.last;
    std::printf("  %d ms of compute: powersgd ran %d calls from the window on, reads %.3f; left after: %s\n", computeMs,
                late, d.residual[powerSgd], leftWith.c_str());
    CHECK(d.residual[powerSgd] > kAutoCarryShare && d.residual[powerSgd] <= 0.33);  // read, within the bound
    if (computeMs == 0) {
      CHECK_EQ(chosen(key.state), std::string("powersgd:4"));
      CHECK(late >= 16);
    } else {
      CHECK(late >= 1 && late <= static_cast<int>(kAutoTrialCalls) + 1);  // its trial, and no more
      CHECK(chosen(key.state) == "none" || chosen(key.state) == "bf16");
      CHECK(leftWith.find("powersgd:4 (") != std::string::npos &&
            leftWith.find("may hold back more of the recent gradient than") != std::string::npos);
    }
  }
}

TEST(none_s_sum_runs_as_a_plain_allreduce_and_a_codec_s_sums_as_when_it_is_named) {
  // The group gives auto two sums: exactSum, the whole tensor's exact sum as
  // a plain allreduce of its bytes runs (the online tuner's pick), and
  // allreduce, the call's algorithm, which a codec named by hand runs its
  // exchanges on. None's sum must take the first, every codec's exchange
  // the second (tuned, PowerSGD's two small sums met the tuner's
  // exploration on every call). The early-start key above: none on calls
  // 1-4, then PowerSGD.
  RankOneKey key(64, 0.5e6, 0.33, 12);
  int exact = 0, plain = 0;
  const auto simulated = key.comms.allreduce;
  key.comms.allreduce = [&](void* data, int64_t count, DataType type, ReduceOp op) {
    plain += 1;
    simulated(data, count, type, op);
  };
  key.comms.exactSum = [&](void* data, int64_t count, DataType type, ReduceOp op) {
    exact += 1;
    CHECK_EQ(count, key.n);
    CHECK(type == DataType::Float32);
    simulated(data, count, type, op);
  };
  int noneCalls = 0, codecCalls = 0;
  for (int call = 1; call <= 12; ++call) {
    exact = plain = 0;
    const int ran = key.step(300 + call);
    if (ran == 0) {
      noneCalls += 1;
      CHECK_EQ(exact, 1);
      CHECK_EQ(plain, 0);
    } else {
      codecCalls += 1;
      CHECK_EQ(exact, 0);
      CHECK(plain >= 1);
    }
  }
  CHECK(noneCalls >= static_cast<int>(kAutoFirstDecision) + 1);
  CHECK(codecCalls >= 1);  // PowerSGD ran (from call 5 on a quiet machine)
}

TEST(the_guard_reads_an_early_codec_only_against_a_window_of_kAutoGuardCalls) {
  // The early start above, on the rank-one gradient under noise of its own
  // size: PowerSGD's residual is noise it has not yet sent. Against the
  // few calls of gradient the window holds at its trial's end that reads
  // as a large share, as a residual of a step or two does on any window of
  // a few calls; from call kAutoGuardCalls the guard reads it. With a
  // bound under every reading, PowerSGD runs from the first decision to
  // call kAutoGuardCalls, and is left there (the guard still acts).
  RankOneKey key(64, 0.5e6, 0.01, 12);
  const int psgd = candidate("powersgd:4");
  int first = -1, last = -1;
  for (int call = 1; call <= static_cast<int>(kAutoGuardCalls) + 4; ++call) {
    if (key.step(500 + call, 1.0f) == psgd) {
      if (first < 0) first = call;
      last = call;
    }
  }
  const CompressState& state = key.state;
  const AutoDecision& d = state.choice.last;
  std::printf("  powersgd ran calls %d-%d: %s\n", first, last, d.reason.c_str());
  CHECK_EQ(first, static_cast<int>(kAutoFirstDecision) + 2);
  CHECK_EQ(last, static_cast<int>(kAutoGuardCalls));
  CHECK(d.residual[psgd] > 0.01);
  CHECK(d.reason.find("powersgd:4 left out") != std::string::npos);
}

TEST(an_early_powersgd_that_measures_a_smaller_saving_is_kept_while_it_leads_by_the_margin) {
  // A 256 x 256 rank-one gradient and its bias on a link of 10 MB/s of bus
  // bandwidth behind 50 ms of compute: none's call about 40 ms (a step of
  // about 90), bf16's 20, PowerSGD predicted 1-4 ms (release, ASan), so it
  // starts early, at the first decision (it saves over an eighth of the
  // step against bf16). Its two small allreduces then take more each than
  // the link's fit predicts, so that it measures about 32 ms: a saving
  // over the best other open candidate (none, once bf16's prediction
  // carries the link's longer latency) under an eighth of none's step (the
  // early start's condition: PowerSGD over about 29 ms) but still past the
  // margin (under 36 ms). The condition is judged when it starts; from its
  // trial's end PowerSGD is judged as any running codec and kept.
  // PowerSGD's own call (codec and link) costs 2-6 ms with the build and
  // the machine, so a first run without the extra measures it and the
  // extra makes up the rest.
  const int psgd = candidate("powersgd:4");
  const int calls = 36;
  const auto trainingCall = [](RankOneKey& k, int call) {  // 50 ms of compute, then the key's call
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return k.step(400 + call);
  };
  double extra = 0;
  {
    RankOneKey quiet(256, 10e6, 0.33, 14);
    for (int call = 1; call <= calls; ++call) trainingCall(quiet, call);
    const double own = quiet.state.choice.last.predicted[psgd];
    std::printf("  powersgd's own call %.3g ms\n", own * 1e3);
    CHECK_EQ(chosen(quiet.state), std::string("powersgd:4"));  // so `own` is its measured call
    CHECK(own > 0 && own < 20e-3);
    extra = std::max(0.0, (31.5e-3 - own) / 2);
  }
  RankOneKey key(256, 10e6, 0.33, 14);
  key.link.smallExtra = extra;
  int firstPowerSgd = -1, laterPowerSgd = 0;
  for (int call = 1; call <= calls; ++call) {
    const int ran = trainingCall(key, call);
    if (call == static_cast<int>(kAutoFirstDecision) + 1) {
      const AutoDecision& d = key.state.choice.last;
      std::printf("  first decision: none %.3g ms, bf16 %.3g, powersgd %.3g, step %.3g\n", d.predicted[0] * 1e3,
                  d.predicted[candidate("bf16")] * 1e3, d.predicted[psgd] * 1e3, d.period[0] * 1e3);
    }
    if (ran == psgd && firstPowerSgd < 0) firstPowerSgd = call;
    laterPowerSgd += ran == psgd && call > calls - 12;
  }
  const CompressState& state = key.state;
  const AutoDecision& d = state.choice.last;
  std::printf(
      "  small allreduces %.2f ms more: powersgd first ran at call %d, %d of the last 12 calls, none's step %.1f ms, "
      "bf16 %.3g ms: %s\n",
      extra * 1e3, firstPowerSgd, laterPowerSgd, d.period[0] * 1e3, d.predicted[candidate("bf16")] * 1e3,
      d.reason.c_str());
  CHECK_EQ(firstPowerSgd, static_cast<int>(kAutoFirstDecision) + 2);
  const double other = std::min(d.predicted[0], d.predicted[candidate("bf16")]);
  CHECK(d.predicted[psgd] > 0 && d.predicted[psgd] <= (1 - kAutoMargin) * other);  // it leads by the margin
  CHECK(other - d.predicted[psgd] < kAutoEarlyShare * d.period[0]);  // ... by less than the early start asks
  CHECK_EQ(laterPowerSgd, 12);
}

TEST(powersgd_whose_residual_is_noise_across_the_recent_gradient_is_kept) {
  // The rank-one gradient above (a new row factor every step) plus noise of
  // half its size in every value. PowerSGD sends the rank-one part whole
  // and as much of the noise as its other columns catch; its residual is
  // the rest of the noise, which error feedback sends within a few calls:
  // its norm is over a third of the recent gradient's, its part along that
  // gradient far under. Kept: the residual delays nothing the training was
  // heading for. (A guard that read the residual's norm would leave it out,
  // and the key would run top-k 10 % at twenty times PowerSGD's time per call.)
  const int64_t side = 512, a = side * side, bias = side, n = a + bias;
  const PowerSgdLayout layout{{a, side}, {bias, kPowerSgdDense}};
  const std::vector<float> v = values(12, side);
  OneRank me(4, 0.33);
  std::vector<double> recent(static_cast<size_t>(a));  // the matrix's recent gradient, all values, the guard's decay
  double normShare = 0;
  int ranPowerSgd = 0;
  const int calls = kAutoWindowCalls + 48;
  for (int s = 0; s < calls; ++s) {
    me.link.beta = s + 8 < kAutoWindowCalls ? 1.0 / 400e6 : 1.0 / 5e6;  // slow once the window is full
    std::vector<float> x = rankOneStep(300 + s, side, v, 0.5f);
    for (int64_t j = 0; j < a; ++j) recent[j] = (1.0 - 1.0 / kAutoWindowCalls) * recent[j] + x[j];
    const int ran = me.run(x.data(), n, layout);
    ranPowerSgd += ran == candidate("powersgd:4");
    if (ran == candidate("powersgd:4") && me.state.residual.size() == static_cast<size_t>(n)) {
      double ee = 0, ww = 0;
      for (int64_t j = 0; j < a; ++j) {
        ee += static_cast<double>(me.state.residual[j]) * me.state.residual[j];
        ww += recent[j] * recent[j];
      }
      normShare = std::sqrt(ee / ww);
    }
  }
  const AutoDecision& d = me.state.choice.last;
  const double along = d.residual[candidate("powersgd:4")];
  std::printf("  powersgd ran %d of %d calls; its residual's norm %.2f of the recent gradient's, along it %.2f: %s\n",
              ranPowerSgd, calls, normShare, along, d.reason.c_str());
  CHECK(normShare > 0.33);  // by norms it would be left out
  CHECK(along > 0 && along <= 0.33);
  CHECK_EQ(chosen(me.state), std::string("powersgd:4"));
  CHECK(ranPowerSgd >= 16);  // it ran to the end (after top-k 1 %'s trial, in some builds)
}

namespace {

// Two ranks as threads that meet in every collective: a call returns when
// both have arrived and the link's time (alpha + bus bytes x beta) has
// passed; sums come back as they went, gathered peer slots hold zero
// payloads, allreduceMax takes the elementwise maximum.
struct TwoRanks {
  double alpha = 50e-6, beta = 0;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<double> in, out;

  void meet(double* v, int64_t count, double busBytes) {
    {
      std::unique_lock<std::mutex> l(mu);
      const uint64_t gen = generation;
      if (v != nullptr) {
        if (in.empty()) in.assign(v, v + count);
        for (int64_t i = 0; i < count; ++i) in[i] = std::max(in[i], v[i]);
      }
      if (++arrived == 2) {
        arrived = 0;
        out.swap(in);
        in.clear();
        generation += 1;
        cv.notify_all();
      } else {
        cv.wait(l, [&] { return generation != gen; });
      }
      if (v != nullptr) std::copy(out.begin(), out.begin() + count, v);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(alpha + busBytes * beta));
  }
  CompressComms comms(int rank) {
    CompressComms c;
    c.rank = rank;
    c.size = 2;
    c.allreduce = [this](void*, int64_t count, DataType type, ReduceOp) {
      meet(nullptr, 0, static_cast<double>(count) * elementSize(type));
    };
    c.allgatherBytes = [this, rank](uint8_t* all, int64_t bytes) {
      std::memset(all + (1 - rank) * bytes, 0, static_cast<size_t>(bytes));
      meet(nullptr, 0, static_cast<double>(bytes));
    };
    c.allreduceMax = [this](double* v, int64_t count) { meet(v, count, 8.0 * count); };
    return c;
  }
};

// Each rank computes for an exponentially distributed time (mean `skew`)
// before each of `steps` calls, so on most calls one rank waits for the
// other; returns both ranks' states.
std::vector<CompressState> lateArrivals(TwoRanks& link, double skew, int steps, int64_t n, int codecCalls[2]) {
  std::vector<CompressState> states(2);
  std::vector<std::thread> ranks;
  AutoSelection sel[2] = {AutoSelection(0), AutoSelection(0)};
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::mt19937 rng(11 + r);
      std::exponential_distribution<double> compute(1 / skew);
      const CompressComms comms = link.comms(r);
      codecCalls[r] = 0;
      for (int step = 0; step < steps; ++step) {
        std::this_thread::sleep_for(std::chrono::duration<double>(compute(rng)));
        std::vector<float> x = values(400 + 2 * step + r, n);
        if (sel[r].run(x.data(), n, true, states[r], comms) != 0) ++codecCalls[r];
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  return states;
}

// Two ranks whose compute before each of `steps` calls differs at random by
// ~3 ms, on a link of `beta` seconds per bus byte: both states (the same
// choice and reason text on both is checked here) and rank 0's calls that
// ran a codec.
struct Settled {
  std::vector<CompressState> states;
  int codecCalls = 0;
};
Settled settle(double beta, int steps) {
  TwoRanks link;
  link.beta = beta;
  int codecCalls[2];
  Settled out{lateArrivals(link, 3e-3, steps, 65536, codecCalls), codecCalls[0]};
  const AutoChoice& c = out.states[0].choice;
  std::printf("  changes %llu, codec calls %d of %d, last: %s\n", static_cast<unsigned long long>(c.changes),
              out.codecCalls, steps, c.last.reason.c_str());
  return out;
}

}  // namespace

TEST(peers_that_arrive_late_do_not_make_a_fast_link_look_slow) {
  // The dense bytes cost ~0.1 ms; the ranks' compute differs by ~3 ms a
  // step. The waits are no candidate's doing: none, chosen alike on both
  // ranks, with at most two trials of a codec (on a busy machine a codec's
  // timing may mislead; a lost trial waits 64 calls, the next 128).
  const Settled r = settle(1.0 / 2e9, 150);
  CHECK_EQ(r.states[0].choice.last.reason, r.states[1].choice.last.reason);
  CHECK_EQ(chosen(r.states[0]), std::string("none"));
  CHECK(r.states[0].choice.changes <= 4);  // none -> codec -> none, twice
  CHECK(r.codecCalls <= 20);               // two trials of a few calls: under 15 %
}

TEST(peers_that_arrive_late_do_not_hide_a_slow_link) {
  // The dense bytes cost ~13 ms, top-k's ~1 % of that: a sparsifier, under
  // the same waits.
  const Settled r = settle(1.0 / 20e6, kAutoWindowCalls + 60);
  CHECK_EQ(r.states[0].choice.last.reason, r.states[1].choice.last.reason);
  CHECK(chosen(r.states[0]) != "none");
  CHECK(r.codecCalls >= 40);
}

TEST(a_link_that_speeds_up_is_noticed_and_none_sends_what_the_residual_held) {
  // Large enough that the codecs' cost and the dense bytes' dwarf sleep jitter on a busy machine.
  const int64_t n = 1 << 20;
  OneRank me(4, 0);
  me.link.beta = 1.0 / 50e6;
  std::vector<double> in(n, 0.0), out(n, 0.0);
  int step = 0;
  const auto call = [&] {
    std::vector<float> x = values(200 + step++, n);
    for (int64_t i = 0; i < n; ++i) in[i] += x[i];
    me.run(x.data(), n);
    for (int64_t i = 0; i < n; ++i) out[i] += x[i];
  };
  while (step < kAutoWindowCalls + 20) call();
  CHECK(chosen(me.state).rfind("topk", 0) == 0);
  me.link.beta = 1.0 / 50e9;  // 1000x faster: the sparsifier's own bytes show it
  me.link.alpha = 1e-6;
  while (step < 200 && chosen(me.state) != "none") call();
  CHECK_EQ(chosen(me.state), std::string("none"));
  call();  // none: x + residual sent exactly; the residual is empty
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(in[i] - out[i]));
    scale = std::max(scale, std::fabs(in[i]));
  }
  CHECK(worst <= 1e-4 * scale);      // nothing the codec held back was lost
  CHECK(me.state.residual.empty());  // empty: zero
}

TEST(a_codec_measured_on_another_link_is_judged_by_the_model_again) {
  // bf16 runs on a slow link, the link turns free (drift: none is chosen,
  // bf16's call measured there at its codec's cost), then slow again while
  // none runs. bf16's free-link time is not its time now: once none's time
  // has moved 2x, bf16 is predicted by the model again (its bytes on the
  // slow link, about half of none's call), and top-k 1 % is chosen over it.
  // Judged by its old time, bf16 would look free and be tried first.
  const int64_t n = 65536;
  OnSlowLink r;
  const int bf16 = candidate("bf16");
  int s = 0;
  const auto call = [&] {
    std::vector<float> x = values(500 + s++, n);
    return r.run(x.data(), n);
  };
  while (s < 30) call();
  CHECK_EQ(chosen(r.state), std::string("bf16"));
  const double bf16Slow = r.state.choice.last.predicted[bf16];
  r.link.beta = 0;  // free: no time at all
  while (s < kAutoWindowCalls + 8) call();
  CHECK_EQ(chosen(r.state), std::string("none"));
  CHECK(r.state.choice.candidates[bf16].total.low() > 0);  // its free-link time
  r.link.beta = 1.0 / 20e6;
  AutoDecision seen;  // the first decision that sees none's slow time
  while (s < kAutoWindowCalls + 60 && seen.predicted.empty()) {
    call();
    const AutoDecision& d = r.state.choice.last;
    if (d.step > static_cast<uint64_t>(kAutoWindowCalls + 8) && d.predicted[0] > 0.5 * bf16Slow) seen = d;
  }
  CHECK(!seen.predicted.empty());
  std::printf("  bf16 on the slow link %.3g ms; at call %llu: bf16 %.3g ms, none %.3g ms: %s\n", bf16Slow * 1e3,
              static_cast<unsigned long long>(seen.step), seen.predicted[bf16] * 1e3, seen.predicted[0] * 1e3,
              seen.reason.c_str());
  CHECK(seen.predicted[bf16] > 0.5 * bf16Slow);
  while (s < kAutoWindowCalls + 60) call();
  CHECK_EQ(chosen(r.state), std::string("topk:0.01"));
  CHECK(r.state.choice.candidates[bf16].losses == 0);  // never tried on the slow link's return
}

TEST(a_codec_whose_call_is_shorter_but_whose_step_is_longer_is_left) {
  // A slow link (none's dense bytes ~3 ms) where a codec's call is far
  // shorter, but after a codec ran the compute before the next call takes
  // 12 ms longer (the codec's CPU taken from a CPU-bound backward): the
  // step guard leaves the codecs, none ends chosen, and the reason says so.
  // Without the guard, top-k or bf16 would be chosen by its call time.
  const int64_t n = 16384;
  OnSlowLink r;
  int codecCalls = 0, lateCodecCalls = 0;
  const int steps = kAutoWindowCalls + 40;
  bool left = false;
  for (int s = 0, ran = 0; s < steps; ++s) {
    ran = trainingStep(r, n, 300 + s, ran != 0 ? 14 : 2);
    codecCalls += ran != 0;
    lateCodecCalls += ran != 0 && s >= steps - 20;
    left = left || r.state.choice.last.reason.find("left: the key's calls came every") != std::string::npos;
  }
  std::printf("  codec calls %d of %d, last: %s\n", codecCalls, steps, r.state.choice.last.reason.c_str());
  CHECK(chosen(r.state) == "none" || r.state.choice.onTrial);  // none, or a retry that began near the end
  CHECK(left);
  CHECK(lateCodecCalls <= 4);      // backed off: at most a retried trial near the end
  CHECK(codecCalls <= steps / 4);  // a few trials, each a handful of calls
  const std::vector<double>& period = r.state.choice.last.period;
  CHECK(period[0] > 0);
}

namespace {

// Top-k 1 %'s prediction at the key's 16th call (2^18 values on a link of
// 400 MB/s of bus bandwidth, no compute), where the compute before the
// next call takes `hiddenMs` longer after bf16 ran.
double topkPredictedAfterBf16Lengthened(int hiddenMs) {
  const int64_t n = 1 << 18;
  std::vector<std::vector<float>> steps;
  for (int s = 0; s < 4; ++s) steps.push_back(values(900 + s, n));
  OneRank me(4, 0);
  me.link.beta = 1.0 / 400e6;
  const int topk = candidate("topk:0.1");
  int ran = 0;
  for (int call = 1; call <= 16; ++call) {
    if (ran == candidate("bf16")) std::this_thread::sleep_for(std::chrono::milliseconds(hiddenMs));
    std::vector<float> x = steps[call % steps.size()];
    ran = me.run(x.data(), n);
  }
  const AutoDecision& d = me.state.choice.last;
  std::printf("  %d ms more after bf16: at call %llu topk:0.1 predicted %.3g ms: %s\n", hiddenMs,
              static_cast<unsigned long long>(d.step), d.predicted[topk] * 1e3, d.reason.c_str());
  return d.predicted[topk];
}

}  // namespace

TEST(a_step_charge_is_not_extrapolated_past_the_step_it_was_measured_to_add) {
  // bf16 (a cheap codec) is tried, and after each of its calls the step
  // takes 12 ms more: the step guard leaves it, and the group is charged
  // what it added beyond its call, per second of its codec time. Top-k's
  // codec (a selection and a sum of every rank's payload) costs several
  // times bf16's; one reading does not say its step would grow by as many
  // times more (where the added step is a fixed cost, as here, it would
  // not), so it is charged at most what bf16 was measured to add. Charged
  // by its codec time alone, its prediction would grow by several times
  // the 12 ms.
  const double quiet = topkPredictedAfterBf16Lengthened(0);
  const double lengthened = topkPredictedAfterBf16Lengthened(12);
  const double added = lengthened - quiet;
  std::printf("  topk:0.1's prediction %.3g ms more\n", added * 1e3);
  CHECK(added > 4e-3);   // charged
  CHECK(added < 20e-3);  // ... up to what bf16 added (about 13 ms: 12 and the call it saved)
}

TEST(after_the_link_drifts_none_s_step_is_measured_again_and_guards_the_choice) {
  // bf16 halves none's call (~10 ms) on a slow link and runs. Then the link
  // turns 2.5x slower (drift: none's call ~25 ms) and from then on the
  // compute after a codec's call takes 30 ms longer: every codec's call is
  // still shorter than none's, its step longer.
  // After the drift none's step must be measured again, so the step guard
  // leaves bf16. (Had none's step been forgotten and not measured, the
  // guard would have no reference and bf16 would run to the end.)
  const int64_t n = 16384;
  OneRank me(4, 0);
  me.link.beta = 1.0 / 10e6;
  const int before = 30, steps = before + 70;
  int codecBefore = 0, lateCodecCalls = 0, ran = 0;
  for (int s = 0; s < steps; ++s) {
    const bool slowStep = s >= before && ran != 0;  // the compute after a call that ran a codec
    if (s == before) me.link.beta = 2.5 / 10e6;
    ran = trainingStep(me, n, 700 + s, slowStep ? 32 : 2);
    codecBefore += ran != 0 && s < before;
    lateCodecCalls += ran != 0 && s >= steps - 20;
  }
  std::printf("  codec calls before the drift %d of %d, in the last 20 %d; last: %s\n", codecBefore, before,
              lateCodecCalls, me.state.choice.last.reason.c_str());
  CHECK(codecBefore >= before / 2);                              // bf16 ran on the first link
  CHECK(chosen(me.state) == "none" || me.state.choice.onTrial);  // none, or a retry that began near the end
  CHECK(lateCodecCalls <= 4);
  CHECK(me.state.choice.last.period[0] > 0);
}

TEST(a_codec_that_saves_less_than_two_percent_of_the_step_is_not_tried) {
  // none's call ~4 ms, bf16's about half: worth it where the call is the
  // step, not where 150 ms of compute come between the calls (2 ms of a
  // 154 ms step is within its noise).
  const int64_t n = 16384;
  for (const int computeMs : {0, 150}) {
    OneRank me(4, 0);
    me.link.beta = 3.95e-3 / (4.0 * n * 2 * 3 / 4);
    int codecCalls = 0;
    for (int s = 0; s < 10; ++s) codecCalls += trainingStep(me, n, 600 + s, computeMs) != 0;
    std::printf("  compute %d ms: %s\n", computeMs, me.state.choice.last.reason.c_str());
    if (computeMs == 0) {
      CHECK(codecCalls >= 4);
    } else {
      CHECK_EQ(codecCalls, 0);
      CHECK(me.state.choice.last.reason.find("% of the step") != std::string::npos);
    }
  }
}

TEST(a_small_key_s_step_noise_does_not_price_out_a_large_key_s_codec) {
  // A small key (bf16: tens of us of codec time) runs alone first; after
  // each call that ran its codec the step takes 20 ms longer (noise, or
  // another key's doing: so small a codec cannot cost 20 ms). Its bf16 is
  // left by the step guard. Then a large key starts, whose dense bytes
  // cost ~80 ms and bf16's half: its codec must still be chosen. (Charged
  // at the small key's ratio, hundreds of seconds of step per second of
  // codec time, every codec of the large key would be priced out.)
  SimulatedLink link;
  link.beta = 1.0 / 20e6;
  AutoSelection sel(0);
  CompressState small, large;
  const CompressComms comms = link.comms();
  const int64_t nSmall = 4096, nLarge = 262144;
  int ran = 0, largeCodecCalls = 0;
  for (int s = 0; s < 45; ++s) {
    ran = trainingStep(sel, small, comms, nSmall, 800 + s, ran != 0 ? 30 : 10);
    if (s >= 30) largeCodecCalls += trainingStep(sel, large, comms, nLarge, 900 + s, 0) != 0;
  }
  std::printf("  small key: %s\n  large key (%d codec calls of 15): %s\n", small.choice.last.reason.c_str(),
              largeCodecCalls, large.choice.last.reason.c_str());
  CHECK(small.choice.changes >= 1);  // its bf16 ran, and was left
  CHECK_EQ(chosen(large), std::string("bf16"));
  CHECK(largeCodecCalls >= 8);
}

TEST(a_peer_s_changing_lateness_is_not_taken_for_the_link_drifting) {
  // Two ranks on a slow link (none's dense bytes ~13 ms, bf16's half): rank 1
  // computes 20 ms before every call, rank 0 19 ms or 5 ms in turns of 16
  // calls, so rank 0's communication time (its wait for rank 1, then the
  // link's) moves ~3x between decisions while the link and the step do not.
  // Rank 1 never waits: its time is the link's. No drift probe (three calls
  // of none each); bf16 runs throughout.
  TwoRanks link;
  link.beta = 1.0 / 20e6;
  const int64_t n = 65536;
  // Before any sparsifier is replayed (the last kAutoDecideEvery calls before
  // the window fills) or tried: bf16 against none only.
  const int steps = kAutoWindowCalls - static_cast<int>(kAutoDecideEvery);
  int probes[2] = {0, 0}, codecCalls[2] = {0, 0};
  std::vector<CompressState> states(2);
  AutoSelection sel[2] = {AutoSelection(0), AutoSelection(0)};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const CompressComms comms = link.comms(r);
      for (int s = 0; s < steps; ++s) {
        const int computeMs = r == 1 ? 20 : ((s / 16) % 2 == 0 ? 19 : 5);
        codecCalls[r] += trainingStep(sel[r], states[r], comms, n, 1000 + 2 * s + r, computeMs) != 0;
        probes[r] += states[r].choice.probeNext;
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  std::printf("  drift probes %d, %d; codec calls %d of %d; last: %s\n", probes[0], probes[1], codecCalls[0], steps,
              states[0].choice.last.reason.c_str());
  CHECK_EQ(states[0].choice.last.reason, states[1].choice.last.reason);
  CHECK_EQ(probes[0] + probes[1], 0);
  CHECK_EQ(chosen(states[0]), std::string("bf16"));
  CHECK(codecCalls[0] >= steps - 8);
}

TEST(a_small_codec_s_communication_moving_2x_within_the_step_s_noise_is_no_drift) {
  // top-k 1 %'s call (~0.25 ms) beside 30 ms of compute: the link's latency
  // turns from 50 us to 0.6 ms for good, so its time moves ~3x, by less
  // than 2 % of the step (~35 ms): no drift probe (three calls of none,
  // ~5 ms each), since a move that small is within the step's noise.
  const int64_t n = 16384;
  OnSlowLink r;
  const int steps = kAutoWindowCalls + 48;
  int probes = 0, sparsified = 0;
  for (int s = 0; s < steps; ++s) {
    r.link.alpha = s >= kAutoWindowCalls + 16 ? 0.6e-3 : 50e-6;
    const int ran = trainingStep(r, n, 1200 + s, 30);
    sparsified += s >= kAutoWindowCalls && autoCandidates()[ran].rfind("topk", 0) == 0;
    probes += r.state.choice.probeNext;
  }
  std::printf("  drift probes %d; top-k calls %d of the last %d; last: %s\n", probes, sparsified,
              steps - kAutoWindowCalls, r.state.choice.last.reason.c_str());
  CHECK_EQ(probes, 0);
  CHECK(sparsified >= (steps - kAutoWindowCalls) / 2);
}

TEST(a_codec_s_first_call_after_a_switch_is_its_warm_up_not_its_step) {
  // bf16 halves none's call (~5 ms) on a slow link, and its steps are
  // shorter than none's, except the first two after it is switched to:
  // the first call's one-off costs (buffers, plans, first transfers) and
  // one more slow step (noise) make them 40 ms. The trial must judge bf16
  // by its steps after the warm-up: it is kept. (Judged on its first two
  // periods, it would be left and backed off for 64 calls.)
  const int64_t n = 16384;
  OnSlowLink r;
  const int steps = kAutoWindowCalls - 4;  // before the sparsifiers: bf16 against none
  int codecCalls = 0, streak = 0, ran = 0;
  for (int s = 0; s < steps; ++s) {
    const bool warming = streak == 1 || streak == 2;  // the steps after a codec's first two calls
    const int now = trainingStep(r, n, 1300 + s, warming ? 40 : 2);
    streak = now != 0 && now == ran ? streak + 1 : now != 0 ? 1 : 0;
    ran = now;
    codecCalls += now != 0;
  }
  std::printf("  codec calls %d of %d; last: %s\n", codecCalls, steps, r.state.choice.last.reason.c_str());
  CHECK_EQ(chosen(r.state), std::string("bf16"));
  CHECK(codecCalls >= steps - 8);
}

namespace {

// A key whose calls come at a pace set elsewhere (a CPU-bound backward that
// the call overlaps): each call starts `gapMs` after the previous one
// started, whatever the link (or later, if a sleep overran: no catching up,
// so an overrun lengthens one step and shortens none); returns the
// candidate the call ran.
struct Paced {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  int step(AutoSelection& sel, CompressState& state, const CompressComms& comms, int64_t n, int seed, double gapMs) {
    std::vector<float> x = values(seed, n);
    std::this_thread::sleep_until(last + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(gapMs * 1e-3)));
    last = std::chrono::steady_clock::now();
    return sel.run(x.data(), n, true, state, comms);
  }
};

// A key of 16384 values on a slow link (none's call about 6 ms, bf16's
// half), auto without the accuracy guard, its calls paced.
struct PacedOnSlowLink : OneRank {
  static constexpr int64_t n = 16384;
  Paced pace;
  PacedOnSlowLink() : OneRank(4, 0) { link.beta = 6e-3 / (4.0 * n * 2 * 3 / 4); }
  int step(int seed, double gapMs) { return pace.step(sel, state, comms, n, seed, gapMs); }
};

}  // namespace

TEST(a_time_window_s_quartile_of_its_last_samples) {
  TimeWindow w;
  for (double t : {5.0, 1.0, 9.0, 8.0, 7.0, 6.0}) w.add(t);
  CHECK_EQ(w.low(), 5.0);  // the 2nd smallest of 6
  CHECK_EQ(w.lowOfLast(2), 6.0);
  CHECK_EQ(w.lowOfLast(4), 6.0);
  CHECK_EQ(w.lowOfLast(5), 6.0);  // 1, 9, 8, 7, 6: the 2nd smallest
  CHECK_EQ(w.lowOfLast(99), w.low());
  for (double t : {4.0, 3.0, 2.0}) w.add(t);  // past kSize: the oldest (5) is gone
  CHECK_EQ(w.count, TimeWindow::kSize);
  CHECK_EQ(w.low(), 2.0);
  CHECK_EQ(w.lowOfLast(3), 2.0);
  CHECK_EQ(TimeWindow{}.lowOfLast(2), 0.0);
}

TEST(a_codec_s_step_within_the_step_s_noise_of_none_s_is_judged_by_its_call) {
  // The key's calls come every 60 ms whatever runs (a backward that the
  // call overlaps sets the pace), 0.3 ms later after a bf16 call: its step
  // is 0.5 % longer than none's, within the step's noise, while its call
  // (~3 ms) is half none's on a slow link. The call decides: bf16 runs.
  // (Judged strictly by the step, it would be left after every trial.)
  PacedOnSlowLink key;
  const int steps = 48;
  int codecCalls = 0, ran = 0;
  for (int s = 0; s < steps; ++s) {
    ran = key.step(1400 + s, ran != 0 ? 60.3 : 60.0);
    codecCalls += ran != 0;
  }
  std::printf("  codec calls %d of %d; last: %s\n", codecCalls, steps, key.state.choice.last.reason.c_str());
  CHECK_EQ(chosen(key.state), std::string("bf16"));
  CHECK(codecCalls >= steps - 8);
}

TEST(a_codec_on_trial_is_compared_with_as_many_of_none_s_steps) {
  // The key's calls come every 60 ms (the pace set elsewhere), on a link
  // that turns slow at call 12 (none's call 0.5 -> 6 ms; bf16's is half):
  // bf16 leads at the decision of call 31 and runs from call 36 on. Two of
  // none's steps in between came 20 % early (calls 29 and 30). bf16's
  // trial (2 steps) is compared with none's last 2: the same pace, so bf16
  // is kept. (Against the lower quartile of none's 8, one of the early
  // steps, it would be left.)
  const int64_t n = 16384;
  OneRank me(4, 0);
  Paced pace;
  bool tried = false, kept = false;
  for (int s = 0; s < 42; ++s) {
    me.link.beta = (s < 12 ? 0.5e-3 : 6e-3) / (4.0 * n * 2 * 3 / 4);
    const bool wasOnTrial = me.state.choice.onTrial;
    pace.step(me.sel, me.state, me.comms, n, 1500 + s, s == 30 || s == 31 ? 48.0 : 60.0);
    tried = tried || me.state.choice.onTrial;
    if (wasOnTrial && !me.state.choice.onTrial) kept = chosen(me.state) == "bf16";
  }
  std::printf("  tried %d, kept %d; last: %s\n", tried, kept, me.state.choice.last.reason.c_str());
  CHECK(tried);
  CHECK(kept);
}

TEST(a_codec_on_trial_whose_step_is_longer_than_the_codec_s_it_replaced_loses_its_trial) {
  // A slow link (none's call ~6 ms, bf16's half) where the key's calls come
  // every 30 ms with none, every 24 ms with bf16 and every 29 ms with a
  // sparsifier (its encode taken from the backward that the call overlaps):
  // bf16 runs until the window, then a top-k leads by its call time (tens of
  // microseconds). Its trial's step is within the step's noise of none's but
  // a fifth longer than bf16's, the codec it replaced: it loses the trial,
  // and so does each top-k after it (bf16's step stays their reference),
  // and bf16 runs again. (Judged by its call alone, or by none's step, the
  // first top-k would be kept to the end.)
  PacedOnSlowLink key;
  const int bf16 = candidate("bf16"), steps = kAutoWindowCalls + 32;
  int ran = 0, sparsifierCalls = 0;
  bool left = false;
  for (int s = 0; s < steps; ++s) {
    ran = key.step(1600 + s, ran == 0 ? 30.0 : ran == bf16 ? 24.0 : 29.0);
    sparsifierCalls += ran != 0 && ran != bf16;
    left = left || key.state.choice.last.reason.find("with bf16") != std::string::npos;
  }
  std::printf("  sparsifier calls %d of %d; last: %s\n", sparsifierCalls, steps, key.state.choice.last.reason.c_str());
  CHECK(left);
  CHECK(chosen(key.state) == "bf16" || key.state.choice.onTrial);  // bf16, or a retry that began near the end
  CHECK(sparsifierCalls <= 16);                                    // three trials of a few calls each
}

TEST(the_first_decision_comes_after_two_steps_of_none) {
  OnSlowLink r;
  for (uint64_t s = 0; s <= kAutoFirstDecision; ++s) {
    CHECK(!r.state.choice.decided);
    std::vector<float> x = values(500 + static_cast<int>(s), 16384);
    CHECK_EQ(r.run(x.data(), 16384), 0);
  }
  CHECK(r.state.choice.decided);
  CHECK(r.state.choice.last.period[0] > 0);  // none's step, from calls 1 and 2
}

TEST(a_key_s_decisions_count_its_calls_since_its_tensor_came) {
  // DDP's first iteration sends its buckets before it rebuilds them: a
  // key's first tensor may have another size than every later one. The
  // choice starts afresh on the new size, and its decisions come at the
  // same calls of it (the first after two steps of none, then every
  // kAutoDecideEvery) as on a key that never held another tensor.
  const int64_t n = 16384;
  const int calls = 3 * static_cast<int>(kAutoDecideEvery) + 2;
  std::vector<std::vector<uint64_t>> decidedAt;
  for (const int64_t before : {int64_t{0}, n / 2}) {
    OneRank me(4, 0);  // free: none throughout, no trials
    if (before > 0) {
      std::vector<float> x = values(600, before);
      me.run(x.data(), before);
    }
    std::vector<uint64_t>& at = decidedAt.emplace_back();
    for (int c = 1; c <= calls; ++c) {
      const uint64_t last = me.state.choice.last.step;
      std::vector<float> x = values(600 + c, n);
      CHECK_EQ(me.run(x.data(), n), 0);
      if (me.state.choice.last.step == last) continue;
      at.push_back(static_cast<uint64_t>(c));
      CHECK_EQ(me.state.choice.last.step, static_cast<uint64_t>(c));  // a decision names the key's call
    }
    std::printf("  %lld values before: decisions at calls", static_cast<long long>(before));
    for (const uint64_t c : at) std::printf(" %llu", static_cast<unsigned long long>(c));
    std::printf("\n");
    CHECK(!at.empty() && at.front() == kAutoFirstDecision + 1);  // the call numbered kAutoFirstDecision from 0
    for (uint64_t c = kAutoDecideEvery; c <= static_cast<uint64_t>(calls); c += kAutoDecideEvery)
      CHECK(std::find(at.begin(), at.end(), c) != at.end());
  }
  CHECK(decidedAt[0] == decidedAt[1]);
}

namespace {

// A codec's encode and decode of all n values, timed once (the first call's
// estimate is of these passes). `warm`: PowerSGD's factors warm, as in a
// training call (the key's first call also draws and orthonormalizes them):
// one untimed call first.
double fullCodecSeconds(const std::string& spec, const std::vector<float>& x, const PowerSgdLayout& layout,
                        bool warm = false) {
  const int64_t n = static_cast<int64_t>(x.size());
  const CodecSpec parsed = CodecSpec::parse(spec);
  std::vector<float> out(x);
  auto t0 = std::chrono::steady_clock::now();
  if (parsed.entry->make == nullptr) {
    std::vector<float> residual(x.size());
    PowerSgdWarmStart factors;
    if (warm) {
      powerSgd(out.data(), n, parsed.rank, layout, factors, [](float*, int64_t) {}, residual.data());
      out = x;
      t0 = std::chrono::steady_clock::now();
    }
    powerSgd(out.data(), n, parsed.rank, layout, factors, [](float*, int64_t) {}, residual.data());
  } else {
    const auto codec = parsed.entry->make(parsed);
    std::vector<uint8_t> payload(static_cast<size_t>(codec->payloadBytes(n)));
    codec->encode(x.data(), nullptr, n, payload.data(), 0, 0);
    codec->decode(out.data(), n, payload.data(), 0, 4);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(a_large_key_s_first_call_times_its_codecs_on_a_sample) {
  // 16 x kAutoCodecSample values (a 1024 x 4096 weight and its bias): the
  // first call times every codec on its leading values (PowerSGD on the
  // weight's first rows; each the least of a few timings) and scales;
  // timing them on all values, as the
  // call once did, takes many times longer than the whole call now.
  const int64_t rows = 1024, cols = 16 * kAutoCodecSample / rows, bias = rows, n = rows * cols + bias;
  const PowerSgdLayout layout{{rows * cols, rows}, {bias, kPowerSgdDense}};
  const std::vector<float> x = values(600, n);
  double full = 0;
  std::vector<double> each(autoCandidates().size(), 0.0);
  for (size_t i = 1; i < each.size(); ++i) {
    each[i] = fullCodecSeconds(autoCandidates()[i], x, layout);
    for (int again = 0; again < 2; ++again)
      each[i] = std::min(each[i], fullCodecSeconds(autoCandidates()[i], x, layout));
    full += each[i];
  }
  SimulatedLink link;  // no sleep: the call is the codecs' timing and none's sum
  const CompressComms comms = link.comms();
  double first = 1e9;
  std::vector<std::vector<double>> estimates(each.size());
  for (int again = 0; again < 3; ++again) {
    AutoSelection sel(0.33);
    CompressState state;
    std::vector<float> y(x);
    const auto t0 = std::chrono::steady_clock::now();
    sel.run(y.data(), n, true, state, comms, layout);
    first = std::min(first, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (size_t i = 1; i < each.size(); ++i) estimates[i].push_back(state.choice.candidates[i].codecSeconds);
  }
  for (size_t i = 1; i < each.size(); ++i) {  // the median of three: one timing may meet the machine's noise
    std::sort(estimates[i].begin(), estimates[i].end());
    const double estimate = estimates[i][1];
    std::printf("  %-10s estimate %.2f ms, all values %.2f ms\n", autoCandidates()[i].c_str(), estimate * 1e3,
                each[i] * 1e3);
    CHECK(estimate > each[i] / 4 && estimate < each[i] * 4);
  }
  std::printf("  first call %.2f ms, the codecs on all values %.2f ms\n", first * 1e3, full * 1e3);
  CHECK(first < full / 2);
  // PowerSGD's estimate is its cost in training, with warm factors (timed
  // once, on cold ones, it read 1.4-1.5x that in a release build, and a
  // preemption in that one timing, scaled 16x, could keep PowerSGD out).
  // The least of three against the least of three: a cold-factor bias is
  // in every estimate, while a preemption in one of them is noise.
  double steady = 1e9;  // PowerSGD's warm cost on all values
  for (int t = 0; t < 3; ++t) steady = std::min(steady, fullCodecSeconds("powersgd:4", x, layout, /*warm=*/true));
  const double psgd = estimates[candidate("powersgd:4")][0];
  std::printf("  powersgd:4 estimate %.2f ms, with warm factors on all values %.2f ms\n", psgd * 1e3, steady * 1e3);
  CHECK(psgd < 1.3 * steady);
}

namespace {

// One weight of 4096 x 64 whose gradient is a steady rank-one direction
// under noise, and a bias of 512 values whose gradient is steady and a
// hundred times smaller from the window's end on (rankOneWithBias).
struct WeightAndLateBias {
  static constexpr int64_t rows = 4096, cols = 64, bias = 512, n = rows * cols + bias;
  const PowerSgdLayout layout{{rows * cols, cols}, {bias, kPowerSgdDense}};
  const std::vector<float> u = values(21, rows), v = values(22, cols), b = values(23, bias);
  std::vector<float> step(int s, float noise) const {
    return rankOneWithBias(u, v, b, noise, s + 1, kAutoWindowCalls + 1, 500 + s);
  }
};

}  // namespace

TEST(a_codec_that_takes_over_from_another_is_judged_on_its_own_residual) {
  // One weight of 4096 x 64 whose gradient is a steady rank-one direction
  // under noise 2-3x its size, and a bias of 512 values whose gradient is
  // steady and a hundred times smaller from the window's end on, on a link
  // that costs nothing until the sparsifiers' warm-up and then turns slow
  // (2.5 MB/s of bus bandwidth): no top-k is replayed (none could pay as the
  // replay began), so top-k 1 % is tried unread. Top-k 1 % (the
  // fewest bytes) never reaches the bias's values: it runs until its
  // residual there passes the bound of a third; then PowerSGD, which sends
  // the bias whole and whose own residual on the weight is the noise across
  // its direction. Between two codecs one call runs none and sends what the
  // first held back, so PowerSGD's trial judges its own residual: it ends
  // chosen. (Carried over, top-k's residual, all of the bias's recent
  // gradient, made PowerSGD's read over the bound at its trial's end, and it
  // was left out.) Three noise levels: the residual's last digits differ
  // between builds (a sanitizer's code sums in another order).
  const WeightAndLateBias key;
  for (const float noise : {2.0f, 2.5f, 3.0f}) {
    OneRank me(4, 0.33);
    int powerSgdCalls = 0, unflushed = 0, previous = 0;
    for (int s = 0; s < kAutoWindowCalls + 80; ++s) {
      me.link.beta = s + 8 < kAutoWindowCalls ? 0.0 : 1.0 / 2.5e6;
      std::vector<float> x = key.step(s, noise);
      const int ran = me.run(x.data(), key.n, key.layout);
      CHECK(runningCodecWithinBound(me.state));
      powerSgdCalls += ran == candidate("powersgd:4");
      // One codec straight after another, where the first's residual was
      // not carried (under kAutoCarryShare of the recent gradient: bf16's
      // rounding, which a sanitizer's slower codecs sometimes run).
      const double held = previous != 0 ? me.state.choice.last.residual[previous] : -1;
      const bool carried = held >= 0 && held < kAutoCarryShare;
      unflushed += ran != 0 && previous != 0 && ran != previous && !carried;
      previous = ran;
    }
    const AutoDecision& d = me.state.choice.last;
    std::printf("  noise %.1f: powersgd ran %d calls, residual %.2f; last: %s\n", noise, powerSgdCalls,
                d.residual[candidate("powersgd:4")], d.reason.c_str());
    CHECK_EQ(unflushed, 0);
    CHECK(d.residual[candidate("topk:0.01")] > 0.33);  // top-k 1 % ran and was left out
    CHECK_EQ(chosen(me.state), std::string("powersgd:4"));
    const double r = d.residual[candidate("powersgd:4")];
    CHECK(r >= 0 && r <= 0.33);  // measured, within the bound
  }
}

TEST(a_sparsifier_whose_replay_reads_over_half_the_bound_is_left_out_before_it_runs) {
  // The weight and late bias above (noise 2) on a slow link (2.5 MB/s of
  // bus bandwidth) from the first call, where top-k is predicted faster
  // than none as the replay begins (also with a sanitizer's slower
  // encodes), so it is replayed: top-k 1 %'s replay reads about a fifth of
  // the weight's recent gradient, within the bound of a third but over its
  // share for a replay (a replay's reading counts kAutoReplayFeedback
  // times). Top-k 1 % is left out without a call. (Counted once, top-k 1 %
  // was tried at the window's end.)
  const WeightAndLateBias key;
  OneRank me(4, 0.33);
  me.link.beta = 1.0 / 2.5e6;
  int topkCalls = 0;
  for (int s = 0; s < kAutoWindowCalls + 24; ++s) {
    std::vector<float> x = key.step(s, 2.0f);
    topkCalls += me.run(x.data(), key.n, key.layout) == candidate("topk:0.01");
  }
  const AutoDecision& d = me.state.choice.last;
  const double replayed = d.residual[candidate("topk:0.01")];
  std::printf("  top-k 1 %%'s replay read %.2f; it ran %d calls: %s\n", replayed, topkCalls, d.reason.c_str());
  CHECK(replayed > 0.33 / kAutoReplayFeedback && replayed <= 0.33);  // within the bound, over a replay's share
  CHECK_EQ(topkCalls, 0);
  CHECK(d.reason.find("topk:0.01 left out before it ran") != std::string::npos);
}

TEST(a_sparsifier_that_saves_less_than_an_eighth_of_the_step_does_not_take_over_from_a_codec_that_holds_back_less) {
  // The steady gradients above (the replay reads within the bound: top-k
  // runs on a link where the call is the step) on two ranks at 15 MB/s of
  // bus bandwidth: none's call about 17 ms, bf16's half, top-k 10 %'s
  // about 5 ms with its encode (more under a sanitizer). Behind 60 ms of
  // compute top-k 10 % saves more than the margin and 2 % of the step
  // against bf16, but less than an eighth of it, and bf16 holds back less
  // of the recent gradient: no sparsifier runs. (At 50 MB/s a sanitizer's
  // encode made top-k slower than bf16: no test of the eighth.) The same
  // where the link is free until the replay is over (then no sparsifier is
  // replayed, and unread it may hold back any share). Behind 2 ms of compute on a 10 MB/s link (the savings well
  // past a sanitizer's slower encodes) they save more than the eighth, and
  // one runs. (Without the eighth, top-k ran behind 60 ms too.)
  const int64_t n = 65536;
  const std::vector<float> direction = values(7, n);
  struct Case {
    int computeMs, slowFrom;  // the link is free before call slowFrom
    double busBytesPerSecond;
  };
  for (const Case c : {Case{2, 0, 10e6}, Case{60, 0, 15e6}, Case{60, kAutoWindowCalls - 8, 15e6}}) {
    OneRank me(2, 0.33);
    int sparsified = 0;
    for (int s = 0; s < kAutoWindowCalls + 40; ++s) {
      me.link.beta = s < c.slowFrom ? 0.0 : 1.0 / c.busBytesPerSecond;
      std::this_thread::sleep_for(std::chrono::milliseconds(c.computeMs));
      std::vector<float> x = values(200 + s, n);
      for (int64_t j = 0; j < n; ++j) x[j] = direction[j] + 0.3f * x[j];
      sparsified += autoCandidates()[me.run(x.data(), n)].rfind("topk", 0) == 0;
      CHECK(runningCodecWithinBound(me.state));
    }
    const AutoDecision& d = me.state.choice.last;
    std::printf("  compute %d ms, slow from call %d: sparsified %d calls; top-k 1 %%'s reading %.3f; %s\n", c.computeMs,
                c.slowFrom, sparsified, d.residual[candidate("topk:0.01")], d.reason.c_str());
    if (c.computeMs == 2) {
      CHECK(sparsified > 0);
    } else {
      CHECK_EQ(sparsified, 0);
      CHECK(d.reason.find(c.slowFrom > 0 ? "unread) may hold back more of the recent gradient than"
                                         : "may hold back more of the recent gradient than") != std::string::npos);
    }
  }
}

namespace {

// One 512 x 512 weight whose gradient is a steady rank-one direction under
// `noise`, and a bias of 512 values a hundred times smaller, steady from
// call `biasFrom` on, which top-k 1 % never reaches (its residual there
// passes the accuracy guard's bound after it runs: the bias starts after
// the sparsifiers' replays), 8 ranks, on a link that turns slow as the sparsifiers' warm-up
// ends: slow enough that PowerSGD (the fewest bytes) is predicted 5 ms
// faster than top-k 1 % with this build's codec times, and where an
// allreduce of under 64 KiB takes a quarter of none's call more than the
// link's fit of the other sizes predicts (a contended host's small rounds),
// an allgather `gatherExtra` more. PowerSGD is tried first; its two small
// allreduces make it lose its trial to top-k 1 %'s prediction, by more
// than an eighth of none's step (unread, top-k 1 % must save that much
// against PowerSGD; a fixed 30 ms did not under a sanitizer, whose slower
// codecs slow the test's link), and PowerSGD stays faster than none.
// Runs until PowerSGD runs again after that, or 90 calls after the warm-up.
struct LostToAnother {
  uint64_t lostAt = 0, retryAt = 0;  // PowerSGD's lost trial and its back-off
  int winner = -1;                   // the candidate it lost to
  uint64_t leftOutAt = 0;            // the winner's residual read over the bound
  uint64_t againAt = 0;              // PowerSGD ran again
};

// The weight and bias above on a link where PowerSGD is predicted 5 ms
// faster than top-k 1 % (beta: seconds per bus byte), 8 ranks.
struct PowerSgdFirst {
  static constexpr int64_t side = 512, bias = 512, n = side * side + bias;
  static constexpr int ranks = 8;
  const PowerSgdLayout layout{{side * side, side}, {bias, kPowerSgdDense}};
  const std::vector<float> u = values(31, side), v = values(32, side), b = values(33, bias);
  double codecGap = 1e9;  // PowerSGD's codec time less top-k 1 %'s, on this build
  double beta = 0;
  double noneSeconds = 0;  // none's call on the slow link, as the link's fit predicts it
  PowerSgdFirst() {
    const std::vector<float> sample = values(30, n);
    for (int again = 0; again < 3; ++again) {
      const double gap = fullCodecSeconds("powersgd:4", sample, layout) - fullCodecSeconds("topk:0.01", sample, layout);
      codecGap = std::min(codecGap, gap);
    }
    const CodecSpec topk = CodecSpec::parse("topk:0.01");
    const double topkBus = static_cast<double>(topk.entry->make(topk)->payloadBytes(n)) * (ranks - 1);
    const PowerSgdPlan plan = powerSgdPlan(n, 4, layout);
    const double psgdBus = 4.0 * static_cast<double>(plan.firstCount + plan.secondCount) * 2 * (ranks - 1) / ranks;
    beta = (std::max(codecGap, 0.0) + 5e-3) / (topkBus - psgdBus);
    noneSeconds = 4.0 * static_cast<double>(n) * 2 * (ranks - 1) / ranks * beta;
  }
  // The key's call `call` (from 1) on `link`, which turns slow (beta,
  // small allreduces `smallExtra` more, allgathers `gatherExtra` more)
  // 8 calls before the sparsifiers' warm-up ends.
  int step(OneRank& me, int call, float noise, int biasFrom, double smallExtra, double gatherExtra) const {
    const bool slow = call + 7 >= kAutoWindowCalls;
    me.link.beta = slow ? beta : 0;
    me.link.smallExtra = slow ? smallExtra : 0;
    me.link.gatherExtra = slow ? gatherExtra : 0;
    std::vector<float> x = rankOneWithBias(u, v, b, noise, call, biasFrom, 699 + call);
    return me.run(x.data(), n, layout);
  }
};

LostToAnother powerSgdLosesAndRunsAgain(float noise, double gatherExtra, int biasFrom) {
  const PowerSgdFirst f;
  const int psgd = candidate("powersgd:4");
  OneRank me(PowerSgdFirst::ranks, 0.33);
  LostToAnother r;
  for (int s = 0; s < kAutoWindowCalls + 90 && r.againAt == 0; ++s) {
    const int ran = f.step(me, s + 1, noise, biasFrom, 0.25 * f.noneSeconds, gatherExtra);
    const AutoChoice& c = me.state.choice;
    if (r.lostAt == 0 && c.candidates[psgd].retryAt != 0 && c.current != psgd && c.current != 0) {
      r.lostAt = me.state.steps;
      r.retryAt = c.candidates[psgd].retryAt;
      r.winner = c.current;
    } else if (r.lostAt != 0 && r.leftOutAt == 0 && c.decided && c.last.residual[r.winner] > 0.33) {
      r.leftOutAt = me.state.steps;
    } else if (r.lostAt != 0 && ran == psgd) {
      r.againAt = me.state.steps;
    }
  }
  std::printf(
      "  noise %.1f: powersgd lost to %s at step %llu (back-off to step %llu), the winner left out at step "
      "%llu, powersgd ran again at step %llu (link %.3g MB/s of bus bandwidth; PowerSGD's codec %.3g ms "
      "slower than top-k 1 %%'s); last: %s\n",
      noise, r.winner < 0 ? "-" : autoCandidates()[r.winner].c_str(), static_cast<unsigned long long>(r.lostAt),
      static_cast<unsigned long long>(r.retryAt), static_cast<unsigned long long>(r.leftOutAt),
      static_cast<unsigned long long>(r.againAt), 1e-6 / f.beta, f.codecGap * 1e3, me.state.choice.last.reason.c_str());
  return r;
}

}  // namespace

TEST(a_codec_that_lost_its_trial_to_another_is_tried_again_once_that_one_is_left_out) {
  // Top-k 1 %, which PowerSGD lost to, runs until its residual passes the
  // bound (the bias it starves); then PowerSGD, still faster than the
  // rest, runs again at once, not after its back-off of kAutoBackoff calls.
  // Three noise levels: the residual's last digits differ between builds.
  int scenarios = 0;
  for (const float noise : {2.0f, 2.5f, 3.0f}) {
    const LostToAnother r = powerSgdLosesAndRunsAgain(noise, 0, kAutoWindowCalls + 1);
    if (r.winner != candidate("topk:0.01") || r.leftOutAt == 0) continue;  // this noise did not make the scenario
    scenarios += 1;
    CHECK(r.againAt != 0 && r.againAt < r.retryAt);
    CHECK(r.againAt <= r.leftOutAt + 2);  // the flush call between two codecs, then PowerSGD
  }
  CHECK(scenarios >= 2);
}

TEST(a_codec_that_lost_its_trial_to_a_prediction_that_proved_wrong_is_tried_again) {
  // Top-k 1 %'s allgathers take 120 ms more than predicted: its trial
  // measures it slower than PowerSGD by more than the margin, and PowerSGD
  // runs again after that trial, not after its back-off.
  const LostToAnother r = powerSgdLosesAndRunsAgain(2.0f, 120e-3, std::numeric_limits<int>::max());
  CHECK_EQ(r.winner, candidate("topk:0.01"));
  CHECK(r.againAt != 0 && r.againAt < r.retryAt);
  CHECK(r.againAt <= r.lostAt + kAutoTrialCalls + 3);  // a flush call, the winner's trial, a flush call
}

TEST(a_codec_on_trial_is_kept_unless_another_is_faster_by_the_margin) {
  // PowerSGD runs a trial first (predicted fastest); its small allreduces
  // take `smallExtra` more than the link's fit predicts, swept until it
  // measures slower than top-k 1 %'s prediction by far. At its trial's
  // end PowerSGD, measured, may give way to top-k 1 %, predicted, only
  // where the prediction is faster by the margin: a near tie between a
  // measurement and a prediction is the model's noise, not worth a flush
  // and a trial. The sweep must meet at least one near tie (where the old
  // rule, the fastest taken, switched); it starts with no extra, so the
  // ratio crosses the tie's band inside it wherever this machine's codec
  // times put it (from 4 ms, one CI machine was already past it). Top-k
  // 1 %, unread, must also save an eighth of none's step against PowerSGD,
  // read by its trial: the sweep goes on in coarser steps until it does
  // (under a sanitizer from about 30 ms more).
  const PowerSgdFirst f;
  const int psgd = candidate("powersgd:4");
  int nearTies = 0, yielded = 0;
  for (int extraMs = 0; extraMs <= 80 && yielded < 3; extraMs += extraMs < 20 ? 1 : 4) {
    OneRank me(PowerSgdFirst::ranks, 0.33);
    for (int call = 1; call <= kAutoWindowCalls + 16; ++call) {
      const AutoChoice& c = me.state.choice;
      const bool trialEnds = c.onTrial && c.current == psgd && static_cast<uint64_t>(call) == c.checkAt;
      f.step(me, call, 2.0f, std::numeric_limits<int>::max(), extraMs * 1e-3, 0);
      if (!trialEnds) continue;
      const AutoDecision& d = c.last;
      int rival = -1;  // the fastest other codec, predicted
      for (int i = 1; i < static_cast<int>(d.predicted.size()); ++i)
        if (i != psgd && (rival < 0 || d.predicted[i] < d.predicted[rival])) rival = i;
      const double ratio = d.predicted[rival] / d.predicted[psgd];
      const bool beatsNone = d.predicted[psgd] <= (1 - kAutoMargin) * d.predicted[0];
      std::printf(
          "  small allreduces %d ms more: at call %d powersgd:4 %.1f ms, %s %.1f ms (%.2fx), none %.1f ms: %s\n",
          extraMs, call, d.predicted[psgd] * 1e3, autoCandidates()[rival].c_str(), d.predicted[rival] * 1e3, ratio,
          d.predicted[0] * 1e3, autoCandidates()[d.choice].c_str());
      if (!beatsNone || d.reason.find("powersgd:4 left") != std::string::npos) break;
      const bool nearTie = ratio < 1 && ratio > 1 - kAutoMargin;
      nearTies += nearTie;
      if (d.choice != psgd) {
        yielded += 1;
        CHECK(d.predicted[d.choice] <= (1 - kAutoMargin) * d.predicted[psgd]);  // faster by the margin
      }
      if (nearTie) CHECK_EQ(d.choice, psgd);
      break;
    }
  }
  std::printf("  near ties %d, PowerSGD gave way %d times\n", nearTies, yielded);
  CHECK(nearTies >= 1);
  CHECK(yielded >= 1);  // the sweep reaches a prediction faster by the margin: the rule is not "never switch"
}

TEST_MAIN()
