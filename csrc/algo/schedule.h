// scalecomm algo: schedules, the pure-data description of a collective.
//
// Contract: a Schedule says, for one rank, which blocks of its buffers it sends
// to or receives from which peer at each step. It is pure arithmetic (no I/O,
// no memory): blocks are named by index and sized in elements; the caller binds
// block indices to memory at execution time. Within a step, ops run
// concurrently; across steps, the plan (plan.h) orders only what touches the
// same data, so consecutive steps pipeline segment by segment.
// Invariant (checked by tests): for every pair (a, b), the sequence of a's
// sends to b equals the sequence of b's receives from a (same block sizes, same
// order). Value types, no shared state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace scalecomm {

enum class OpKind : uint8_t {
  Send,        // send a block to peer
  Recv,        // receive a block from peer, overwriting it
  RecvReduce,  // receive a block from peer and reduce it into ours
  Finalize,    // local: finish a fully reduced block (AVG's division)
};

struct ScheduleOp {
  OpKind kind;
  int peer;  // -1 for Finalize
  int block;
  // Block id carried in the message header and matched by the receiver; -1
  // means `block`. Differs only where the two ends index a message's data by
  // different blocks (all-to-all: the sender's block "for q", the receiver's
  // block "from s"); both ends must give the same id.
  int wire = -1;
};

struct ScheduleStep {
  std::vector<ScheduleOp> ops;
};

struct Schedule {
  std::vector<int64_t> blockCounts;  // elements per block
  std::vector<ScheduleStep> steps;
  std::string algorithm;  // e.g. "ring"
  // When true, a block of zero elements still travels as one header-only
  // message, so both ends check the sizes they were given. All-to-all sets it:
  // its per-pair sizes come from the user, and a receiver that expects nothing
  // must still learn that the sender sent something (or the mismatch surfaces
  // on one rank only, or as a closed link after the other rank moved on).
  bool emptyBlocksAreMessages = false;
};

// What some schedules need besides rank, world size and count.
struct AlgoParams {
  std::vector<int> hostOf;  // host index per rank (hier); empty: one host
  int psServers = 1;        // ps: server ranks 0..S-1, at most the world size
  int64_t windowBytes = 0;  // shared windows (algo/shared.h): bytes per call; 0: the ranks share none
};

// Whether ranks sit on more than one host (hostOf as in AlgoParams; empty: one host).
inline bool spansHosts(const std::vector<int>& hostOf) {
  for (int h : hostOf)
    if (h != hostOf[0]) return true;
  return false;
}

// Whether the ranks sit on more than one host and some host holds two or
// more: where a hierarchy of hosts differs from its flat form.
inline bool hostsHoldSeveral(const std::vector<int>& hostOf) {
  if (!spansHosts(hostOf)) return false;
  std::vector<int> sorted = hostOf;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

// a mod n in [0, n), for rank arithmetic around a ring.
inline int modRank(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

// Splits `count` elements into n near-equal chunks (the first count % n get one more).
std::vector<int64_t> splitEven(int64_t count, int n);

}  // namespace scalecomm
