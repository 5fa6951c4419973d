// scalecomm core: deadlines, and time elapsed on the steady clock.
//
// Contract: a Deadline is a point on the steady clock after which a blocking
// call must give up. Every blocking call in scalecomm takes one. Value type.
// secondsSince(t0): seconds from t0 to now on the same clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace scalecomm {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class Deadline {
 public:
  static Deadline after(std::chrono::milliseconds ms, Clock::time_point from = Clock::now()) {
    return Deadline(
        ms.count() >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - from).count()
            ? Clock::time_point::max()
            : from + ms);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= at_; }
  int64_t remainingMs() const {
    if (at_ == Clock::time_point::max()) return INT64_MAX;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return left > 0 ? left : 0;
  }
  Clock::time_point at() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace scalecomm
