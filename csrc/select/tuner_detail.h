// scalecomm select: the online tuner's arithmetic on measured times, shared
// by select/tuner.cc and select/tuner_rules.cc (internal; not an API).
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "select/tuner.h"

namespace scalecomm::tuner_detail {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The median of `v` with its confidence interval (lo, hi).
struct Summary {
  double median = 0, lo = 0, hi = 0;
};
inline Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const auto [a, b] = medianInterval(static_cast<int>(v.size()));
  s.median = median(v);
  s.lo = v[a];
  s.hi = v[b];
  return s;
}

inline std::string us(double seconds) {
  std::ostringstream o;
  o.precision(seconds < 1e-3 ? 3 : 5);
  o << seconds * 1e6;
  return o.str();
}

}  // namespace scalecomm::tuner_detail
