#include "compress/auto_select.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "comm/reducer.h"
#include "core/deadline.h"

namespace scalecomm {

const std::vector<std::string>& autoCandidates() {
  static const std::vector<std::string> table = {"none", "bf16", "topk:0.1", "topk:0.03", "topk:0.01", "powersgd:4"};
  return table;
}

bool compressionTakesShapes(const std::string& spec) {
  if (spec != "auto") return CodecSpec::parse(spec).entry->shaped;
  return std::any_of(autoCandidates().begin() + 1, autoCandidates().end(),
                     [](const std::string& c) { return CodecSpec::parse(c).entry->shaped; });
}

namespace {

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", seconds * 1e3);
  return buf;
}

// The leading part of a PowerSGD layout of n values that holds at most
// `budget` of them, a matrix cut after a whole row (a matrix's rows are its
// leading values); `count` receives its values. The whole layout where
// no matrix of the part would gain from factors (its time would be a
// dense block's, not PowerSGD's).
PowerSgdLayout leadingRows(int64_t n, int rank, const PowerSgdLayout& layout, int64_t budget, int64_t& count) {
  const PowerSgdPlan plan = powerSgdPlan(n, rank, layout);
  PowerSgdLayout part;
  bool gains = false;
  count = 0;
  for (size_t b = 0; b < plan.blocks.size() && count < budget; ++b) {
    const PowerSgdPlan::Block& block = plan.blocks[b];
    const int64_t left = budget - count;
    if (block.count <= left) {
      part.push_back(layout.empty() ? PowerSgdBlock{n, 0} : layout[b]);
      gains |= block.shape.gains;
      count += block.count;
      continue;
    }
    const int64_t rows = block.shape.gains ? left / block.shape.cols : 0;
    if (rows > 0 && powerSgdShape(rows * block.shape.cols, rank, rows).gains) {
      part.push_back({rows * block.shape.cols, rows});
      gains = true;
      count += rows * block.shape.cols;
    }
    break;
  }
  if (gains) return part;
  count = n;
  return layout;
}

}  // namespace

AutoSelection::AutoSelection(double residualBound) : bound_(residualBound) {
  for (const std::string& spec : autoCandidates())
    sites_.push_back(spec == "none" ? nullptr : std::make_unique<CompressedSite>(CodecSpec::parse(spec)));
}

Label AutoSelection::title(AlgorithmRef algorithm, int candidate) const {
  std::lock_guard<std::mutex> g(titlesMu_);
  for (const auto& [key, i, label] : titles_)
    if (key == algorithm.key() && i == candidate) return label;
  const std::string tail = candidate < 0 ? "auto" : "auto:" + autoCandidates()[candidate];
  titles_.emplace_back(algorithm.key(), candidate, Label("allreduce:" + algorithm + ":" + tail));
  return std::get<2>(titles_.back());
}

double AutoSelection::stepCharge() const {
  std::lock_guard<std::mutex> g(chargeMu_);
  const uint64_t keys = keys_.load(std::memory_order_relaxed), calls = calls_.load(std::memory_order_relaxed);
  const double halfLife = static_cast<double>(kAutoBackoff) * static_cast<double>(std::max<uint64_t>(keys, 1));
  return charge_ * std::exp2(-static_cast<double>(calls - std::min(chargeAt_, calls)) / halfLife);
}

void AutoSelection::setStepCharge(double charge) {
  std::lock_guard<std::mutex> g(chargeMu_);
  charge_ = charge;
  chargeAt_ = calls_.load(std::memory_order_relaxed);
}

bool AutoSelection::factors(int i) const { return sites_[i] != nullptr && sites_[i]->codec() == nullptr; }

bool AutoSelection::waitsForWindow(int i) const {
  return sites_[i] != nullptr && (factors(i) || sites_[i]->spec().entry->arg == CodecArg::Ratio);
}

double AutoSelection::busBytes(int i, const AutoChoice& choice, int size) const {
  const double p = size;
  const int64_t n = choice.elements;
  const Codec* codec = sites_[i] ? sites_[i]->codec() : nullptr;
  const double payload = codec        ? static_cast<double>(codec->payloadBytes(n))
                         : factors(i) ? 4.0 * static_cast<double>(choice.factorValues)
                                      : 4.0 * static_cast<double>(n);
  return (codec == nullptr || codec->summable()) ? payload * 2 * (p - 1) / p : payload * (p - 1);
}

