#include "algo/registry.h"

#include <algorithm>

#include "core/error.h"

#include "algo/chain.h"
#include "algo/direct.h"
#include "algo/hier.h"
#include "algo/pairwise.h"
#include "algo/ps.h"
#include "algo/rhd.h"
#include "algo/ring.h"
#include "algo/tree.h"

namespace scalecomm {

const std::vector<AllreduceAlgorithm>& allreduceRegistry() {
  static const std::vector<AllreduceAlgorithm> table = {
      {"ring", "reduce-scatter then allgather around a ring: 2(n-1) steps, bandwidth-optimal",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return ringAllreduce(r, n, c, f); }, 0, 0, true, false},
      {"rhd", "recursive halving then doubling: 2 log2(n) steps, bandwidth-optimal",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return rhdAllreduce(r, n, c, f); }, 0, 0, true, false},
      {"tree", "pipelined reduce up a binary tree, broadcast down: 2 log2(n) steps, every byte twice per edge",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return treeAllreduce(r, n, c, f); }, 0, 0, true, false},
      {"dbtree",
       "double binary tree: each half of the buffer up and down its own tree, every rank inner in at most one",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return doubleTreeAllreduce(r, n, c, f); }, 0, 0, true,
       false},
      {"direct", "every rank reduces its chunk from all peers, then sends it to all: 2 steps, n-1 messages each",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return directAllreduce(r, n, c, f); }, 0, 0, true,
       false},
      {"pairwise", "two ranks exchange whole buffers and each reduces the other's: 1 step (groups of 2)",
       [](int r, int n, int64_t c, bool f, const AlgoParams&) { return pairwiseAllreduce(r, n, c, f); }, 2,
       kLinkBufferFloor, true, false},
      {"ps", "parameter-server baseline: servers gather, reduce and broadcast back (SCALECOMM_PS_SERVERS)",
       [](int r, int n, int64_t c, bool f, const AlgoParams& p) {
         return psAllreduce(r, n, c, f, std::min(std::max(p.psServers, 1), n));
       },
       0, 0, false, false},
      {"hier", "reduce within each host, ring between host leaders, broadcast within hosts",
       [](int r, int n, int64_t c, bool f, const AlgoParams& p) { return hierAllreduce(r, n, c, f, p.hostOf); }, 0, 0,
       true, true},
      {"shared",
       "one host: up to SCALECOMM_SHM_WINDOW_BYTES every rank copies its input into its shared window and reduces "
       "straight from its peers' windows (one flag round); above, window-sized chunks, one flag round each: every "
       "rank copies in the slices its peers reduce, reduces its own slice and copies the peers' results out",
       nullptr, 0, 0, true, false},
  };
  return table;
}

const AllreduceAlgorithm* findAllreduceAlgorithm(const std::string& name) {
  for (const auto& a : allreduceRegistry())
    if (name == a.name) return &a;
  return nullptr;
}

bool runsOnWindows(const std::string& name) {  // on every allreduce call: compares only the windows entries' names
  for (const auto& a : allreduceRegistry())
    if (a.onWindows() && name == a.name) return true;
  return false;
}

std::string deviceAlgorithm(bool allreduce, const std::string& selected) {
  const bool hostOnly = selected == "auto" || selected == "mpi" || selected == "shared" || runsOnWindows(selected);
  if (!hostOnly) return selected;
  return allreduce ? "ring" : "auto";
}

bool allreduceServes(const std::string& name, int n, int64_t bytes, const AlgoParams& params) {
  const AllreduceAlgorithm* a = findAllreduceAlgorithm(name);
  if (a == nullptr || (a->maxWorld != 0 && n > a->maxWorld)) return false;
  if (a->onWindows() && params.windowBytes <= 0) return false;
  return a->maxBytes == 0 || bytes <= a->maxBytes;
}

std::vector<std::string> allreduceAlgorithmsServing(int n, int64_t bytes, const AlgoParams& params) {
  std::vector<std::string> out;
  for (const auto& a : allreduceRegistry()) {
    if (allreduceServes(a.name, n, bytes, params)) out.push_back(a.name);
  }
  return out;
}

std::vector<std::string> autoAllreduceCandidates(int n, int64_t bytes, const AlgoParams& params) {
  std::vector<std::string> out;
  for (const auto& a : allreduceRegistry()) {
    if (!a.autoCandidate || !allreduceServes(a.name, n, bytes, params)) continue;
    if (a.hierarchical && !hostsHoldSeveral(params.hostOf)) continue;
    out.push_back(a.name);
  }
  return out;
}

const std::vector<RootedAlgorithm>& rootedRegistry() {
  static const std::vector<RootedAlgorithm> table = {
      {"chain", "the ring opened at the root, pipelined in segments: n-1 hops for the first segment", &chainBroadcast,
       &chainReduce},
      {"tree", "pipelined binary tree rooted at the root: log2(n) hops for the first segment", &treeBroadcast,
       &treeReduce},
  };
  return table;
}

const RootedAlgorithm& findRootedAlgorithm(const std::string& name) {
  const auto& table = rootedRegistry();
  if (name.empty() || name == "auto") return table.front();
  for (const auto& a : table)
    if (name == a.name) return a;
  fail(ErrorKind::InvalidArgument, "scalecomm: unknown broadcast/reduce algorithm '", name, "'; choose one of: ", [&] {
    std::string names;
    for (const auto& a : table) names += strCat(names.empty() ? "" : ", ", a.name);
    return names;
  }());
}

std::vector<std::string> selectableAlgorithms(const std::string& collective) {
  std::vector<std::string> out;
  if (collective == "allreduce") {
    for (const auto& a : allreduceRegistry()) out.push_back(a.name);
  } else if (collective == "broadcast" || collective == "reduce") {
    for (const auto& a : rootedRegistry()) out.push_back(a.name);
  } else if (collective == "allgather" || collective == "reduce_scatter") {
    out.push_back("ring");
  } else if (collective == "barrier") {
    out = {"dissemination", "shared"};
  }
  return out;
}

}  // namespace scalecomm
