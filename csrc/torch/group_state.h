// scalecomm torch adapter: state shared by a backend and its Work handles.
//
// Contract: records whether the group is poisoned and why. poison() is
// idempotent (the first reason wins), closes the communicator's links so peers
// notice at once, and may be called from any thread (worker, a waiter whose
// wait() expired, abort()). A Work may outlive its backend: detach() (called by
// the backend before the communicator dies) makes later poison() calls only
// record the reason. Thread safe.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace scalecomm {

class GroupState {
 public:
  GroupState(int rank, Communicator* comm) : rank_(rank), comm_(comm) {}

  void poison(const std::string& why, bool abortComm) {
    std::lock_guard<std::mutex> g(mu_);
    if (!poisoned_.load()) {
      reason_ = why;
      poisoned_.store(true, std::memory_order_release);
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
  void detach() {
    std::lock_guard<std::mutex> g(mu_);
    comm_ = nullptr;
  }
  int rank() const { return rank_; }

 private:
  int rank_;
  mutable std::mutex mu_;
  Communicator* comm_;
  std::atomic<bool> poisoned_{false};
  std::string reason_;
};

}  // namespace scalecomm