void AutoSelection::measureCodecs(const float* x, int64_t n, AutoChoice& choice, const CompressComms& comms,
                                  const PowerSgdLayout& layout) const {
  // Timed on the key's leading values and scaled to n (a codec's passes are
  // linear in the values; the codec's own calls update the estimate), the
  // least of kAutoCodecTimings timings: the first holds one-off costs
  // (buffers, first touches, PowerSGD's first factors), and a preemption
  // only ever adds, which the scaling would multiply.
  const int64_t m = std::min(n, kAutoCodecSample);
  const double scale = m > 0 ? static_cast<double>(n) / static_cast<double>(m) : 1.0;
  std::vector<float> out(static_cast<size_t>(m));
  std::vector<uint8_t> payload;
  const auto least = [](auto&& timed) {
    double best = std::numeric_limits<double>::infinity();
    for (int t = 0; t < kAutoCodecTimings; ++t) best = std::min(best, timed());
    return best;
  };
  for (size_t i = 1; i < sites_.size(); ++i) {
    if (factors(static_cast<int>(i))) {  // both products and the residual, on a copy, with no one to sum with
      if (choice.factorValues == 0) continue;
      const int rank = sites_[i]->spec().rank;
      int64_t count = 0;
      PowerSgdLayout part = leadingRows(n, rank, layout, kAutoCodecSample, count);
      std::vector<float> values(static_cast<size_t>(count)), residual(static_cast<size_t>(count));
      PowerSgdWarmStart warm;
      const double seconds = least([&] {
        std::copy(x, x + count, values.begin());
        const Clock::time_point t0 = Clock::now();
        powerSgd(values.data(), count, rank, part, warm, [](float*, int64_t) {}, residual.data());
        return secondsSince(t0);
      });
      choice.candidates[i].codecSeconds = seconds * static_cast<double>(n) / static_cast<double>(count);
      continue;
    }
    const Codec& codec = *sites_[i]->codec();
    payload.resize(static_cast<size_t>(codec.payloadBytes(m)));
    const double seconds = least([&] {
      const Clock::time_point t0 = Clock::now();
      codec.encode(x, nullptr, m, payload.data(), 0, comms.rank);
      const double encode = secondsSince(t0);
      if (codec.summable()) {  // the call decodes the summed payload once, averaging in the pass
        const Clock::time_point t1 = Clock::now();
        codec.decode(out.data(), m, payload.data(), 0, comms.size);
        return encode + secondsSince(t1);
      }
      // The call clears its output and adds every rank's payload into it.
      const Clock::time_point t1 = Clock::now();
      std::fill(out.begin(), out.end(), 0.f);
      const double fill = secondsSince(t1);
      const Clock::time_point t2 = Clock::now();
      codec.decodeAdd(out.data(), m, payload.data(), 0);
      return encode + fill + comms.size * secondsSince(t2);
    });
    choice.candidates[i].codecSeconds = seconds * scale;
  }
}

