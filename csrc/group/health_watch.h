// scalecomm group: the flight recorder, the watchdog and the desync report,
// as one watcher of a group's calls (group/call_watcher.h).
//
// Contract:
// - Records the group's last `traceBuffer` calls (group/flight_recorder.h);
//   0 turns recording, the dump and the desync report off.
// - A watchdog thread, every 100 ms: beats the group's heartbeat; aborts
//   the group (poison, links closed) when a call runs past its timeout plus
//   a grace period (stuck where its own deadline checks cannot see it);
//   and, with a store, keeps the desync protocol going (group/desync.h):
//   asks where every rank is when a call nears its timeout, answers the
//   other ranks' requests, dumps the recorder when it answered one.
// - explain() of a timeout is the desync report naming the lagging rank(s)
//   (without a store: none); failed() dumps the recorder: to
//   SCALECOMM_TRACE_DIR/scalecomm-trace-<group>-rank<r>.json when set, else
//   one log line with this rank's position.
// - stop() ends the watchdog thread (joins it); leak() abandons it.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/store.h"
#include "group/call_watcher.h"
#include "group/desync.h"
#include "group/flight_recorder.h"
#include "group/group_state.h"

namespace scalecomm {

class HealthWatch final : public CallWatcher {
 public:
  struct Settings {
    int rank = 0, size = 1;
    std::string groupName;
    int64_t traceBuffer = 0;
    std::shared_ptr<Store> store;  // null: no desync report
    std::string storePrefix;
  };
  // Starts the watchdog. `heartbeat` runs on it every round.
  HealthWatch(Settings settings, std::shared_ptr<GroupState> state, std::function<void()> heartbeat);
  ~HealthWatch() override;

  void queued(uint64_t id, const WatchedCall& call, Clock::time_point at, const std::string* running) override {
    recorder_.queued(id, call.name, call.number, call.collective, call.bytes, call.timeoutMs, at, running);
  }
  void started(uint64_t id, const std::string& algorithm, Clock::time_point at) override {
    recorder_.started(id, algorithm, at);
  }
  void ended(uint64_t id, const std::string& error, Clock::time_point at) override { recorder_.ended(id, error, at); }
  std::string explain(uint64_t id, const Error& e) override;
  void failed(const std::string& why) override { dump(why); }
  void stop() override;
  void leak() override;

 private:
  void loop();
  void dump(const std::string& why);

  Settings settings_;
  std::shared_ptr<GroupState> state_;
  std::function<void()> heartbeat_;
  FlightRecorder recorder_;
  std::unique_ptr<DesyncProtocol> desync_;  // null without a store or a recorder
  std::mutex dumpMu_;                       // one dump at a time
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unique_ptr<std::thread> thread_;  // last: it uses everything above; a unique_ptr so leak() can abandon it
};

}  // namespace scalecomm
