#include "algo/registry.h"

#include <algorithm>

#include "core/error.h"

#include "algo/barrier.h"
#include "algo/chain.h"
#include "algo/direct.h"
#include "algo/hier.h"
#include "algo/native.h"
#include "algo/ordered.h"
#include "algo/pairwise.h"
#include "algo/ps.h"
#include "algo/rhd.h"
#include "algo/ring.h"
#include "algo/tree.h"

namespace scalecomm {

namespace {

constexpr uint32_t kAllreduce = collectiveBit(CollectiveKind::Allreduce);
constexpr uint32_t kRooted = collectiveBit(CollectiveKind::Broadcast) | collectiveBit(CollectiveKind::Reduce);
constexpr uint32_t kSelectable = kAllreduce | kRooted | collectiveBit(CollectiveKind::Allgather) |
                                 collectiveBit(CollectiveKind::ReduceScatter) | collectiveBit(CollectiveKind::Barrier);

Algorithm allreduceEntry(const char* name, const char* summary, Algorithm::AllreduceBuilder build, int maxWorld = 0,
                         int64_t maxBytes = 0, bool autoCandidate = true, bool hierarchical = false) {
  Algorithm a{name, AlgorithmKind::Schedule, kAllreduce, summary};
  a.allreduce = build;
  a.maxWorld = maxWorld;
  a.maxBytes = maxBytes;
  a.autoCandidate = autoCandidate;
  a.hierarchical = hierarchical;
  return a;
}

std::vector<Algorithm> makeTable() {
  std::vector<Algorithm> t;
  // Broadcast and reduce: chain first (their default where no cost model chose).
  Algorithm chain{"chain", AlgorithmKind::Schedule, kRooted,
                  "the ring opened at the root, pipelined in segments: n-1 hops for the first segment"};
  chain.broadcast = &chainBroadcast;
  chain.reduce = &chainReduce;
  t.push_back(chain);

  Algorithm ring =
      allreduceEntry("ring", "reduce-scatter then allgather around a ring: 2(n-1) steps, bandwidth-optimal",
                     [](int r, int n, int64_t c, bool f, const AlgoParams&) { return ringAllreduce(r, n, c, f); });
  ring.serves |= collectiveBit(CollectiveKind::Allgather) | collectiveBit(CollectiveKind::ReduceScatter);
  t.push_back(ring);
  t.push_back(
      allreduceEntry("rhd", "recursive halving then doubling: 2 log2(n) steps, bandwidth-optimal",
                     [](int r, int n, int64_t c, bool f, const AlgoParams&) { return rhdAllreduce(r, n, c, f); }));
  Algorithm tree = allreduceEntry(
      "tree", "pipelined reduce up a binary tree, broadcast down: 2 log2(n) steps, every byte twice per edge",
      [](int r, int n, int64_t c, bool f, const AlgoParams&) { return treeAllreduce(r, n, c, f); });
  tree.serves |= kRooted;  // broadcast and reduce: pipelined binary tree rooted at the root
  tree.broadcast = &treeBroadcast;
  tree.reduce = &treeReduce;
  t.push_back(tree);
  t.push_back(allreduceEntry(
      "dbtree", "double binary tree: each half of the buffer up and down its own tree, every rank inner in at most one",
      [](int r, int n, int64_t c, bool f, const AlgoParams&) { return doubleTreeAllreduce(r, n, c, f); }));
  Algorithm direct = allreduceEntry(
      "direct", "every rank reduces its chunk from all peers, then sends it to all: 2 steps, n-1 messages each",
      [](int r, int n, int64_t c, bool f, const AlgoParams&) { return directAllreduce(r, n, c, f); });
  direct.serves |= collectiveBit(CollectiveKind::Gather) | collectiveBit(CollectiveKind::Scatter) |
                   collectiveBit(CollectiveKind::Alltoall) | collectiveBit(CollectiveKind::SendRecv);
  t.push_back(direct);
  Algorithm ordered{
      "ordered", AlgorithmKind::Phased,
      kAllreduce | collectiveBit(CollectiveKind::Reduce) | collectiveBit(CollectiveKind::ReduceScatter),
      "deterministic: rank q folds chunk q of every rank's buffer in rank order, then sends it to all (on one "
      "host's windows the shared allreduce; across hosts holding runs of ranks a chain in rank order and back): "
      "the same bits on any transport, segment and host layout"};
  // What the cost model and the simulator price: direct's traffic, which is
  // ordered's (its fold is one pass at the owner, as direct's reductions).
  ordered.allreduce = [](int r, int n, int64_t c, bool f, const AlgoParams&) {
    Schedule s = directAllreduce(r, n, c, f);
    s.algorithm = "ordered";
    return s;
  };
  ordered.reduce = &orderedChainReduce;
  ordered.run = &orderedRun;
  ordered.memory = AlgorithmMemory::Host;
  ordered.rankOrder = true;
  t.push_back(ordered);
  t.push_back(allreduceEntry(
      "pairwise", "two ranks exchange whole buffers and each reduces the other's: 1 step (groups of 2)",
      [](int r, int n, int64_t c, bool f, const AlgoParams&) { return pairwiseAllreduce(r, n, c, f); }, 2,
      kLinkBufferFloor));
  t.push_back(allreduceEntry(
      "ps", "parameter-server baseline: servers gather, reduce and broadcast back (SCALECOMM_PS_SERVERS)",
      [](int r, int n, int64_t c, bool f, const AlgoParams& p) {
        return psAllreduce(r, n, c, f, std::min(std::max(p.psServers, 1), n));
      },
      0, 0, /*autoCandidate=*/false));
  t.push_back(allreduceEntry(
      "hier", "reduce within each host, ring between host leaders, broadcast within hosts",
      [](int r, int n, int64_t c, bool f, const AlgoParams& p) { return hierAllreduce(r, n, c, f, p.hostOf); }, 0, 0,
      true, /*hierarchical=*/true));
  t.push_back(Algorithm{"dissemination", AlgorithmKind::Schedule, collectiveBit(CollectiveKind::Barrier),
                        "every rank signals the rank 2^k ahead in round k: ceil(log2 n) rounds"});
  Algorithm shared{"shared", AlgorithmKind::Windows, kAllreduce | collectiveBit(CollectiveKind::Barrier),
                   "one host: up to SCALECOMM_SHM_WINDOW_BYTES every rank copies its input into its shared window and "
                   "reduces straight from its peers' windows (one flag round); above, window-sized chunks, one flag "
                   "round each: every rank copies in the slices its peers reduce, reduces its own slice and copies the "
                   "peers' results out"};
  shared.autoCandidate = true;
  shared.memory = AlgorithmMemory::Host;
  shared.rankOrder = true;
  t.push_back(shared);

  Algorithm nccl{"nccl", AlgorithmKind::Native, kSelectable & ~collectiveBit(CollectiveKind::Barrier),
                 "NCCL's own collective on CUDA tensors, their default unless a schedule is named (allgather into "
                 "separate tensors runs ring over NCCL)"};
  nccl.run = &ncclNative;
  nccl.memory = AlgorithmMemory::Device;
  t.push_back(nccl);
  Algorithm mpi{"mpi", AlgorithmKind::Native, kSelectable,
                "the MPI library's own collective on the group's MPI communicator (ranks started by mpirun)"};
  mpi.run = &mpiNative;
  mpi.memory = AlgorithmMemory::Host;
  t.push_back(mpi);
  t.push_back(Algorithm{"auto", AlgorithmKind::Auto, kSelectable,
                        "allreduce: measured online per size bucket (or the cost model, or the tuning file); broadcast "
                        "and reduce: the cost model; the others: their default"});
  for (Algorithm& a : t) {
    a.label = Label(a.name);
    a.wireId = wireId(a.name, std::char_traits<char>::length(a.name));
  }
  return t;
}

std::string names(bool (*keep)(const Algorithm&)) {
  std::string out;
  for (const auto& a : algorithmRegistry())
    if (keep(a)) out += strCat(out.empty() ? "" : ", ", a.name);
  return out;
}

}  // namespace

const std::vector<Algorithm>& algorithmRegistry() {
  static const std::vector<Algorithm> table = makeTable();
  return table;
}

const Algorithm* findAlgorithm(const std::string& name) {
  for (const auto& a : algorithmRegistry())
    if (name == a.name) return &a;
  return nullptr;
}

const Algorithm& algorithmNamed(const std::string& name) {
  if (const Algorithm* a = findAlgorithm(name)) return *a;
  fail(ErrorKind::InvalidArgument, "scalecomm: unknown algorithm '", name,
       "'; this build has: ", names([](const Algorithm&) { return true; }));
}

const Algorithm& ringAlgorithm() {
  static const Algorithm& a = algorithmNamed("ring");
  return a;
}

const Algorithm& autoAlgorithm() {
  static const Algorithm& a = algorithmNamed("auto");
  return a;
}

const Algorithm& defaultAlgorithm(CollectiveKind kind) {
  static const Algorithm& chain = algorithmNamed("chain");
  static const Algorithm& dissemination = algorithmNamed("dissemination");
  static const Algorithm& direct = algorithmNamed("direct");
  switch (kind) {
    case CollectiveKind::Broadcast:
    case CollectiveKind::Reduce: return chain;
    case CollectiveKind::Barrier: return dissemination;
    case CollectiveKind::Gather:
    case CollectiveKind::Scatter:
    case CollectiveKind::Alltoall:
    case CollectiveKind::SendRecv: return direct;
    default: return ringAlgorithm();
  }
}

const Algorithm* findAllreduceAlgorithm(const std::string& name) {
  const Algorithm* a = findAlgorithm(name);
  return a != nullptr && a->ours() && a->servesCollective(CollectiveKind::Allreduce) ? a : nullptr;
}

const Algorithm& findRootedAlgorithm(const std::string& name) {
  if (name.empty() || name == "auto") return defaultAlgorithm(CollectiveKind::Broadcast);
  const Algorithm* a = findAlgorithm(name);
  if (a != nullptr && a->broadcast != nullptr) return *a;
  fail(ErrorKind::InvalidArgument, "scalecomm: unknown broadcast/reduce algorithm '", name,
       "'; choose one of: ", names([](const Algorithm& x) { return x.broadcast != nullptr; }));
}

bool runsOnWindows(const std::string& name) {
  const Algorithm* a = findAlgorithm(name);
  return a != nullptr && a->onWindows();
}

AlgorithmRef deviceAlgorithm(AlgorithmRef selected, bool nativeTakes) {
  const bool hostOnly = !selected || selected.is(AlgorithmKind::Auto) || selected->memory == AlgorithmMemory::Host;
  if (!hostOnly) return selected;
  static const Algorithm* const native = findAlgorithm("nccl");
  return nativeTakes ? AlgorithmRef(native) : AlgorithmRef();
}

bool allreduceServes(const std::string& name, int n, int64_t bytes, const AlgoParams& params) {
  const Algorithm* a = findAllreduceAlgorithm(name);
  if (a == nullptr || (a->maxWorld != 0 && n > a->maxWorld)) return false;
  if (a->onWindows() && params.windowBytes <= 0) return false;
  return a->maxBytes == 0 || bytes <= a->maxBytes;
}

std::vector<std::string> allreduceAlgorithmsServing(int n, int64_t bytes, const AlgoParams& params) {
  std::vector<std::string> out;
  for (const std::string& name : allreduceAlgorithms())
    if (allreduceServes(name, n, bytes, params)) out.push_back(name);
  return out;
}

std::vector<std::string> autoAllreduceCandidates(int n, int64_t bytes, const AlgoParams& params) {
  std::vector<std::string> out;
  for (const std::string& name : allreduceAlgorithms()) {
    const Algorithm& a = *findAlgorithm(name);
    if (!a.autoCandidate || !allreduceServes(name, n, bytes, params)) continue;
    if (a.hierarchical && !hostsHoldSeveral(params.hostOf)) continue;
    out.push_back(name);
  }
  return out;
}

const std::vector<std::string>& allreduceAlgorithms() {
  static const std::vector<std::string> out = selectableAlgorithms("allreduce");
  return out;
}

std::vector<const Algorithm*> rootedAlgorithms() {
  std::vector<const Algorithm*> out;
  for (const auto& a : algorithmRegistry())
    if (a.broadcast != nullptr) out.push_back(&a);
  return out;
}

bool selectableCollective(const std::string& collective, CollectiveKind& kind) {
  for (CollectiveKind k : {CollectiveKind::Allreduce, CollectiveKind::Broadcast, CollectiveKind::Reduce,
                           CollectiveKind::Allgather, CollectiveKind::ReduceScatter, CollectiveKind::Barrier}) {
    if (collective == collectiveName(k)) {
      kind = k;
      return true;
    }
  }
  return false;
}

std::vector<std::string> selectableAlgorithms(const std::string& collective) {
  std::vector<std::string> out;
  CollectiveKind kind;
  if (!selectableCollective(collective, kind)) return out;
  for (const auto& a : algorithmRegistry())
    if (a.ours() && a.servesCollective(kind)) out.push_back(a.name);
  return out;
}

std::vector<std::string> acceptedAlgorithms(const std::string& collective) {
  std::vector<std::string> out;
  CollectiveKind kind;
  if (!selectableCollective(collective, kind)) return out;
  for (AlgorithmKind k : {AlgorithmKind::Auto, AlgorithmKind::Schedule, AlgorithmKind::Phased, AlgorithmKind::Windows,
                          AlgorithmKind::Native}) {
    for (const auto& a : algorithmRegistry())
      if (a.kind == k && a.servesCollective(kind)) out.push_back(a.name);
  }
  return out;
}

Schedule allreduceSchedule(const std::string& algorithm, int rank, int n, int64_t count, bool finalize,
                           const AlgoParams& params) {
  const Algorithm* a = findAlgorithm(algorithm);
  if (a == nullptr || a->allreduce == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm allreduce: algorithm '", algorithm,
         a == nullptr ? "' is unknown" : "' has no schedule",
         "; the schedules are: ", names([](const Algorithm& x) { return x.allreduce != nullptr; }));
  }
  return a->allreduce(rank, n, count, finalize, params);
}

}  // namespace scalecomm