int AutoSelection::run(float* x, int64_t n, bool errorFeedback, CompressState& state, const CompressComms& comms,
                       const PowerSgdLayout& layout, bool average) {
  const int k = static_cast<int>(sites_.size());
  AutoChoice& choice = state.choice;
  if (choice.elements != n || static_cast<int>(choice.candidates.size()) != k) {
    choice = AutoChoice{};  // a new tensor on this key (or the first): measure afresh
    choice.elements = n;
    choice.candidates.assign(k, AutoCandidate{});
    for (int i = 1; i < k; ++i) {
      if (!factors(i) || layout.empty()) continue;
      const PowerSgdPlan plan = powerSgdPlan(n, sites_[i]->spec().rank, layout);
      if (plan.secondCount > 0) choice.factorValues = plan.firstCount + plan.secondCount;
    }
  }
  // The key's first call measures the codecs on its values, then runs none
  // as a warm-up (its time holds one-off costs, plans and first touches, and
  // the ranks' skew from measuring); the next ones run none, and the
  // kAutoFirstDecision-th decides (none's time per call and its step known).
  const bool warmup = !choice.decided && choice.calls == 0;
  const bool first = !choice.decided && choice.calls == kAutoFirstDecision;
  const double entry = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  if (choice.lastRan >= 0 && !choice.lastWarm) choice.candidates[choice.lastRan].period.add(entry - choice.lastEntry);
  if (warmup) measureCodecs(x, n, choice, comms, layout);
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (warmup) keys_.fetch_add(1, std::memory_order_relaxed);
  const bool finite = n > 0 && addToWindow(choice, x, n);
  choice.calls += 1;
  if (errorFeedback && n > 0) replayUntried(x, n, finite, choice, layout, state.steps, comms.rank);
  // This call's number on the key since its tensor came: every cadence below
  // (decisions, trials, back-offs, probes) counts it, as the window does. Not
  // state.steps, which also counts a tensor of another size before it on the
  // key (DDP's first iteration, before it rebuilds its buckets) and is the
  // codecs' shared seed.
  const uint64_t call = choice.calls;
  // After drift: none runs this call (the link's new sample at its bytes)
  // and the next kAutoPeriodSamples (its step on the new link), then decides.
  // Between two codecs that hold a residual, none runs one call where the
  // decision asked it (choose()): it sends what the first held, so the next
  // codec's residual is its own.
  const bool drifted = choice.decided && choice.probeNext;
  const bool remeasuring = choice.decided && choice.noneCallsLeft > 0;
  const bool flush = choice.flushNext && !state.residual.empty();
  const bool probe =
      choice.decided && choice.current != 0 && (drifted || remeasuring || flush || call % kAutoProbeEvery == 0);
  choice.probeNext = false;
  choice.flushNext = false;
  if (drifted) choice.noneCallsLeft = kAutoPeriodSamples;
  if (remeasuring) choice.noneCallsLeft -= 1;
  const bool remeasured = remeasuring && choice.noneCallsLeft == 0;
  const int i = choice.decided && !probe ? choice.current : 0;
  choice.candidates[i].hasRun = true;
  choice.lastEntry = entry;
  // A codec's first call after another candidate ran is its warm-up (its
  // buffers, its plans, its first transfers at its sizes), as the key's
  // first call is none's: the step that follows it is not its step.
  choice.lastWarm = warmup || (i != 0 && i != choice.lastRan);
  choice.lastRan = i;
  const bool checks = choice.decided && choice.checkAt != 0 && call >= choice.checkAt;
  // A trial is judged at its end only: a regular decision inside it would
  // end it before the codec has steps to judge.
  const bool regular = choice.decided && !choice.onTrial && call % kAutoDecideEvery == 0;
  const bool decides = first || remeasured || (!drifted && !remeasuring && (checks || regular));

  double commSeconds = 0;
  // Bus bytes and seconds of each transfer, each one a sample of the link:
  // at most two per call (PowerSGD's), no allocation on the call's path.
  std::array<std::pair<double, double>, 2> transfers;
  size_t transferCount = 0;
  const auto sample = [&](double busBytes, double seconds) {
    if (transferCount < transfers.size()) transfers[transferCount++] = {busBytes, seconds};
  };
  const double p = comms.size;
  const auto reduced = [&](void* data, int64_t count, DataType type, ReduceOp op) {
    const Clock::time_point t0 = Clock::now();
    comms.allreduce(data, count, type, op);
    const double s = secondsSince(t0);
    commSeconds += s;
    sample(static_cast<double>(count * elementSize(type)) * 2 * (p - 1) / p, s);
  };
  const auto gathered = [&](uint8_t* all, int64_t bytes) {
    const Clock::time_point t0 = Clock::now();
    comms.allgatherBytes(all, bytes);
    const double s = secondsSince(t0);
    commSeconds += s;
    sample(static_cast<double>(bytes) * (p - 1), s);
  };
  // The codecs' exchanges, timed; each function holds one reference (no
  // allocation per call). The codecs use no maximum.
  CompressComms timed;
  timed.rank = comms.rank;
  timed.size = comms.size;
  timed.allreduce = [&reduced](void* data, int64_t count, DataType type, ReduceOp op) {
    reduced(data, count, type, op);
  };
  timed.allgatherBytes = [&gathered](uint8_t* all, int64_t bytes) { gathered(all, bytes); };
  const Clock::time_point t0 = Clock::now();
  if (i == 0) {
    // Exact: x + residual, summed as is; nothing is left over (an empty
    // residual is zero, and the next codec starts from it).
    if (state.residual.size() == static_cast<size_t>(n) && allFinite(x, n)) {
      for (int64_t j = 0; j < n; ++j) x[j] += state.residual[j];
    }
    state.residual.clear();
    timed.allreduce(x, n, DataType::Float32, average ? ReduceOp::Avg : ReduceOp::Sum);
    state.steps += 1;
  } else {
    compressedAllreduce(x, n, *sites_[i], errorFeedback, state, timed, state.steps, average, layout);
  }
  const double total = secondsSince(t0);
  AutoCandidate& ran = choice.candidates[i];
  if (!warmup) {
    // A probe after drift replaces its size class's times and its own (the
    // link changed), and every candidate's step (each was on the old link).
    for (size_t t = 0; t < transferCount; ++t) link_.add(transfers[t].first, transfers[t].second, /*fresh=*/drifted);
    if (drifted) {
      ran.total.clear();
      ran.comm.clear();
      for (AutoCandidate& c : choice.candidates) c.period.clear();
    }
    ran.total.add(total);
    ran.comm.add(commSeconds);
  }
  if (i != 0) {
    const double codec = std::max(total - commSeconds, 0.0);
    ran.codecSeconds = 0.5 * ran.codecSeconds + 0.5 * codec;
    if (decides && errorFeedback && state.residual.size() == static_cast<size_t>(n)) {
      const double r = residualRatio(state.residual.data(), n, choice.window.data(), layout);
      if (std::isfinite(r)) ran.residual = r;
    }
  }
  if (decides) decide(n, choice, call, comms, first || remeasured || (checks && choice.onTrial));
  return i;
}

