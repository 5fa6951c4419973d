// scalecomm algo: the algorithms this build has, one entry each.
//
// Contract: every allreduce algorithm is one AllreduceAlgorithm entry in
// registry.cc (name, one-line summary, schedule builder, the world sizes it
// serves, whether auto considers it) plus its schedule file; every broadcast/
// reduce algorithm one RootedAlgorithm entry (both schedule builders).
// Everything that names algorithms reads these tables: the selection parser
// and its error text, the schedule dispatch, auto's candidates, the cost
// model (which prices any schedule), pyscalecomm.algorithms() and
// pyscalecomm.allreduce_algorithms() (and through them the bench and
// simulate), and the tests that run every algorithm. Immutable after static
// initialisation; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/schedule.h"

namespace scalecomm {

struct AllreduceAlgorithm {
  const char* name;
  const char* summary;
  // Null for an algorithm that runs on the shared windows (algo/shared.h)
  // instead of a schedule: it serves only groups that have windows
  // (AlgoParams::windowBytes > 0).
  Schedule (*schedule)(int rank, int n, int64_t count, bool finalize, const AlgoParams& params);
  int maxWorld;  // the largest group it serves (0: any size)
  // The largest message (bytes of the whole buffer) it takes; 0: any. An
  // algorithm whose ranks send before they receive, with nothing to absorb
  // the message but the link's own buffer, is safe only up to what every
  // transport buffers per direction (kLinkBufferFloor).
  int64_t maxBytes;
  bool autoCandidate;  // auto prices it (where it serves the group; autoAllreduceCandidates)
  // Auto considers it only where the group spans hosts and some host holds
  // several ranks (hostsHoldSeveral): with one host, or one rank per host,
  // it runs its flat form and would only lengthen the exploration.
  bool hierarchical;

  bool onWindows() const { return schedule == nullptr; }
};

const std::vector<AllreduceAlgorithm>& allreduceRegistry();
// The entry named `name`, or nullptr.
const AllreduceAlgorithm* findAllreduceAlgorithm(const std::string& name);
// Whether `name` is an algorithm that runs on the shared windows.
bool runsOnWindows(const std::string& name);
// The algorithm a collective on device memory (a queued channel) runs for
// the group's selection `selected`: the selection where it has a device form
// (a schedule, or nccl); for auto, whose cost model describes CPUs, not GPUs,
// and for host-only choices (mpi, shared windows), the collective's default:
// ring for allreduce, "auto" (the first registry entry) for the others.
std::string deviceAlgorithm(bool allreduce, const std::string& selected);
// What every transport buffers per direction without the peer reading: the
// smallest shm ring (4096 bytes) less one wire header. TCP's smallest send
// buffer (4608 bytes) and the mpi link's buffers are larger.
constexpr int64_t kLinkBufferFloor = 4096 - 64;

// Whether `name` exists and serves a group of n ranks (and, with bytes >= 0,
// a message of that many bytes, given the group's windows in params).
bool allreduceServes(const std::string& name, int n, int64_t bytes = -1, const AlgoParams& params = {});
// Every algorithm that serves a message of `bytes` in a group of n ranks with
// this layout (registry order).
std::vector<std::string> allreduceAlgorithmsServing(int n, int64_t bytes, const AlgoParams& params);
// The algorithms auto prices for a message of `bytes` in a group of n ranks
// with this layout (a windows algorithm only where the message fits one window).
std::vector<std::string> autoAllreduceCandidates(int n, int64_t bytes, const AlgoParams& params);

// Broadcast and reduce (rooted) algorithms; auto prices every entry.
struct RootedAlgorithm {
  const char* name;
  const char* summary;
  Schedule (*broadcast)(int rank, int n, int root, int64_t count);
  Schedule (*reduce)(int rank, int n, int root, int64_t count, bool finalize);
};

const std::vector<RootedAlgorithm>& rootedRegistry();
// The entry named `name`; "auto" or "" name the first entry (the default
// when no cost model chose); unknown names throw Error(InvalidArgument).
const RootedAlgorithm& findRootedAlgorithm(const std::string& name);

// The algorithms that can be named for `collective` (allreduce, broadcast,
// reduce, allgather, reduce_scatter, barrier), registry order, without "auto"
// and "mpi" (which every collective accepts); empty for an unknown collective.
// Barrier: dissemination (over the links), shared (on the windows).
std::vector<std::string> selectableAlgorithms(const std::string& collective);

}  // namespace scalecomm
