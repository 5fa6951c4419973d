// scalecomm algo: runs a schedule step by step on a queue-ordered device
// transport (NCCL on a CUDA stream), the GPU counterpart of executor.h.
//
// Contract: runSteps() issues, for each schedule step in order, every send and
// receive of the step as one group (StepTransport::exchange; receive-reduce
// ops receive into scratch), then the step's reductions and finalizes through
// `reducer`. Transport and reducer must execute their work in issue order on
// one queue (on a GPU: NCCL's grouped send/recv and our kernels on the group's
// stream); runSteps only issues and returns, so the caller waits on the queue.
// Scratch memory comes from the transport once, sized for the largest step
// (the sum of its receive-reduce blocks), and is reused across steps, which
// queue order makes safe. The reducer's `src` (scratch) stays valid until the
// next step's exchange, so a queuing reducer need not copy it here.
// Checked precondition: no step sends a block that the same step overwrites
// (plain receive) or has reduced or finalized before the send (the exchange
// goes first); Error(InvalidArgument) names the algorithm, step and block. No wire headers: shape mismatches across
// ranks are the caller's to rule out (NCCL cannot see them). Thread safety: one call at a time per transport.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/schedule.h"
#include "comm/reducer.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

struct StepOp {
  bool send;
  int peer;
  void* data;
  int64_t bytes;
};

// Point-to-point exchange of one schedule step, queued in issue order.
class StepTransport {
 public:
  virtual ~StepTransport() = default;
  // All sends and receives of one step, issued as one group (every op may
  // progress before any completes). Per peer, ops keep the schedule's order.
  virtual void exchange(const std::vector<StepOp>& ops) = 0;
  // At least `bytes` of memory the transport can receive into; valid until
  // the next call.
  virtual void* scratch(int64_t bytes) = 0;
};

struct StepRun {
  DataType dtype;
  ReduceOp op = ReduceOp::Sum;
  int64_t finalizeDivisor = 1;  // AVG
};

// Bytes of scratch the largest step of `s` needs.
int64_t stepScratchBytes(const Schedule& s, DataType dtype);

void runSteps(const Schedule& s, const std::vector<uint8_t*>& blockPtrs, const StepRun& run, StepTransport& transport,
              Reducer& reducer);

}  // namespace scalecomm