// Each sparsifier not yet measured, over the kAutoDecideEvery calls that end
// as the window fills: its codec's encode on this call's sampled values,
// with the replayed residual as its error feedback (the payload is dropped);
// at the window's last call the guard's reading of that residual becomes
// its own (compress/auto_select.h, the accuracy guard). Only one that the
// decision before the replay's first call predicted faster than none is
// replayed (the ranks' agreed numbers: every rank replays the same).
void AutoSelection::replayUntried(const float* x, int64_t n, bool finite, AutoChoice& choice,
                                  const PowerSgdLayout& layout, uint64_t seed, int rank) const {
  const auto window = static_cast<uint64_t>(kAutoWindowCalls);
  if (choice.calls + kAutoDecideEvery <= window || choice.calls > window) return;
  const bool starts = choice.calls + kAutoDecideEvery == window + 1;
  const std::vector<double>& predicted = choice.last.predicted;
  std::vector<float> sample;
  std::vector<uint8_t> payload;  // dropped: only the replayed residual is kept
  for (size_t i = 1; i < sites_.size(); ++i) {
    AutoCandidate& c = choice.candidates[i];
    const Codec* codec = sites_[i] ? sites_[i]->codec() : nullptr;
    if (codec == nullptr || !waitsForWindow(static_cast<int>(i)) || c.residual >= 0) continue;
    if (starts && (predicted.size() != sites_.size() || predicted[i] < predicted[0]))
      c.replay.assign(choice.window.size(), 0.0f);
    if (c.replay.empty()) continue;  // not replayed: tried, if ever chosen, and judged on its own residual
    if (finite) {                    // an overflowed step is left out, as the window leaves it out
      if (sample.empty()) gatherSample(x, n, sample);
      const auto count = static_cast<int64_t>(sample.size());
      payload.resize(static_cast<size_t>(codec->payloadBytes(count)));
      codec->encode(sample.data(), c.replay.data(), count, payload.data(), seed, rank);
    }
    if (choice.calls == window) {
      const double r = sampleResidualRatio(c.replay.data(), n, choice.window.data(), layout);
      if (std::isfinite(r)) c.residual = r;  // else not measured: it is tried, as before the replay
      std::vector<float>().swap(c.replay);
    }
  }
}

// What a decision reads, identical on every rank once agreed (one MAX
// allreduce; a minimum travels negated), and the rules every step of the
// decision applies to it.
struct AutoSelection::Agreed {
  std::vector<double> measured;  // time per call while it ran, the ranks' least (0: it did not run)
  std::vector<double> codec;     // codec seconds per call, the ranks' most
  std::vector<double> residual;  // the guard's reading, the ranks' most (< 0: not measured)
  std::vector<double> period;    // seconds between the key's calls while it ran, the ranks' most (0: unknown)
  std::vector<double> noneStep;  // none's period over as many of its last as candidate i has (0 for none)
  double comm = 0;               // the running codec's communication time, the ranks' least (0: none runs)
  double alpha = 0, beta = 0;    // the link fit, the ranks' least
  double charge = 0;             // the group's step charge, the ranks' most
  double bound = 0;              // the accuracy guard's (0: no guard)
  std::vector<char> applies;     // a candidate on this key (PowerSGD: only with a layout)
  std::vector<char> waits;       // it waits for the window, which is not yet full
  std::vector<char> early;       // ... unless it saves enough of the step (PowerSGD, from kAutoEarlyCall)

