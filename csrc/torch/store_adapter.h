// scalecomm torch adapter: c10d::Store seen as a scalecomm::Store.
//
// Contract: forwards set/add/check; get() waits in slices of at most one
// second (so the scalecomm deadline, not the store's own timeout, decides) and
// throws Error(Timeout) at the deadline. Thread safe as the c10d store is.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>

#include "core/store.h"

namespace scalecomm {

class C10dStoreAdapter : public Store {
 public:
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  std::string get(const std::string& key, const Deadline& deadline) override {
    for (;;) {
      try {
        auto slice = std::chrono::milliseconds(std::clamp<int64_t>(deadline.remainingMs(), 1, 1000));
        store_->wait({key}, slice);
        auto v = store_->get(key);
        return std::string(v.begin(), v.end());
      } catch (const c10::Error&) {
        if (deadline.expired()) fail(ErrorKind::Timeout, "timed out waiting for store key '", key, "'");
      }
    }
  }

  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }

  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace scalecomm
