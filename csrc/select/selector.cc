#include "select/selector.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/deadline.h"
#include "core/error.h"
#include "core/logging.h"

namespace scalecomm {

Selector::Selector(int rank, int size, AlgorithmSelection selection, AlgoParams layout, CostParams costs,
                   TuningTable tuning, SelectorSettings settings)
    : rank_(rank),
      size_(size),
      selection_(std::move(selection)),
      layout_(std::move(layout)),
      costs_(costs),
      tuning_(std::move(tuning)),
      settings_(std::move(settings)),
      explorePercent_(settings_.autoExplorePercent) {
  // Collectives with one scalecomm algorithm: "auto" is it; barrier's auto
  // runs on the shared windows where the ranks have them.
  if (selection_.barrier == "auto" && layout_.windowBytes > 0) selection_.barrier = "shared";
  for (const char* c : {"allgather", "reduce_scatter", "barrier"}) {
    std::string& chosen = *selection_.slot(c);
    if (chosen == "auto") chosen = selectableAlgorithms(c).front();
  }
  if ((runsOnWindows(selection_.allreduce) || selection_.barrier == "shared") && layout_.windowBytes == 0 &&
      size_ > 1) {
    fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank_, "): algorithm shared (", selection_.str(),
         ") needs every rank of the group on this host, linked by shared memory (transport auto or shm), and "
         "SCALECOMM_SHM_WINDOW_BYTES > 0; this group has no shared windows");
  }
  startTuner();
}

std::vector<std::string> Selector::autoCandidates(int64_t bytes) const {
  return autoAllreduceCandidates(size_, bytes, layout_);
}

