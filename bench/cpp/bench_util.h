// Helpers the C++ microbenchmarks share: sizes with K/M/G suffixes, a
// millisecond clock, and a "median [min-max]" summary of rounds.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

// "64", "256K", "4M", "1G" (binary units).
inline int64_t parseSize(const std::string& s) {
  int64_t mult = 1;
  std::string t = s;
  const char last = t.empty() ? '0' : t.back();
  if (last == 'K' || last == 'k') mult = int64_t{1} << 10;
  if (last == 'M' || last == 'm') mult = int64_t{1} << 20;
  if (last == 'G' || last == 'g') mult = int64_t{1} << 30;
  if (mult > 1) t.pop_back();
  return std::atoll(t.c_str()) * mult;
}

inline double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "median [min-max]" of one row's rounds, three decimals.
inline std::string summary(const std::vector<double>& v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f [%.3f-%.3f]", median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

}  // namespace bench