  bool within(int i) const { return i == 0 || bound <= 0 || residual[i] <= bound; }
  // A codec is kept only while the key's calls come about as often with it
  // as with none: its call may be shorter while the step is longer (its CPU
  // taken from the backward that overlaps it, on a CPU-bound host). Steps
  // within kAutoStepShare of none's are within the step's noise: there the
  // call's time decides.
  bool slower(int i) const {
    return i != 0 && period[i] > 0 && noneStep[i] > 0 && period[i] > (1 + kAutoStepShare) * noneStep[i];
  }
  // Neither guard nor the window keeps it out (a back-off may still).
  bool open(int i) const { return applies[i] && within(i) && !waits[i] && !slower(i); }
};

// What a decision chose, and why in words.
struct AutoSelection::Verdict {
  int best = 0;
  bool vetoed = false;   // the current codec made the step longer (the step guard)
  bool flushes = false;  // from one codec to another: one call of none first sends the first's residual
  std::string why;       // what kept the fastest from being chosen, or the current codec from being kept
  std::string released;  // back-offs cleared, with their cause
};

void AutoSelection::decide(int64_t n, AutoChoice& choice, uint64_t call, const CompressComms& comms, bool freeChoice) {
  // A held move is looked at again on a window of calls made after the hold
  // (its checkAt): a regular decision before it would read a window that
  // overlaps the one that moved. Every rank holds at the same step.
  if (choice.commMoved != 0 && call < choice.checkAt) return;
  Agreed a = agree(choice, comms);
  if (holdsForDrift(choice, a, call)) return;
  double charge = 0;
  std::vector<double> est = predict(choice, a, comms.size, charge);
  startEarly(a, est);
  // An early start is a free choice (no second lead): its saving, a quarter
  // of the step, is past the noise that a second lead guards against.
  const int current = choice.decided ? choice.current : 0;
  bool starts = false;
  for (int i = 1; i < static_cast<int>(est.size()); ++i)
    starts = starts || (a.early[i] && a.open(i) && i != current && call >= choice.candidates[i].retryAt);
  const Verdict verdict = choose(choice, a, est, call, freeChoice || starts);
  std::string reason = explain(n, choice, a, est, charge, verdict, call);

  const int best = verdict.best;
  if (best != choice.current || !choice.decided) {  // a new choice: its trial starts afresh
    if (choice.decided) choice.changes += 1;
    choice.candidates[best].total.clear();
    choice.candidates[best].comm.clear();
    choice.onTrial = true;
    choice.checkAt = call + kAutoTrialCalls + (verdict.flushes ? 1 : 0);
    choice.flushNext = verdict.flushes;
  }
  // The reference: the running codec's agreed time; a new choice takes its
  // own at its next decision.
  choice.commAtDecision = best == current ? choice.commNow : 0;
  choice.current = best;
  choice.decided = true;
  choice.last.step = call;
  choice.last.choice = best;
  choice.last.predicted = std::move(est);
  choice.last.residual = a.residual;
  choice.last.period = a.period;
  choice.last.linkAlpha = a.alpha;
  choice.last.linkBeta = a.beta;
  choice.last.reason = std::move(reason);
}

