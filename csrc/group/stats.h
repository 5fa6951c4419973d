// scalecomm group: what a group's operations did, per operation and size bucket.
//
// Contract: an operation's name is "<collective>" or "<collective>:<algorithm>"
// ("allreduce:ring", "broadcast", "send"); a size bucket holds the calls of
// up to `bucketBytes` bytes (a power of two; 0 for empty calls). busbw follows
// nccl-tests: algbw (bytes / seconds) times busbwFactor(collective, world).
// Pure functions; thread safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace scalecomm {

struct OpBucketStats {
  std::string name;          // "allreduce:ring"
  uint64_t bucketBytes = 0;  // calls of up to this many bytes (and more than half of it)
  uint64_t calls = 0;
  uint64_t bytes = 0;  // the calls' outputs, summed
  double seconds = 0;  // the calls' run time on the group's thread, summed
};

// The smallest power of two >= bytes (0 for 0).
uint64_t statsBucketOf(uint64_t bytes);

// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n; allgather,
// reduce_scatter, alltoall (n-1)/n; the rest 1. 1 for n <= 1.
double busbwFactor(std::string_view collective, int worldSize);

// bytes / seconds x busbwFactor, in GB/s (1e9 bytes); 0 where nothing was timed.
double busbwGBps(const OpBucketStats& s, int worldSize);

// A fixed-width table (one row per operation and bucket) for the log.
std::string statsTable(const std::vector<OpBucketStats>& rows, int worldSize);

}  // namespace scalecomm
