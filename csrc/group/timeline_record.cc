#include "group/timeline_record.h"

#include "core/error.h"

namespace scalecomm {

namespace {

int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void recordOperation(const TimelineRow& row, const std::string& name, uint64_t seq, uint64_t bytes,
                     Clock::time_point start, Clock::time_point end, const ExecTrace& trace, const Communicator& comm,
                     bool failed) {
  Timeline& timeline = *row.timeline;
  const int pid = row.pid, tid = row.tid;
  const std::string& group = row.group;
  const auto colon = name.find(':');
  const std::string algorithm = colon == std::string::npos ? "" : name.substr(colon + 1);
  timeline.span(name, "collective", pid, tid, ns(start), ns(end),
                {{"seq", std::to_string(seq)},
                 {"bytes", std::to_string(bytes)},
                 {"algorithm", jsonString(algorithm)},
                 {"group", jsonString(group)},
                 {"failed", failed ? "true" : "false"}});
  for (const TraceSpan& s : trace.spans()) {
    std::vector<std::pair<std::string, std::string>> args;
    if (s.phase != "wait") {
      args = {{"step", std::to_string(s.step)}, {"bytes", std::to_string(s.bytes)}};
      if (s.peer >= 0) {
        args.emplace_back("peer", std::to_string(s.peer));
        args.emplace_back("transport", jsonString(comm.hasLink(s.peer) ? comm.link(s.peer).kind() : "?"));
      }
    }
    args.emplace_back("algorithm", jsonString(algorithm));
    timeline.span(s.phase, "step", pid, tid, s.startNs, s.endNs, args);
  }
  timeline.flush();
}

}  // namespace scalecomm
