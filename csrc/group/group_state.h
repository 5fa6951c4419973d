// scalecomm group: poison state shared by a Group and its completion handles.
//
// Contract: records whether the group is poisoned, why and the kind of the
// first failure. poison() is
// idempotent (the first reason wins), closes the communicator's links so peers
// notice at once, and may be called from any thread (worker, a waiter whose
// wait() expired, abort()). A Work may outlive its backend: detach() (called by
// the backend before the communicator dies) makes later poison() calls only
// record the reason. Hooks added with onAbort() run on every aborting
// poison(). Also keeps per-operation counters for stats(), per operation
// name and size bucket (group/stats.h). Thread safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/label.h"
#include "group/stats.h"

namespace scalecomm {

class GroupState {
 public:
  GroupState(int rank, Communicator* comm) : rank_(rank), comm_(comm) {}

  void poison(ErrorKind kind, const std::string& why, bool abortComm) {
    std::lock_guard<std::mutex> g(mu_);
    if (!poisoned_.load()) {
      reason_ = why;
      kind_ = kind;
      poisoned_.store(true, std::memory_order_release);
    }
    if (abortComm) {
      for (auto& hook : abortHooks_) hook();
    }
    if (comm_ != nullptr) {
      if (abortComm) {
        comm_->abort();
      } else {
        comm_->closeLinks();
      }
    }
  }
  bool poisoned() const { return poisoned_.load(std::memory_order_acquire); }
  std::string reason() const {
    std::lock_guard<std::mutex> g(mu_);
    return reason_;
  }
  ErrorKind kind() const {  // of the first failure; meaningful once poisoned()
    std::lock_guard<std::mutex> g(mu_);
    return kind_;
  }
  void detach() {
    std::lock_guard<std::mutex> g(mu_);
    comm_ = nullptr;
  }
  int rank() const { return rank_; }
  // Also run when poison() aborts (e.g. abort the group's NCCL communicators).
  void onAbort(std::function<void()> hook) {
    std::lock_guard<std::mutex> g(mu_);
    abortHooks_.push_back(std::move(hook));
  }

  // Per-name counters of completed operations ("allreduce:rhd", "broadcast", ...).
  struct OpStats {
    uint64_t calls = 0;
    uint64_t bytes = 0;
    double seconds = 0;  // on the worker, from start to completion
  };
  void record(Label name, uint64_t bytes, double seconds) {
    std::lock_guard<std::mutex> g(mu_);
    OpStats& s = stats_[name][statsBucketOf(bytes)];
    s.calls += 1;
    s.bytes += bytes;
    s.seconds += seconds;
  }
  // Per operation name, all sizes together.
  std::map<std::string, OpStats> stats() const {
    std::lock_guard<std::mutex> g(mu_);
    std::map<std::string, OpStats> out;
    for (const auto& [name, buckets] : stats_) {
      OpStats& o = out[name.str()];
      for (const auto& [bucket, s] : buckets) {
        o.calls += s.calls;
        o.bytes += s.bytes;
        o.seconds += s.seconds;
      }
    }
    return out;
  }
  // Per operation name and size bucket, sorted by name, then bucket.
  std::vector<OpBucketStats> bucketStats() const {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<OpBucketStats> out;
    for (const auto& [name, buckets] : stats_) {
      for (const auto& [bucket, s] : buckets) out.push_back({name.str(), bucket, s.calls, s.bytes, s.seconds});
    }
    std::sort(out.begin(), out.end(), [](const OpBucketStats& a, const OpBucketStats& b) {
      return a.name != b.name ? a.name < b.name : a.bucketBytes < b.bucketBytes;
    });
    return out;
  }

 private:
  int rank_;
  mutable std::mutex mu_;
  Communicator* comm_;
  std::atomic<bool> poisoned_{false};
  std::string reason_;
  ErrorKind kind_ = ErrorKind::Internal;
  // Keyed by the interned name (a pointer hash per call), then the size bucket.
  std::unordered_map<Label, std::map<uint64_t, OpStats>> stats_;
  std::vector<std::function<void()>> abortHooks_;
};

}  // namespace scalecomm
