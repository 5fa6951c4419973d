// scalecomm algo: what one execution of a plan spent its time on.
//
// Contract: an ExecTrace, when handed to the executor (CollectiveOptions::trace),
// collects spans per (step, phase, peer): phase is "send", "recv",
// "recv+reduce" (reduction fused with the receive) or "finalize"; a span runs
// from the first of its tasks starting to the last finishing, with the bytes
// moved. Idle periods of the executor (nothing could move) longer than
// minWaitNs become "wait" spans. Timestamps are steady-clock nanoseconds.
// Pure bookkeeping: no I/O; one thread (the executor's) writes, the caller
// reads after execute() returns. Cost when absent: one pointer test per task.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "algo/schedule.h"

namespace scalecomm {

struct TraceSpan {
  std::string phase;
  int step = -1;  // -1 for wait
  int peer = -1;
  int64_t startNs = 0, endNs = 0;
  int64_t bytes = 0;
};

class ExecTrace {
 public:
  explicit ExecTrace(int64_t minWaitNs = 20000) : minWaitNs_(minWaitNs) {}

  void taskStarted(OpKind kind, int step, int peer, int64_t nowNs);
  void taskFinished(OpKind kind, int step, int peer, int64_t bytes, int64_t nowNs);
  void idle(int64_t startNs, int64_t endNs);

  // Spans in start order.
  std::vector<TraceSpan> spans() const;

 private:
  static const char* phaseOf(OpKind kind);
  int64_t minWaitNs_;
  std::map<std::tuple<int, int, int>, TraceSpan> open_;  // (step, kind, peer)
  std::vector<TraceSpan> waits_;
};

}  // namespace scalecomm
