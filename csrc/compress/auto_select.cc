// compress="auto": its table of candidates, a key's call (the codecs timed
// at its first, the timings, the step guard's periods, the sparsifiers'
// replay) and the group's step charge. A decision is compress/auto_decide.cc's.
#include "compress/auto_select.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
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

AutoSelection::StepCharge AutoSelection::stepCharge() const {
  std::lock_guard<std::mutex> g(chargeMu_);
  const uint64_t keys = keys_.load(std::memory_order_relaxed), calls = calls_.load(std::memory_order_relaxed);
  const double halfLife = static_cast<double>(kAutoBackoff) * static_cast<double>(std::max<uint64_t>(keys, 1));
  const double decay = std::exp2(-static_cast<double>(calls - std::min(chargeAt_, calls)) / halfLife);
  return {charge_.perSecond * decay, charge_.most * decay};
}

void AutoSelection::setStepCharge(const StepCharge& charge) {
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
  const auto reduced = [&](const auto& allreduce, void* data, int64_t count, DataType type, ReduceOp op) {
    const Clock::time_point t0 = Clock::now();
    allreduce(data, count, type, op);
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
  timed.allreduce = [&reduced, &comms](void* data, int64_t count, DataType type, ReduceOp op) {
    reduced(comms.allreduce, data, count, type, op);
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
    reduced(comms.exactSum ? comms.exactSum : comms.allreduce, x, n, DataType::Float32,
            average ? ReduceOp::Avg : ReduceOp::Sum);
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
      ran.forgetCalls();
      for (AutoCandidate& c : choice.candidates) c.period.clear();
    }
    ran.total.add(total);
    ran.comm.add(commSeconds);
  }
  if (i != 0) {
    const double codec = std::max(total - commSeconds, 0.0);
    ran.codecSeconds = 0.5 * ran.codecSeconds + 0.5 * codec;
    // Against a window of fewer calls a residual of a step or two reads as
    // a large share: the guard reads from the key's kAutoGuardCalls-th call.
    if (decides && errorFeedback && call >= kAutoGuardCalls && state.residual.size() == static_cast<size_t>(n)) {
      const double r = residualRatio(state.residual.data(), n, choice.window.data(), layout);
      if (std::isfinite(r)) ran.residual = r;
    }
  }
  if (decides) decide(n, choice, call, comms, first || remeasured);
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

}  // namespace scalecomm
