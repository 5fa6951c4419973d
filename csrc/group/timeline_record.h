// scalecomm group: writing one operation into the timeline.
//
// Contract: a TimelineRow is where one group's operations go (made once per
// group; absent when SCALECOMM_TIMELINE is unset). recordOperation() writes
// the operation's span ("allreduce:ring", category "collective", args seq,
// bytes, group) on the row's thread `tid` of process `pid`, and inside it the executor's per-step spans (send, recv,
// recv+reduce, finalize with step, peer, bytes and the peer's transport;
// wait). Called on the worker thread after the operation ran.
#pragma once

#include <string>

#include "algo/trace.h"
#include "comm/communicator.h"
#include "core/deadline.h"
#include "core/timeline.h"

namespace scalecomm {

struct TimelineRow {
  Timeline* timeline;
  int pid;  // the global rank
  int tid;  // one row per group in this process
  std::string group;
};

void recordOperation(const TimelineRow& row, const std::string& name, uint64_t seq, uint64_t bytes,
                     Clock::time_point start, Clock::time_point end, const ExecTrace& trace, const Communicator& comm,
                     bool failed);

}  // namespace scalecomm
