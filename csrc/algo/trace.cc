#include "algo/trace.h"

#include <algorithm>

namespace scalecomm {

const char* ExecTrace::phaseOf(OpKind kind) {
  switch (kind) {
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::RecvReduce: return "recv+reduce";
    case OpKind::Finalize: return "finalize";
  }
  return "?";
}

void ExecTrace::taskStarted(OpKind kind, int step, int peer, int64_t nowNs) {
  auto key = std::make_tuple(step, static_cast<int>(kind), peer);
  auto it = open_.find(key);
  if (it == open_.end()) {
    TraceSpan s;
    s.phase = phaseOf(kind);
    s.step = step;
    s.peer = peer;
    s.startNs = s.endNs = nowNs;
    open_.emplace(key, s);
  }
}

void ExecTrace::taskFinished(OpKind kind, int step, int peer, int64_t bytes, int64_t nowNs) {
  auto key = std::make_tuple(step, static_cast<int>(kind), peer);
  auto it = open_.find(key);
  if (it == open_.end()) {
    taskStarted(kind, step, peer, nowNs);
    it = open_.find(key);
  }
  it->second.endNs = std::max(it->second.endNs, nowNs);
  it->second.bytes += bytes;
}

void ExecTrace::idle(int64_t startNs, int64_t endNs) {
  if (endNs - startNs < minWaitNs_) return;
  if (!waits_.empty() && startNs - waits_.back().endNs < minWaitNs_) {
    waits_.back().endNs = endNs;  // merge with the previous wait
    return;
  }
  TraceSpan s;
  s.phase = "wait";
  s.startNs = startNs;
  s.endNs = endNs;
  waits_.push_back(s);
}

std::vector<TraceSpan> ExecTrace::spans() const {
  std::vector<TraceSpan> out = waits_;
  for (const auto& [key, span] : open_) out.push_back(span);
  std::stable_sort(out.begin(), out.end(),
                   [](const TraceSpan& a, const TraceSpan& b) { return a.startNs < b.startNs; });
  return out;
}

}  // namespace scalecomm
