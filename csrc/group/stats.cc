#include "group/stats.h"

#include <cstdio>

namespace scalecomm {

uint64_t statsBucketOf(uint64_t bytes) {
  if (bytes <= 1) return bytes;
  return uint64_t{1} << (64 - __builtin_clzll(bytes - 1));  // O(1): it runs on every call
}

double busbwFactor(std::string_view collective, int worldSize) {
  const auto colon = collective.find(':');
  if (colon != std::string_view::npos) collective = collective.substr(0, colon);
  if (worldSize <= 1) return 1.0;
  const double n = worldSize;
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "allgather" || collective == "reduce_scatter" || collective == "alltoall") return (n - 1) / n;
  return 1.0;
}

double busbwGBps(const OpBucketStats& s, int worldSize) {
  if (s.seconds <= 0) return 0;
  return static_cast<double>(s.bytes) / s.seconds * busbwFactor(s.name, worldSize) / 1e9;
}

std::string statsTable(const std::vector<OpBucketStats>& rows, int worldSize) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-28s %12s %10s %14s %12s %10s %11s\n", "operation", "bucket(B)", "calls", "bytes",
                "seconds", "avg(us)", "busbw(GB/s)");
  out += line;
  for (const OpBucketStats& r : rows) {
    const double avgUs = r.calls > 0 ? r.seconds / static_cast<double>(r.calls) * 1e6 : 0.0;
    std::snprintf(line, sizeof(line), "%-28s %12llu %10llu %14llu %12.6f %10.1f %11.3f\n", r.name.c_str(),
                  static_cast<unsigned long long>(r.bucketBytes), static_cast<unsigned long long>(r.calls),
                  static_cast<unsigned long long>(r.bytes), r.seconds, avgUs, busbwGBps(r, worldSize));
    out += line;
  }
  return out;
}

}  // namespace scalecomm
