// scalecomm group: the flight recorder, the last calls of one group.
//
// Contract: keeps the newest `capacity` calls in issue order with their state
// (queued, running, done, failed), sizes, algorithm and timings; older ones
// are dropped. position() says where this rank is in the group's sequence;
// desyncReport() turns every rank's position into one verdict naming the
// lagging rank(s). json() is the per-rank dump that `python -m
// pyscalecomm.trace` merges. Thread safe (one mutex; a few hundred ns per call).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.h"

namespace scalecomm {

struct FlightEntry {
  enum class State { Queued, Running, Done, Failed };
  uint64_t id = 0;          // issue order in this group, from 1 (0: an empty slot)
  uint64_t number = 0;      // the group's sequence number (collectives) or the pair's (point-to-point)
  bool collective = true;   // numbered in the group's sequence
  char name[24] = {};       // "allreduce" (fixed size: recording a call allocates nothing)
  char algorithm[16] = {};  // as chosen ("" until known)
  uint64_t bytes = 0;
  int64_t timeoutMs = 0;
  State state = State::Queued;
  Clock::time_point queuedAt, startedAt, endedAt;
  std::string error;
};

// Where one rank is: the collective it is in (the oldest not finished), else
// the last one it finished.
struct RankPosition {
  int rank = -1;
  bool known = false;   // the rank answered
  bool inside = false;  // in a collective (running or queued), else idle after `number`
  uint64_t number = 0;  // that collective's sequence number (0: none yet)
  std::string name;
  std::string state;  // "running 4.1 s", "queued", "idle"
  std::string encode() const;
  static RankPosition decode(int rank, const std::string& text);
  std::string describe() const;  // "rank 3 is idle after seq 182 allreduce"
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity) : ring_(capacity) {}
  // `id`: the call's, 1, 2, ... in issue order (the caller's count).
  // `at`: when (the caller's clock reading; one per transition is enough).
  // With `running` (its algorithm), the call starts at once (queued and started at `at`).
  void queued(uint64_t id, const std::string& name, uint64_t number, bool collective, uint64_t bytes, int64_t timeoutMs,
              Clock::time_point at = Clock::now(), const std::string* running = nullptr);
  void started(uint64_t id, const std::string& algorithm, Clock::time_point at = Clock::now());
  void ended(uint64_t id, const std::string& error, Clock::time_point at = Clock::now());  // error empty: done
  std::vector<FlightEntry> snapshot() const;
  RankPosition position(int rank) const;
  // The running entry that has exceeded its timeout by `grace`, if any: its description.
  std::string overdue(std::chrono::milliseconds grace) const;
  // The id of the oldest running entry whose timeout is less than
  // lead(timeoutMs) away (0: none).
  uint64_t nearTimeout(std::chrono::milliseconds (*lead)(int64_t timeoutMs)) const;
  std::string json(int rank, int size, const std::string& group, const std::string& why) const;

 private:
  FlightEntry* find(uint64_t id);
  // Visits the entries oldest first without copying them (mu_ held).
  template <typename F>
  void visitLocked(F&& f) const {
    const uint64_t first = nextId_ > ring_.size() ? nextId_ - ring_.size() : 1;
    for (uint64_t id = first; id < nextId_; ++id) {
      const FlightEntry& e = ring_[(id - 1) % ring_.size()];
      if (e.id == id) f(e);
    }
  }
  std::vector<FlightEntry> ring_;  // entry `id` lives in slot (id - 1) % capacity
  mutable std::mutex mu_;
  uint64_t nextId_ = 1;  // one past the newest id recorded
  Clock::time_point origin_ = Clock::now();
};

// One verdict from every rank's position: who lags and where the others wait.
std::string desyncReport(const std::vector<RankPosition>& positions);

}  // namespace scalecomm
