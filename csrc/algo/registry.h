// scalecomm algo: every algorithm this build has, one entry each.
//
// Contract: an Algorithm is one entry of algorithmRegistry() (registry.cc):
// its name, its kind, the collectives it can be named for, a one-line
// summary, and what runs it:
// - Schedule: a schedule builder per collective it serves (allreduce,
//   broadcast, reduce; ring also serves allgather and reduce_scatter, direct
//   gather, scatter and alltoall, dissemination barrier), cut into segments and
//   run by the one executor on any channel;
// - Windows: runs on the host's shared windows (algo/shared.h): CPU memory of
//   ranks on one host;
// - Phased: runs several plans of its own per call with the one executor
//   and local arithmetic between them (ordered: algo/ordered.h), by the
//   entry's `run` function; its `allreduce` schedule moves the same bytes
//   and is what the cost model and the simulator price;
// - Native: a library's own collective (nccl: NCCL's, on the queued channel;
//   mpi: MPI's, on the group's MPI communicator), run by the entry's `run`
//   function, which may decline a call (nccl's allgather into separate
//   tensors): the collective's default schedule then runs;
// - Auto: chosen by the group per call or per size (never run as such).
// Everything that names algorithms reads this table: the selection parser and
// its error text, the collective dispatch, auto's candidates, the cost model
// (which prices any schedule), the wire's algorithm names, pyscalecomm's
// listings (and through them the bench and simulate), and the tests that run
// every algorithm. Adding a schedule is its file plus one entry.
// AlgorithmRef is the typed handle a call carries (options, plan keys): made
// from a name once (a call site, a selection), copied and compared as a
// pointer on every call. The table is immutable after static initialisation;
// safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/schedule.h"
#include "comm/wire.h"
#include "core/label.h"

namespace scalecomm {

class Channel;
struct CollectiveOptions;
struct NativeCall;

enum class AlgorithmKind : uint8_t { Schedule, Windows, Phased, Native, Auto };
// The memory an algorithm's collectives take: any channel's, the host's only
// (over the group's links or MPI), or a device's only (its queued channel).
enum class AlgorithmMemory : uint8_t { Any, Host, Device };

// The bit of `kind` in Algorithm::serves.
constexpr uint32_t collectiveBit(CollectiveKind kind) { return uint32_t{1} << static_cast<unsigned>(kind); }

struct Algorithm {
  using AllreduceBuilder = Schedule (*)(int rank, int n, int64_t count, bool finalize, const AlgoParams& params);
  using BroadcastBuilder = Schedule (*)(int rank, int n, int root, int64_t count);
  using ReduceBuilder = Schedule (*)(int rank, int n, int root, int64_t count, bool finalize);
  // Runs the whole of `call` (PREMUL_SUM pre-multiplied by premulFactor);
  // false where it declines the call: the entry's schedule for the
  // collective runs, or the collective's default.
  using Runner = bool (*)(Channel& ch, const NativeCall& call, double premulFactor, const CollectiveOptions& opts);

  const char* name;
  AlgorithmKind kind;
  uint32_t serves;  // collectiveBit()s of the collectives it can be named for
  const char* summary;
  AllreduceBuilder allreduce = nullptr;  // Schedule entries, per collective they serve
  BroadcastBuilder broadcast = nullptr;
  ReduceBuilder reduce = nullptr;
  Runner run = nullptr;  // Native and Phased entries
  AlgorithmMemory memory = AlgorithmMemory::Any;
  int maxWorld = 0;  // allreduce: the largest group it serves (0: any size)
  // Allreduce: the largest message (bytes of the whole buffer) it takes; 0:
  // any. An algorithm whose ranks send before they receive, with nothing to
  // absorb the message but the link's own buffer, is safe only up to what
  // every transport buffers per direction (kLinkBufferFloor).
  int64_t maxBytes = 0;
  bool autoCandidate = false;  // auto prices it (where it serves the group; autoAllreduceCandidates)
  // Auto considers it only where the group spans hosts and some host holds
  // several ranks (hostsHoldSeveral): with one host, or one rank per host,
  // it runs its flat form and would only lengthen the exploration.
  bool hierarchical = false;
  // Every element of its reductions is the left fold of the ranks' values in
  // rank order, whatever the segment size, transport and hosts (the
  // algorithms a deterministic group may run: algo/ordered.h).
  bool rankOrder = false;
  Label label = Label();  // the name, interned
  uint32_t wireId = 0;    // the name's id in message headers (comm/wire.h)

