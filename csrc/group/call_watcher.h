// scalecomm group: what observes a group's calls (the flight recorder with
// its watchdog and desync report, NVTX ranges).
//
// Contract: a Group tells each of its watchers about every call it numbers,
// under one id per call (1, 2, ... in issue order):
// - queued(id, call, at, running): the call entered the group's order (on
//   the submitting thread, in id order); with `running` (its algorithm) it
//   also started, at `at`, on that thread;
// - started(id, algorithm, at), then ended(id, error, at) (error empty:
//   done) on the executing thread. A call ends exactly once; one that was
//   not run (the group already unusable) may end without starting;
// - explain(id, error): a call failed with `error` and the error is about
//   to be returned: what the watcher adds to it (the desync report names
//   the lagging rank), empty for nothing. Called before ended(id);
// - failed(why): that failure is about to poison the group.
// Watchers are added before the group's first call and live as long as the
// group. stop() runs once, at shutdown, after the last call ended (a
// watcher's threads end there); in a forked child leak() runs instead (the
// threads do not exist there and must not be joined). Every method may be
// called from any of the group's threads: a watcher is thread safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/deadline.h"
#include "core/error.h"

namespace scalecomm {

// What a watcher sees of a call when it is queued.
struct WatchedCall {
  const std::string& name;  // "allreduce:ring", "send", ...
  uint64_t number;          // the group's sequence number, or the pair's for point-to-point
  bool collective;          // numbered in the group's sequence
  uint64_t bytes;
  int64_t timeoutMs;
};

class CallWatcher {
 public:
  virtual ~CallWatcher() = default;
  virtual void queued(uint64_t id, const WatchedCall& call, Clock::time_point at, const std::string* running) = 0;
  virtual void started(uint64_t id, const std::string& algorithm, Clock::time_point at) = 0;
  virtual void ended(uint64_t id, const std::string& error, Clock::time_point at) = 0;
  virtual std::string explain(uint64_t, const Error&) { return {}; }
  virtual void failed(const std::string&) {}
  virtual void stop() {}
  virtual void leak() {}
};

}  // namespace scalecomm
