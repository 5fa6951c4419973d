// scalecomm compress: the link as compress="auto" sees it: seconds of
// communication against bus bytes, t = alpha + beta x bytes.
//
// Contract: fitted (least squares, alpha, beta >= 0) over each
// power-of-two size class of the samples added (the group's own compressed
// calls): the class's mean bytes and the lower quartile of its recent times
// (a TimeWindow, so the fit follows the link and not the waits for late
// peers). One size class: a line through the origin; times that fall with
// size: a flat link (beta 0). Thread safe.
#pragma once

#include <map>
#include <mutex>

#include "compress/auto_choice.h"

namespace scalecomm {

class LinkFit {
 public:
  // fresh: the sample replaces its class's times (a link known to have changed).
  void add(double busBytes, double seconds, bool fresh = false);
  double predict(double busBytes) const;
  double alpha() const;
  double beta() const;  // seconds per bus byte

 private:
  void refit();  // under mu_
  mutable std::mutex mu_;
  struct SizeClass {
    double bytes = 0;    // mean (EWMA) of the class's calls
    TimeWindow seconds;  // their recent times
  };
  std::map<int, SizeClass> classes_;  // by log2(bus bytes)
  double alpha_ = 0, beta_ = 0;
};

}  // namespace scalecomm
