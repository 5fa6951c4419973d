// The Group's algorithm choice and prepared call sites (group/group.h:
// algorithmFor, prepare): what a call runs and what it is called.
#include "algo/cost_model.h"
#include "algo/registry.h"
#include "core/logging.h"
#include "group/group.h"

namespace scalecomm {

AlgorithmRef Group::chooseAllreduce(int64_t bytes) {
  auto it = chosen_.find(bytes);
  if (it != chosen_.end()) return it->second;
  if (chosen_.size() >= kMaxPrepared) chosen_.clear();  // bounded like the prepared sites
  std::string algo = tuning_.lookup(bytes);
  const char* why = "tuning file";
  if (!algo.empty() && !allreduceServes(algo, size_, bytes, algoParams())) {
    // The table's winner at the nearest measured size cannot take this message.
    SC_LOG(Info, "rank ", rank_, ": tuning file's ", algo, " does not serve ", bytes, " bytes; using the cost model");
    algo.clear();
  }
  if (algo.empty()) {
    const AlgoParams params = algoParams();
    algo = scalecomm::chooseAllreduce(size_, bytes, costs_, params, autoAllreduceCandidates(size_, bytes, params));
    why = "cost model";
  }
  SC_LOG(Info, "rank ", rank_, ": auto picks ", algo, " for allreduce of ", bytes, " bytes (", why, ")");
  return chosen_.emplace(bytes, AlgorithmRef(algo)).first->second;
}

AlgorithmRef Group::algorithmFor(CallKind kind, int64_t bytes, const std::string& override) {
  switch (kind) {
    case CallKind::Allreduce: {
      const std::string& a = override.empty() ? selection_.allreduce : override;
      return a == "auto" ? chooseAllreduce(bytes) : AlgorithmRef(a);
    }
    case CallKind::Broadcast:
    case CallKind::Reduce: {
      const std::string& configured = kind == CallKind::Broadcast ? selection_.broadcast : selection_.reduce;
      const std::string& a = override.empty() ? configured : override;
      return AlgorithmRef(a == "auto" ? chooseRooted(size_, bytes, costs_) : a);
    }
    case CallKind::Allgather: return AlgorithmRef(override.empty() ? selection_.allgather : override);
    case CallKind::ReduceScatter: return AlgorithmRef(override.empty() ? selection_.reduceScatter : override);
    case CallKind::Barrier: return AlgorithmRef(override.empty() ? selection_.barrier : override);
    default: return AlgorithmRef(override);
  }
}

const Group::Prepared& Group::prepare(CallKind kind, const char* collective, int64_t bytes) {
  const std::string* configured = kind == CallKind::Allreduce   ? &selection_.allreduce
                                  : kind == CallKind::Broadcast ? &selection_.broadcast
                                  : kind == CallKind::Reduce    ? &selection_.reduce
                                                                : nullptr;
  const bool bySize = configured != nullptr && *configured == "auto";
  // auto online: the executing thread picks per call (Group::resolveTuned).
  const bool online = bySize && kind == CallKind::Allreduce && tuner_ != nullptr;
  const SiteKey key{kind, collective, bySize && !online ? bytes : -1};
  auto it = prepared_.find(key);
  if (it != prepared_.end()) return it->second;
  // Bounded: a job with ever new message sizes under auto re-prepares (Labels stay valid).
  if (prepared_.size() >= kMaxPrepared) prepared_.clear();
  if (online) return prepared_.emplace(key, Prepared{autoAlgorithm(), Label(collective)}).first->second;
  const AlgorithmRef algorithm = algorithmFor(kind, bytes);
  // Allreduce, broadcast and reduce name their schedule; the others only
  // a native collective.
  const bool named = kind == CallKind::Allreduce || kind == CallKind::Broadcast || kind == CallKind::Reduce ||
                     algorithm.is(AlgorithmKind::Native);
  const Label title = named && !algorithm.empty() ? Label(strCat(collective, ":", algorithm)) : Label(collective);
  return prepared_.emplace(key, Prepared{algorithm, title}).first->second;
}

}  // namespace scalecomm
