// scalecomm torch adapter: a group's compression state (error-feedback
// residuals and PowerSGD's warm start), one entry per tensor key.
//
// Contract: with(key, fn) runs fn on the key's CompressState under the
// store's lock (the worker, during a compressed allreduce). withOwner(key,
// owner, fn) does the same for state keyed by memory (an address): the
// state belongs to the storage that held that memory when it was made, and
// starts afresh when the key's memory now belongs to another storage (the
// first was freed and its address reused), so no tensor ever gets another
// one's residual. forget(key) drops one entry. snapshot()
// returns copies of every entry (a checkpoint's state_dict); restore()
// replaces all entries; reset() forgets them (residuals restart at zero).
// Thread safe: the worker and the Python thread may call at the same time.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include <c10/core/StorageImpl.h>

#include "compress/compressed_allreduce.h"

namespace scalecomm {

class CompressionStore {
 public:
  template <typename Fn>
  auto with(const std::string& key, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu_);
    return fn(states_[key]);
  }
  using Owner = c10::weak_intrusive_ptr<c10::StorageImpl>;
  template <typename Fn>
  auto withOwner(const std::string& key, const Owner& owner, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = owners_.find(key);
    // A weak reference keeps its StorageImpl allocated, so a storage made
    // since at the same address is a different object: compared by identity.
    if (it == owners_.end() || it->second._unsafe_get_target() != owner._unsafe_get_target()) {
      states_.erase(key);
      owners_.insert_or_assign(key, owner);
    }
    return fn(states_[key]);
  }
  void forget(const std::string& key) {
    std::lock_guard<std::mutex> g(mu_);
    states_.erase(key);
    owners_.erase(key);
  }
  std::map<std::string, CompressState> snapshot() const {
    std::lock_guard<std::mutex> g(mu_);
    return states_;
  }
  void restore(std::map<std::string, CompressState> states) {
    std::lock_guard<std::mutex> g(mu_);
    states_ = std::move(states);
    owners_.clear();  // memory-keyed entries restored from a checkpoint start afresh
  }
  void reset() {
    std::lock_guard<std::mutex> g(mu_);
    states_.clear();
    owners_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, CompressState> states_;
  std::map<std::string, Owner> owners_;  // memory-keyed entries: the storage each belongs to
};

}  // namespace scalecomm
