// scalecomm torch adapter: writing one operation into the timeline.
//
// Contract: recordOperation() writes the operation's span ("allreduce:ring",
// category "collective", args seq, bytes, group) on thread row `tid` of
// process row `pid`, and inside it the executor's per-step spans (send, recv,
// recv+reduce, finalize with step, peer, bytes and the peer's transport;
// wait). Called on the worker thread after the operation ran.
#pragma once

#include <string>

#include "algo/trace.h"
#include "comm/communicator.h"
#include "core/deadline.h"
#include "core/timeline.h"

namespace scalecomm {

void recordOperation(Timeline& timeline, int pid, int tid, const std::string& name, const std::string& group,
                     uint64_t seq, uint64_t bytes, Clock::time_point start, Clock::time_point end,
                     const ExecTrace& trace, const Communicator& comm, bool failed);

}  // namespace scalecomm