AutoSelection::Agreed AutoSelection::agree(const AutoChoice& choice, const CompressComms& comms) {
  const int k = static_cast<int>(sites_.size());
  const double p = comms.size;
  const std::vector<AutoCandidate>& cand = choice.candidates;
  if (!choice.decided) {  // the link's latency before the first prediction (one small allreduce)
    double one = 0;
    const Clock::time_point t0 = Clock::now();
    comms.allreduceMax(&one, 1);
    link_.add(8.0 * 2 * (p - 1) / p, secondsSince(t0));
  }
  // v: k measured times (min), k codec costs (max), k residual ratios (max),
  // the running codec's communication time (min), the link fit's alpha and
  // beta (min), k step periods (max; 0 below kAutoPeriodSamples), the step
  // charge (max), and per codec none's step over as many of its last
  // periods as the codec has (max).
  std::vector<double> v(5 * static_cast<size_t>(k) + 4);
  const auto measuredStep = [](const TimeWindow& w, int m) {
    return w.count >= kAutoPeriodSamples && m >= kAutoPeriodSamples ? w.lowOfLast(m) : 0;
  };
  for (int i = 0; i < k; ++i) {
    v[i] = -cand[i].total.low();
    v[k + i] = cand[i].codecSeconds;
    v[2 * k + i] = cand[i].residual;
    v[3 * k + 3 + i] = measuredStep(cand[i].period, cand[i].period.count);
    v[4 * k + 4 + i] = i == 0 ? 0 : measuredStep(cand[0].period, cand[i].period.count);
  }
  v[4 * k + 3] = stepCharge();
  // Drift: the running codec's communication time, the ranks' least (a rank
  // that waited for a late peer measured the peer; the last to arrive did
  // not wait), against its reference.
  v[3 * k] = choice.decided && choice.current != 0 ? -cand[choice.current].comm.low() : 0;
  v[3 * k + 1] = -link_.alpha();
  v[3 * k + 2] = -link_.beta();
  const Clock::time_point t0 = Clock::now();
  comms.allreduceMax(v.data(), static_cast<int64_t>(v.size()));
  link_.add(8.0 * static_cast<double>(v.size()) * 2 * (p - 1) / p, secondsSince(t0));

  Agreed a;
  const auto at = [&v](int from, int count) { return std::vector<double>(v.begin() + from, v.begin() + from + count); };
  a.measured = at(0, k);
  for (double& t : a.measured) t = -t;
  a.codec = at(k, k);
  a.residual = at(2 * k, k);
  a.comm = -v[3 * k];
  a.alpha = -v[3 * k + 1];
  a.beta = -v[3 * k + 2];
  a.period = at(3 * k + 3, k);
  a.charge = v[4 * k + 3];
  a.noneStep = at(4 * k + 4, k);
  a.bound = bound_;
  const bool warming = choice.calls < static_cast<uint64_t>(kAutoWindowCalls);
  a.applies.resize(k);
  a.waits.resize(k);
  a.early.resize(k);
  for (int i = 0; i < k; ++i) {
    a.applies[i] = !factors(i) || choice.factorValues > 0;
    a.waits[i] = warming && waitsForWindow(i);
    a.early[i] = a.waits[i] && factors(i) && choice.calls >= kAutoEarlyCall;
  }
  return a;
}

bool AutoSelection::holdsForDrift(AutoChoice& choice, const Agreed& a, uint64_t call) {
  // Moved by 2x or more (and by kAutoStepShare of none's step: less is
  // within the step's noise), seen again on the next window of calls, the
  // same way: none's bytes, not measured meanwhile, need a new sample. One
  // window's move may be a phase of the machine (a link that changed stays
  // changed); nothing is decided in between, since a changed link would
  // make every step measured on the old one look wrong.
  const double was = choice.commAtDecision, now = a.comm;
  const bool far = was > 0 && now > 0 && std::fabs(now - was) >= kAutoStepShare * a.period[0];
  const int moved = far ? (now > 2 * was ? 1 : 2 * now < was ? -1 : 0) : 0;
  choice.commNow = now;
  if (moved != 0 && moved == choice.commMoved) {  // decide after none's new sample; the back-offs were for the old link
    choice.probeNext = true;
    choice.commAtDecision = 0;
    choice.commMoved = 0;
    choice.pending = -1;
    for (AutoCandidate& c : choice.candidates) {
      c.losses = c.retryAt = 0;
      c.lostTo = -1;
    }
    return true;
  }
  choice.commMoved = moved;
  if (moved != 0) {
    choice.checkAt = call + TimeWindow::kSize;
    return true;
  }
  return false;
}

std::vector<double> AutoSelection::predict(const AutoChoice& choice, const Agreed& a, int size, double& charge) {
  const int k = static_cast<int>(sites_.size());
  // A candidate that ran is judged by its measured time per call, the others
  // by the model (codec cost + the link fit at their bytes), scaled by how
  // far the model fell short for the codecs that ran (in place, codecs share
  // the cores with the other ranks' work; timed alone they look cheaper).
  std::vector<double> est(k);
  double shortfall = 1;
  for (int i = 0; i < k; ++i) {
    const double rounds = factors(i) ? 2 : 1;
    const double measured = a.measured[i], model = a.codec[i] + rounds * a.alpha + a.beta * busBytes(i, choice, size);
    est[i] = measured > 0 ? measured : model;
    if (i != 0 && measured > 0 && model > 0) shortfall = std::max(shortfall, measured / model);
  }
  for (int i = 1; i < k; ++i)
    if (!(a.measured[i] > 0)) est[i] *= shortfall;
  for (int i = 1; i < k; ++i)
    if (!a.applies[i]) est[i] = std::numeric_limits<double>::infinity();
  // The step a codec adds beyond its call (its period over none's, less
  // what its call saved or cost), per second of its codec time: on a
  // CPU-bound host, what each second of encode and decode costs the step.
  // One measured at this decision (the largest, where several codecs have
  // periods) replaces the group's; otherwise the group's agreed charge
  // stands. It is charged to every codec: one codec that lengthened the
  // step warns off the others by their codec time, untried, on every key.
  // Only a codec whose own time is above the step's noise (kAutoStepShare
  // of none's step) measures it: below, a step lengthened by noise or by
  // another key's choice would read as a large charge per second of a
  // small codec time (the step guard still leaves that codec).
  charge = a.charge;
  bool charged = false;
  for (int i = 1; i < k; ++i) {
    const double measured = a.measured[i], codec = a.codec[i];
    if (a.period[i] > 0 && a.noneStep[i] > 0 && measured > 0 && a.measured[0] > 0 &&
        codec >= kAutoStepShare * a.period[0]) {
      const double hidden = (a.period[i] - a.noneStep[i]) - (measured - est[0]);
      const double c = hidden > kAutoStepShare * a.period[0] ? hidden / codec : 0;  // smaller: the step's noise
      charge = charged ? std::max(charge, c) : c;
      charged = true;
    }
  }
  setStepCharge(charge);
  for (int i = 1; i < k; ++i) est[i] += charge * a.codec[i];
  return est;
}

