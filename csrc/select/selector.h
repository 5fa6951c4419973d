// scalecomm select: the Selector decides which algorithm each call of one
// group runs, and what the call is called.
//
// Contract:
// - Made once per group, after its links exist, from the parsed selection
//   (select/selection.h), the group's layout (hosts, ps servers, shared
//   windows), its cost model and, where allreduce is auto, its tuning cache.
//   Construction resolves the collectives with one answer (allgather and
//   reduce_scatter: ring; barrier: shared where the ranks have windows, else
//   dissemination) and refuses `shared` without windows
//   (Error(InvalidArgument) naming the rank).
// - algorithmFor(collective, bytes, override): the entry a call runs. A
//   collective without a selection (gather, scatter, alltoall, point to
//   point) runs the override, or its default. Allreduce's auto picks per
//   size from the tuning cache's winner (where it serves the message) or the
//   cost model, once per size (bounded); broadcast's and reduce's auto from
//   the cost model.
// - prepare(collective, name, bytes): the call site, i.e. the algorithm and
//   the title ("allreduce:ring"; collectives other than allreduce, broadcast
//   and reduce are titled by a native algorithm only), made once per site
//   (`name` must be a string literal: sites are keyed by its address) and
//   kept, bounded. The reference is valid until the next prepare().
// - online(): allreduce is auto, measured online (SCALECOMM_AUTOTUNE=online,
//   more than one rank). Its sites then carry `auto`, and resolve() picks per
//   call on the executing thread (the tuner's trials and winner; a device
//   call takes the model's pick, since the host's time of a device call is
//   not the device's). After the call, record() gives the tuner its time;
//   where the tuner asks for the ranks' agreement, `agree` must replace the
//   values with their maximum over the ranks (the same call on every rank);
//   a decided winner is logged and, on rank 0, written to the tuning cache
//   (a failure to write is warned once; auto keeps measuring in memory).
// - The explore share: swapExplorePercent() (any thread) keeps the value the
//   caller set and returns the one it replaces; applyExplorePercent() hands
//   it to the tuner in call order (executing thread).
// Thread safety: prepare() and algorithmFor() on the submitting thread;
// resolve(), record(), applyExplorePercent() on the executing thread;
// tuning() and swapExplorePercent() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "algo/cost_model.h"
#include "algo/registry.h"
#include "comm/wire.h"
#include "core/label.h"
#include "select/selection.h"
#include "select/tuner.h"

namespace scalecomm {

// What auto reads besides the selection.
struct SelectorSettings {
  bool online = true;          // SCALECOMM_AUTOTUNE=online (else model)
  int64_t autoBlockBytes = 0;  // SCALECOMM_AUTO_BLOCK_BYTES
  int autoExplorePercent = 2;  // SCALECOMM_AUTO_EXPLORE_PERCENT
  std::string tuningPath;      // "" : no tuning cache
  std::string tuningKey;       // what the cache's measurements are for
};

class Selector {
 public:
  struct Prepared {
    AlgorithmRef algorithm;
    Label title;
  };
  // An online pick for one call: the tuner's pick, the entry it names and the call's title.
  struct Resolved {
    OnlineTuner::Pick pick;
    AlgorithmRef algorithm;
    Label title;
  };
  using Agree = std::function<void(std::vector<double>& values)>;
  using TimeSkew = std::function<double(const std::string& algorithm, double seconds)>;

  Selector(int rank, int size, AlgorithmSelection selection, AlgoParams layout, CostParams costs, TuningTable tuning,
           SelectorSettings settings);

  const AlgorithmSelection& selection() const { return selection_; }
  const CostParams& costParams() const { return costs_; }
  const AlgoParams& layout() const { return layout_; }
  // The allreduce algorithms auto weighs for a message of `bytes` here
  // (autoAllreduceCandidates on this layout), in registry order: what it
  // explores online and what an offline tuning sweep measures.
  std::vector<std::string> autoCandidates(int64_t bytes) const;

  AlgorithmRef algorithmFor(CollectiveKind collective, int64_t bytes, const std::string& override = "");
  const Prepared& prepare(CollectiveKind collective, const char* name, int64_t bytes);

  bool online() const { return tuner_ != nullptr; }
  Resolved resolve(int64_t bytes, bool onDevice);
  void record(const OnlineTuner::Pick& pick, double seconds, const Agree& agree);
  int swapExplorePercent(int percent) { return explorePercent_.exchange(percent); }
  void applyExplorePercent(int percent);
  // auto's online choice per size bucket; empty unless online(). Any thread.
  std::vector<OnlineTuner::BucketReport> tuning() const;
  const std::string& tuningPath() const { return settings_.tuningPath; }
  const std::string& tuningKey() const { return settings_.tuningKey; }
  // "auto: alpha=..., bandwidth=... (probe|tuning file), N measured allreduce sizes from ..."
  std::string describe() const;
  // Tests: rewrites the time this rank reports for a call of `algorithm`.
  void skewTimesForTest(TimeSkew skew) { skew_ = std::move(skew); }

 private:
  AlgorithmRef chooseAllreduce(int64_t bytes);
  void startTuner();
  void saveTuning();

  int rank_, size_;
  AlgorithmSelection selection_;
  AlgoParams layout_;
  CostParams costs_;
  TuningTable tuning_;
  SelectorSettings settings_;
  std::unique_ptr<OnlineTuner> tuner_;  // auto online (allreduce); null otherwise
  std::atomic<int> explorePercent_;     // as last set by the caller (the tuner's lags behind queued calls)
  bool saveFailed_ = false;             // executing thread: warn once
  TimeSkew skew_;                       // tests only
  // The tuner's picks as entries with their titles (plain, trial), by the
  // pick's Label (executing thread).
  struct Tuned {
    AlgorithmRef algorithm;
    std::array<Label, 2> titles;
  };
  std::unordered_map<const void*, Tuned> tuned_;
  static constexpr size_t kMaxPrepared = 4096;
  std::unordered_map<int64_t, AlgorithmRef> chosen_;  // allreduce's auto by bytes (submitting thread)
  struct SiteKey {
    CollectiveKind collective;
    const char* name;
    int64_t bytes;  // -1 where the choice does not depend on them
    bool operator==(const SiteKey& o) const { return collective == o.collective && name == o.name && bytes == o.bytes; }
  };
  struct SiteHash {
    size_t operator()(const SiteKey& k) const {
      return std::hash<const void*>()(k.name) ^
             (std::hash<int64_t>()(k.bytes) * 31 + static_cast<size_t>(k.collective));
    }
  };
  std::unordered_map<SiteKey, Prepared, SiteHash> prepared_;  // submitting thread
};

}  // namespace scalecomm
