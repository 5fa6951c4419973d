// scalecomm torch adapter: c10d::Store seen as a scalecomm::Store.
//
// Contract: forwards set/add/check; get() waits in slices of at most one
// second (so the scalecomm deadline, not the store's own timeout, decides) and
// throws Error(Timeout) at the deadline. A store that cannot be reached any
// more (its server process died: c10d's DistNetworkError) throws Error(Io) at
// once, from every method. Thread safe as the c10d store is.
#pragma once

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/store.h"

namespace scalecomm {

class C10dStoreAdapter : public Store {
 public:
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    reachable(key, [&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }

  std::string get(const std::string& key, const Deadline& deadline) override {
    for (;;) {
      try {
        auto slice = std::chrono::milliseconds(std::clamp<int64_t>(deadline.remainingMs(), 1, 1000));
        store_->wait({key}, slice);
        auto v = store_->get(key);
        return std::string(v.begin(), v.end());
      } catch (const c10::DistNetworkError& e) {
        unreachable(key, e);
      } catch (const c10::Error&) {  // this slice's wait timed out
        if (deadline.expired()) fail(ErrorKind::Timeout, "timed out waiting for store key '", key, "'");
      }
    }
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    reachable(key, [&] { v = store_->add(key, delta); });
    return v;
  }

  bool check(const std::vector<std::string>& keys) override {
    bool v = false;
    reachable(keys.empty() ? std::string() : keys.front(), [&] { v = store_->check(keys); });
    return v;
  }

 private:
  template <typename F>
  void reachable(const std::string& key, F&& f) {
    try {
      f();
    } catch (const c10::DistNetworkError& e) {
      unreachable(key, e);
    }
  }
  [[noreturn]] static void unreachable(const std::string& key, const c10::DistNetworkError& e) {
    fail(ErrorKind::Io, "the store cannot be reached (key '", key,
         "'): its server is gone (with env:// or torchrun it lives in rank 0's or the agent's process, "
         "which may have died): ",
         e.what_without_backtrace());
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace scalecomm
