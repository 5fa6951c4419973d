// scalecomm core: the key-value store used for rendezvous.
//
// Contract: a minimal interface over whatever store the launcher provides (the
// torch adapter wraps c10d::Store; tests use MemoryStore). get() blocks until
// the key exists or the deadline passes, then throws Error(Timeout). Thread
// safe if the implementation is (c10d stores are).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "core/error.h"

namespace scalecomm {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until key is present; throws Error(Timeout) at the deadline.
  virtual std::string get(const std::string& key, const Deadline& deadline) = 0;
  // Atomically adds delta and returns the new value (missing key counts as 0).
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key is present, without blocking.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

// In-process store for C++ tests (virtual ranks as threads).
class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> g(mu_);
    map_[key] = value;
    cv_.notify_all();
  }
  std::string get(const std::string& key, const Deadline& deadline) override {
    std::unique_lock<std::mutex> g(mu_);
    if (!cv_.wait_until(g, deadline.at(), [&] { return map_.count(key) > 0; })) {
      fail(ErrorKind::Timeout, "scalecomm: timed out waiting for store key '", key, "'");
    }
    return map_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> g(mu_);
    int64_t v = map_.count(key) ? std::stoll(map_[key]) : 0;
    v += delta;
    map_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& k : keys)
      if (!map_.count(k)) return false;
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
};

}  // namespace scalecomm