  bool servesCollective(CollectiveKind c) const { return (serves & collectiveBit(c)) != 0; }
  bool onWindows() const { return kind == AlgorithmKind::Windows; }
  // One of scalecomm's own algorithms (a schedule, phases or the shared windows).
  bool ours() const {
    return kind == AlgorithmKind::Schedule || kind == AlgorithmKind::Phased || kind == AlgorithmKind::Windows;
  }
};

const std::vector<Algorithm>& algorithmRegistry();
// The entry named `name`, or nullptr.
const Algorithm* findAlgorithm(const std::string& name);
// The entry named `name`; unknown names throw Error(InvalidArgument) listing the table.
const Algorithm& algorithmNamed(const std::string& name);
// Frequently named entries, found once.
const Algorithm& ringAlgorithm();
const Algorithm& autoAlgorithm();

// The algorithm a collective runs when none is named (a null AlgorithmRef):
// ring (allreduce, allgather, reduce_scatter), chain (broadcast, reduce),
// dissemination (barrier), direct (gather, scatter, alltoall, send/recv).
const Algorithm& defaultAlgorithm(CollectiveKind kind);

// A call's algorithm: an entry of the table, or none (the collective's
// default). Made from a name at setup (unknown names throw InvalidArgument,
// "" is none); compared, hashed and copied as a pointer.
class AlgorithmRef {
 public:
  AlgorithmRef() = default;
  AlgorithmRef(const Algorithm* a) : a_(a) {}                                                    // NOLINT
  AlgorithmRef(const Algorithm& a) : a_(&a) {}                                                   // NOLINT
  AlgorithmRef(const std::string& name) : a_(name.empty() ? nullptr : &algorithmNamed(name)) {}  // NOLINT
  AlgorithmRef(const char* name) : AlgorithmRef(std::string(name)) {}                            // NOLINT
  AlgorithmRef(Label name) : AlgorithmRef(name.str()) {}                                         // NOLINT

  const Algorithm* get() const { return a_; }
  const Algorithm* operator->() const { return a_; }
  explicit operator bool() const { return a_ != nullptr; }
  bool empty() const { return a_ == nullptr; }
  bool is(AlgorithmKind k) const { return a_ != nullptr && a_->kind == k; }
  // The entry, or the collective's default.
  const Algorithm& orDefault(CollectiveKind kind) const { return a_ ? *a_ : defaultAlgorithm(kind); }
  Label label() const { return a_ ? a_->label : Label(); }
  const std::string& str() const { return label().str(); }
  const void* key() const { return a_; }

  friend bool operator==(AlgorithmRef a, AlgorithmRef b) { return a.a_ == b.a_; }
  friend bool operator!=(AlgorithmRef a, AlgorithmRef b) { return a.a_ != b.a_; }
  friend bool operator==(AlgorithmRef a, const char* name) { return a.str() == name; }
  friend bool operator!=(AlgorithmRef a, const char* name) { return a.str() != name; }
  friend std::string operator+(const std::string& s, AlgorithmRef a) { return s + a.str(); }
  friend std::string operator+(const char* s, AlgorithmRef a) { return s + a.str(); }
  friend std::ostream& operator<<(std::ostream& os, AlgorithmRef a) { return os << a.str(); }

 private:
  const Algorithm* a_ = nullptr;
};

// What every transport buffers per direction without the peer reading: the
// smallest shm ring (4096 bytes) less one wire header. TCP's smallest send
// buffer (4608 bytes) and the mpi link's buffers are larger.
constexpr int64_t kLinkBufferFloor = 4096 - 64;

// Allreduce: the entry named `name` when it is one of ours that serves
// allreduce (a schedule or the windows), or nullptr.
const Algorithm* findAllreduceAlgorithm(const std::string& name);
// Broadcast/reduce: the schedule entry named `name`; "auto" or "" name the
// default (chain); unknown names throw Error(InvalidArgument).
const Algorithm& findRootedAlgorithm(const std::string& name);
// Whether `name` is an algorithm that runs on the shared windows.
bool runsOnWindows(const std::string& name);
// The algorithm a collective on device memory (a queued channel) runs for
// the group's selection `selected`: the selection where it has a device form
// (a schedule, or nccl). Auto (whose cost model describes CPUs, not GPUs) and
// host-only choices (mpi, shared windows) give way to the transport's own
// collective (the nccl entry) where `nativeTakes` (the channel has it for this
// collective, dtype and op), else to none (the collective's default schedule).
AlgorithmRef deviceAlgorithm(AlgorithmRef selected, bool nativeTakes);

// Whether `name` exists and serves a group of n ranks (and, with bytes >= 0,
// a message of that many bytes, given the group's windows in params).
bool allreduceServes(const std::string& name, int n, int64_t bytes = -1, const AlgoParams& params = {});
// Every algorithm of ours that serves a message of `bytes` in a group of n
// ranks with this layout (registry order).
std::vector<std::string> allreduceAlgorithmsServing(int n, int64_t bytes, const AlgoParams& params);
// The algorithms auto prices for a message of `bytes` in a group of n ranks
// with this layout (a windows algorithm only where the message fits one window).
std::vector<std::string> autoAllreduceCandidates(int n, int64_t bytes, const AlgoParams& params);
// Our allreduce algorithms (schedules and windows), registry order.
const std::vector<std::string>& allreduceAlgorithms();
// Our schedule entries that serve broadcast and reduce, registry order (the first is the default).
std::vector<const Algorithm*> rootedAlgorithms();

// The collective named `collective` ("allreduce", "broadcast", "reduce",
// "allgather", "reduce_scatter", "barrier"); false for any other name.
bool selectableCollective(const std::string& collective, CollectiveKind& kind);
// Our algorithms that can be named for `collective` (see above), registry
// order, without auto and the native ones; empty for an unknown collective.
std::vector<std::string> selectableAlgorithms(const std::string& collective);
// Every name a selection accepts for `collective`: auto (where it serves),
// ours, and the native ones.
std::vector<std::string> acceptedAlgorithms(const std::string& collective);

// The schedule of our allreduce `algorithm` (throws InvalidArgument for an
// unknown name or one without a schedule).
Schedule allreduceSchedule(const std::string& algorithm, int rank, int n, int64_t count, bool finalize,
                           const AlgoParams& params = {});

}  // namespace scalecomm
