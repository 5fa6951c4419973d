// scalecomm torch adapter: a group's compression state (error-feedback
// residuals and PowerSGD's warm start), one entry per tensor key.
//
// Contract: with(key, fn) runs fn on the key's CompressState under the
// store's lock (the worker, during a compressed allreduce). snapshot()
// returns copies of every entry (a checkpoint's state_dict); restore()
// replaces all entries; reset() forgets them (residuals restart at zero).
// Thread safe: the worker and the Python thread may call at the same time.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "compress/compressed_allreduce.h"

namespace scalecomm {

class CompressionStore {
 public:
  template <typename Fn>
  auto with(const std::string& key, Fn&& fn) {
    std::lock_guard<std::mutex> g(mu_);
    return fn(states_[key]);
  }
  std::map<std::string, CompressState> snapshot() const {
    std::lock_guard<std::mutex> g(mu_);
    std::map<std::string, CompressState> out;
    for (const auto& [k, s] : states_) {
      CompressState c;
      if (s.residual.defined()) c.residual = s.residual.clone();
      if (s.q.defined()) c.q = s.q.clone();
      c.steps = s.steps;
      out.emplace(k, c);
    }
    return out;
  }
  void restore(std::map<std::string, CompressState> states) {
    std::lock_guard<std::mutex> g(mu_);
    states_ = std::move(states);
  }
  void reset() {
    std::lock_guard<std::mutex> g(mu_);
    states_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, CompressState> states_;
};

}  // namespace scalecomm