void AutoSelection::startEarly(Agreed& a, const std::vector<double>& est) {
  if (a.period[0] <= 0) return;  // none's step not yet known
  const int k = static_cast<int>(est.size());
  double open = std::numeric_limits<double>::infinity();  // the fastest that may run now
  for (int i = 0; i < k; ++i)
    if (a.open(i)) open = std::min(open, est[i]);
  for (int i = 1; i < k; ++i) {
    if (a.early[i] && open - est[i] >= kAutoEarlyShare * a.period[0]) a.waits[i] = 0;
  }
}

AutoSelection::Verdict AutoSelection::choose(AutoChoice& choice, const Agreed& a, const std::vector<double>& est,
                                             uint64_t call, bool freeChoice) {
  const int k = static_cast<int>(est.size());
  std::vector<AutoCandidate>& cand = choice.candidates;
  const int current = choice.decided ? choice.current : 0;
  Verdict out;
  out.vetoed = choice.decided && a.slower(current);
  // A current codec that is vetoed, or whose residual passed the bound, is
  // left at once (no lead to confirm, no hysteresis): a free choice.
  if (out.vetoed || !a.within(current)) freeChoice = true;
  // A codec that lost its trial to another codec's prediction is free again
  // once that codec is left out (by either guard), or once it has run and
  // measured slower than the loser by the margin (the prediction was wrong):
  // the back-off kept the loser from a winner that is not one.
  for (int i = 1; i < k; ++i) {
    AutoCandidate& c = cand[i];
    if (c.lostTo <= 0 || call >= c.retryAt) continue;
    const int w = c.lostTo;
    const bool left = !a.within(w) || (out.vetoed && w == current);
    const bool slowerThanLoser =
        a.measured[w] > 0 && a.measured[i] > 0 && (1 - kAutoMargin) * a.measured[w] > a.measured[i];
    if (!left && !slowerThanLoser) continue;
    out.released += "; " + autoCandidates()[i] + " free again: " + autoCandidates()[w] + ", which its trial lost to, " +
                    (left ? "is left out" : "measured " + ms(a.measured[w]) + " against its " + ms(a.measured[i]));
    c.retryAt = 0;
    c.losses -= std::min<uint64_t>(c.losses, 1);
    c.lostTo = -1;
  }
  const auto eligible = [&](int i) { return a.open(i) && (i == current || call >= cand[i].retryAt); };
  int fastest = 0;
  for (int i = 1; i < k; ++i)
    if (eligible(i) && est[i] < est[fastest]) fastest = i;
  int best = fastest;
  if (best != 0 && est[best] > (1 - kAutoMargin) * est[0]) {
    best = 0;
    out.why = "; " + autoCandidates()[fastest] + " (" + ms(est[fastest]) + ") saves less than the margin";
  } else if (best != 0 && est[0] - est[best] < kAutoStepShare * a.period[0]) {
    best = 0;
    out.why = "; " + autoCandidates()[fastest] + " (" + ms(est[fastest]) + ") saves less than " +
              std::to_string(static_cast<int>(100 * kAutoStepShare)) + " % of the step (" + ms(a.period[0]) + ")";
  }
  // Outside a free choice the current codec is kept unless another is
  // faster by the margin; at a free choice (a trial's end included: a codec
  // on trial must show its margin against none) the fastest is taken.
  if (best != current && !freeChoice && est[best] > (1 - kAutoMargin) * est[current]) {
    out.why = "; kept: " + autoCandidates()[best] + " (" + ms(est[best]) + ") saves less than the margin";
    best = current;
  }
  // Outside a free choice (the first, a trial's end, after drift) a
  // challenger must lead twice in a row: one lead may be the machine's noise.
  if (best != current && !freeChoice && choice.pending != best) {
    out.why = "; " + autoCandidates()[best] + " (" + ms(est[best]) + ") leads: checked again in " +
              std::to_string(kAutoTrialCalls) + " calls";
    choice.pending = best;
    choice.checkAt = call + kAutoTrialCalls;
    best = current;
  } else {
    choice.pending = -1;
    choice.checkAt = 0;
  }
  // A trial that lost, or a codec that made the step longer: it waits
  // before it is tried again, longer each time.
  if (choice.decided && (choice.onTrial || out.vetoed) && best != current && current != 0) {
    AutoCandidate& lost = cand[current];
    lost.retryAt = call + (kAutoBackoff << std::min<uint64_t>(lost.losses, 6));
    lost.losses += 1;
    lost.lostTo = out.vetoed ? -1 : best;
  }
  if (out.vetoed) {
    out.why = "; " + autoCandidates()[current] + " left: the key's calls came every " + ms(a.period[current]) +
              " with it, every " + ms(a.noneStep[current]) + " with none" + out.why;
  }
  if (best != current && current != 0)
    cand[current].period.clear();  // its steps are measured afresh when it runs again
  choice.onTrial = false;
  // From one codec to another: the call between runs none (its residual
  // sent), and the trial counts from the next; a residual the guard read
  // under kAutoCarryShare (bf16's rounding) is carried in the next codec's
  // error feedback instead.
  const int last = choice.lastRan;
  const bool carries = last > 0 && a.residual[last] >= 0 && a.residual[last] < kAutoCarryShare;
  out.flushes = best != current && best != 0 && last != 0 && last != best && !carries;
  out.best = best;
  return out;
}

