// scalecomm torch adapter: the compression state of a torch group: the
// Group's state slots (compress/compression_states.h), plus which storage
// owns each memory-keyed slot.
//
// Contract: slot(key) is the Group's slot of a named key. slotOwnedBy(key,
// owner) is the slot of state keyed by memory (an address): it belongs to
// the storage that held that memory when it was made, and starts afresh
// when the key's memory now belongs to another storage (the first was freed
// and its address reused), so no tensor ever gets another one's residual.
// forget(key) drops one entry. snapshot() copies every entry (a
// checkpoint's state_dict); restore() replaces them (memory-keyed ones
// restored start afresh at their next call: their storage is unknown);
// reset() empties them (residuals restart at zero).
// Thread safety: the Python thread and the submitting thread may call at
// the same time.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <c10/core/StorageImpl.h>

#include "compress/compression_states.h"

namespace scalecomm {

class CompressionStore {
 public:
  explicit CompressionStore(CompressionStates& states) : states_(states) {}
  using Owner = c10::weak_intrusive_ptr<c10::StorageImpl>;
  std::shared_ptr<CompressSlot> slot(const std::string& key) { return states_.slot(key); }
  std::shared_ptr<CompressSlot> slotOwnedBy(const std::string& key, const Owner& owner) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = owners_.find(key);
    // A weak reference keeps its StorageImpl allocated, so a storage made
    // since at the same address is a different object: compared by identity.
    if (it == owners_.end() || it->second._unsafe_get_target() != owner._unsafe_get_target()) {
      states_.forget(key);
      owners_.insert_or_assign(key, owner);
    }
    return states_.slot(key);
  }
  void forget(const std::string& key) {
    std::lock_guard<std::mutex> g(mu_);
    states_.forget(key);
    owners_.erase(key);
  }
  std::map<std::string, CompressState> snapshot() const { return states_.snapshot(); }
  std::map<std::string, AutoChoice> choices() const { return states_.choices(); }
  void restore(std::map<std::string, CompressState> states) {
    std::lock_guard<std::mutex> g(mu_);
    states_.restore(std::move(states));
    owners_.clear();
  }
  void reset() {
    std::lock_guard<std::mutex> g(mu_);
    states_.reset();
    owners_.clear();
  }

 private:
  CompressionStates& states_;  // the Group's, which outlives this store
  std::mutex mu_;              // before the states'
  std::map<std::string, Owner> owners_;
};

}  // namespace scalecomm