void Selector::startTuner() {
  if (selection_.allreduce != "auto" || !settings_.online || size_ <= 1) return;
  auto ranker = [this](int64_t bytes) {
    const std::vector<std::string> names = autoAllreduceCandidates(size_, bytes, layout_);
    const std::string favourite = scalecomm::chooseAllreduce(size_, bytes, costs_, layout_, names);
    std::vector<std::pair<std::string, double>> out;
    for (const std::string& a : names) {
      const double t = predictAllreduceSeconds(a, size_, bytes, costs_, layout_);
      if (a == favourite)
        out.insert(out.begin(), {a, t});
      else
        out.emplace_back(a, t);
    }
    std::stable_sort(out.begin() + 1, out.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    return out;
  };
  auto serves = [this](const std::string& a, int64_t bytes) { return allreduceServes(a, size_, bytes, layout_); };
  TunerSettings settings;
  settings.blockBytes = settings_.autoBlockBytes;
  settings.explorePercent = explorePercent_.load();
  tuner_ = std::make_unique<OnlineTuner>(ranker, serves, settings);
  tuner_->load(tuning_.allreduce);
}

AlgorithmRef Selector::chooseAllreduce(int64_t bytes) {
  auto it = chosen_.find(bytes);
  if (it != chosen_.end()) return it->second;
  if (chosen_.size() >= kMaxPrepared) chosen_.clear();  // bounded like the prepared sites
  std::string algo = tuning_.lookup(bytes);
  const char* why = "tuning file";
  if (!algo.empty() && !allreduceServes(algo, size_, bytes, layout_)) {
    // The table's winner at the nearest measured size cannot take this message.
    SC_LOG(Info, "rank ", rank_, ": tuning file's ", algo, " does not serve ", bytes, " bytes; using the cost model");
    algo.clear();
  }
  if (algo.empty()) {
    algo = scalecomm::chooseAllreduce(size_, bytes, costs_, layout_, autoAllreduceCandidates(size_, bytes, layout_));
    why = "cost model";
  }
  SC_LOG(Info, "rank ", rank_, ": auto picks ", algo, " for allreduce of ", bytes, " bytes (", why, ")");
  return chosen_.emplace(bytes, AlgorithmRef(algo)).first->second;
}

AlgorithmRef Selector::algorithmFor(CollectiveKind collective, int64_t bytes, const std::string& override) {
  switch (collective) {
    case CollectiveKind::Allreduce: {
      const std::string& a = override.empty() ? selection_.allreduce : override;
      return a == "auto" ? chooseAllreduce(bytes) : AlgorithmRef(a);
    }
    case CollectiveKind::Broadcast:
    case CollectiveKind::Reduce: {
      const std::string& configured =
          collective == CollectiveKind::Broadcast ? selection_.broadcast : selection_.reduce;
      const std::string& a = override.empty() ? configured : override;
      return AlgorithmRef(a == "auto" ? chooseRooted(size_, bytes, costs_) : a);
    }
    case CollectiveKind::Allgather: return AlgorithmRef(override.empty() ? selection_.allgather : override);
    case CollectiveKind::ReduceScatter: return AlgorithmRef(override.empty() ? selection_.reduceScatter : override);
    case CollectiveKind::Barrier: return AlgorithmRef(override.empty() ? selection_.barrier : override);
    default: return AlgorithmRef(override);
  }
}

const Selector::Prepared& Selector::prepare(CollectiveKind collective, const char* name, int64_t bytes) {
  const std::string* configured = collective == CollectiveKind::Allreduce   ? &selection_.allreduce
                                  : collective == CollectiveKind::Broadcast ? &selection_.broadcast
                                  : collective == CollectiveKind::Reduce    ? &selection_.reduce
                                                                            : nullptr;
  const bool bySize = configured != nullptr && *configured == "auto";
  // auto online: the executing thread picks per call (resolve).
  const bool perCall = bySize && collective == CollectiveKind::Allreduce && online();
  const SiteKey key{collective, name, bySize && !perCall ? bytes : -1};
  auto it = prepared_.find(key);
  if (it != prepared_.end()) return it->second;
  // Bounded: a job with ever new message sizes under auto re-prepares (Labels stay valid).
  if (prepared_.size() >= kMaxPrepared) prepared_.clear();
  if (perCall) return prepared_.emplace(key, Prepared{autoAlgorithm(), Label(name)}).first->second;
  const AlgorithmRef algorithm = algorithmFor(collective, bytes);
  // Allreduce, broadcast and reduce name their schedule; the others only
  // a native collective.
  const bool named = configured != nullptr || algorithm.is(AlgorithmKind::Native);
  const Label title = named && !algorithm.empty() ? Label(strCat(name, ":", algorithm)) : Label(name);
  return prepared_.emplace(key, Prepared{algorithm, title}).first->second;
}

Selector::Resolved Selector::resolve(int64_t bytes, bool onDevice) {
  Resolved r;
  Label picked;
  if (onDevice) {
    picked = tuner_->modelPick(bytes);  // the host's time of a device call is not the device's
  } else {
    r.pick = tuner_->pick(bytes);
    picked = r.pick.algorithm;
    if (r.pick.fresh) SC_LOG(Info, "rank ", rank_, ": ", tuner_->describe(OnlineTuner::bucketOf(bytes)));
  }
  auto it = tuned_.find(picked.key());
  if (it == tuned_.end()) {
    const Tuned t{AlgorithmRef(picked), {Label("allreduce:" + picked), Label("allreduce:" + picked + " (trial)")}};
    it = tuned_.emplace(picked.key(), t).first;
  }
  r.algorithm = it->second.algorithm;
  r.title = it->second.titles[r.pick.candidate >= 0 ? 1 : 0];
  return r;
}

void Selector::record(const OnlineTuner::Pick& pick, double seconds, const Agree& agree) {
  if (skew_) seconds = skew_(pick.algorithm.str(), seconds);
  std::vector<double> values = tuner_->record(pick, seconds);
  if (values.empty()) return;
  const Clock::time_point started = Clock::now();
  agree(values);
  const std::string what = tuner_->agreed(pick, values, secondsSince(started));
  if (what.empty()) return;
  SC_LOG(Info, "rank ", rank_, ": ", what);
  if (rank_ == 0) saveTuning();
}

void Selector::applyExplorePercent(int percent) {
  if (tuner_) tuner_->setExplorePercent(percent);
}

std::vector<OnlineTuner::BucketReport> Selector::tuning() const {
  return tuner_ ? tuner_->report() : std::vector<OnlineTuner::BucketReport>{};
}

std::string Selector::describe() const {
  return strCat(
      "auto: alpha=", costs_.alpha * 1e6, " us, bandwidth=", 1e-9 / costs_.beta, " GB/s",
      costs_.windowAlpha >= 0 ? strCat(", shared window round=", costs_.windowAlpha * 1e6, " us") : "",
      costs_.windowBeta > 0 ? strCat(", window copy=", 1e-9 / costs_.windowBeta, " GB/s") : "", " (",
      tuning_.hasCosts ? "tuning file" : "probe", "), ", tuning_.allreduce.size(), " measured allreduce sizes from ",
      settings_.tuningPath.empty() ? "no tuning file" : settings_.tuningPath, tuner_ ? "; measuring online" : "");
}

void Selector::saveTuning() {
  if (settings_.tuningPath.empty()) return;
  TuningTable t;
  t.key = settings_.tuningKey;
  t.world = size_;
  t.hasCosts = costs_.alpha > 0 && costs_.beta > 0;
  t.costs = costs_;
  t.hasLayout = true;
  t.layout = layout_;
  t.allreduce = tuner_->decided();
  std::string why;
  if (!t.save(settings_.tuningPath, &why)) {
    if (!saveFailed_) {
      SC_LOG(Warn, "rank 0: cannot write the tuning cache ", settings_.tuningPath, " (", why,
             "; SCALECOMM_TUNING_FILE names another, none turns it off); auto keeps measuring in memory");
    }
    saveFailed_ = true;
  }
}

}  // namespace scalecomm
