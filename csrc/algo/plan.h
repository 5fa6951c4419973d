// scalecomm algo: a Plan is a Schedule cut into segments, with dependencies.
//
// Contract: compilePlan() splits every op of a schedule into segments of at
// most `segmentElems` elements (empty blocks produce no tasks) and gives each
// task the earlier tasks it must wait for, by data hazards on (block, segment)
// cells in program order (step, op, segment):
//   read-after-write  a Send waits for the last Recv/RecvReduce/Finalize of its cell;
//   write-after-read  a Recv* / Finalize waits for earlier Sends of its cell;
//   write-after-write and waits for the cell's previous writer.
// Nothing else is ordered, so steps overlap segment by segment (pipelining),
// except for pacing: with paceSegments W > 0, in a step whose ops are one send
// and one receive (a pairwise exchange: ring, recursive halving/doubling,
// chain), the send of segment s and the receive of segment s both wait for
// the receive's segment s - W (the send's clamped to the receive's last). A
// rank then runs at most W segments ahead of its peer within a step, so ranks
// that enter a collective apart fall back into step there instead of carrying
// the offset into the next call (docs/architecture.md, "Pacing"). On the stream
// channel the receive's edge changes nothing (a peer's receives run in
// order); on a queued channel it puts W segments of the step in each group,
// both ends alike. Every added edge points to a smaller segment of the same
// step: no deadlock.
// Per peer, sends and receives keep program order (the link is FIFO), which
// both ends derive identically from the same schedule arithmetic.
// Pure computation; value types.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/schedule.h"

namespace scalecomm {

struct Task {
  OpKind kind;
  int peer;
  int step;
  int block;
  int wireBlock;  // block id in the header (see ScheduleOp::wire)
  int64_t segment;
  int64_t offset;  // elements from the start of the block
  int64_t count;   // elements
  std::vector<int32_t> deps;
  // Pacing's edge of a receive (below): the task that must be done first.
  // Kept apart from `deps` because a queued channel may issue a receive-reduce
  // next to its hazard dependencies (its reduction is queued after them) but
  // never next to its pacing one. -1: none.
  int32_t pacedBy = -1;
};

struct Plan {
  std::vector<Task> tasks;
  std::vector<std::vector<int32_t>> sendQueue;  // per peer, program order
  std::vector<std::vector<int32_t>> recvQueue;  // per peer, program order
  std::vector<int32_t> localQueue;              // Finalize tasks, program order
  std::vector<int> peers;                       // peers with any traffic
  std::vector<int64_t> blockCounts;
};

Plan compilePlan(const Schedule& schedule, int worldSize, int64_t segmentElems, int64_t paceSegments = 0);

}  // namespace scalecomm