std::string AutoSelection::explain(int64_t n, const AutoChoice& choice, const Agreed& a, const std::vector<double>& est,
                                   double charge, const Verdict& verdict, uint64_t call) {
  const int k = static_cast<int>(est.size()), best = verdict.best;
  const std::vector<AutoCandidate>& cand = choice.candidates;
  std::string reason = "predicted " + ms(est[best]);
  if (best != 0) reason += " against none's " + ms(est[0]);
  reason += verdict.why + verdict.released;
  if (verdict.why.empty()) {
    int runnerUp = -1;
    for (int i = 0; i < k; ++i)
      if (i != best && a.open(i) && (runnerUp < 0 || est[i] < est[runnerUp])) runnerUp = i;
    if (runnerUp > 0) reason += "; next " + autoCandidates()[runnerUp] + " " + ms(est[runnerUp]);
  }
  char early[80];
  std::snprintf(early, sizeof early, " (before it, only where it saves %.0f %% of the step)", 100 * kAutoEarlyShare);
  for (int i = 1; i < k; ++i) {
    char buf[200];
    if (!a.applies[i]) continue;
    if (!a.within(i)) {
      std::snprintf(
          buf, sizeof buf,
          "; %s left out%s: its residual holds back %.0f %% of a weight's recent gradient, along it, > %.0f %%",
          autoCandidates()[i].c_str(), cand[i].hasRun ? "" : " before it ran (replayed on a sample)",
          100 * a.residual[i], 100 * a.bound);
      reason += buf;
    } else if (a.waits[i]) {
      std::snprintf(buf, sizeof buf, "; %s waits for the key's call %d%s", autoCandidates()[i].c_str(),
                    kAutoWindowCalls, a.early[i] ? early : "");
      reason += buf;
    } else if (i != best && call < cand[i].retryAt) {
      std::snprintf(buf, sizeof buf, "; %s lost a trial: not before call %llu", autoCandidates()[i].c_str(),
                    static_cast<unsigned long long>(cand[i].retryAt));
      reason += buf;
    }
  }
  if (verdict.flushes) reason += "; one call of none first sends " + autoCandidates()[choice.lastRan] + "'s residual";
  if (charge > 0.05) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "; codecs charged %.2g s of step per s of codec time", charge);
    reason += buf;
  }
  char link[96];
  std::snprintf(link, sizeof link, " (link %.3g us + %.3g GB/s bus; %lld elements)", a.alpha * 1e6,
                a.beta > 0 ? 1e-9 / a.beta : 0.0, static_cast<long long>(n));
  reason += link;
  return reason;
}

}  // namespace scalecomm
