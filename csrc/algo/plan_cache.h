// scalecomm algo: compiled plans kept per collective shape and reused.
//
// Contract: a PlanCache maps a PlanKey (collective, algorithm, count, dtype,
// root, whether the schedule finalizes (AVG), segment and pacing, plus one
// free `variant` word for schedule inputs such as the ps server count) to the
// schedule and its compiled plan, built on a miss by the caller's builder.
// World size and rank are the owner's (one cache per group). Keys with
// per-call data that varies freely (all-to-all splits, point-to-point) are
// not cached. The cache holds at most `capacity` entries and evicts the least
// recently used (capacity at least 1); a returned reference stays valid until the next obtain().
// Thread safety: obtain() by one thread at a time (the group's executing
// thread); counters() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>

#include "algo/plan.h"
#include "algo/schedule.h"
#include "comm/wire.h"
#include "core/dtype.h"

namespace scalecomm {

struct Algorithm;

struct PlanKey {
  CollectiveKind kind;
  const Algorithm* algorithm = nullptr;
  int64_t count = 0;
  DataType dtype = DataType::Opaque;
  int root = -1;
  bool finalize = false;
  int64_t segmentElems = 0;
  int64_t paceSegments = 0;
  int64_t variant = 0;

  bool operator==(const PlanKey& o) const {
    return kind == o.kind && algorithm == o.algorithm && count == o.count && dtype == o.dtype && root == o.root &&
           finalize == o.finalize && segmentElems == o.segmentElems && paceSegments == o.paceSegments &&
           variant == o.variant;
  }
};

struct PreparedPlan {
  Schedule schedule;
  Plan plan;
};

class PlanCache {
 public:
  explicit PlanCache(size_t capacity = 256) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry for `key`, built with build() (schedule) and compilePlan on a miss.
  const PreparedPlan& obtain(const PlanKey& key, int worldSize, const std::function<Schedule()>& build);

  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t entries = 0;
  };
  Counters counters() const { return {hits_.load(), misses_.load(), evictions_.load(), entries_.load()}; }
  size_t capacity() const { return capacity_; }

 private:
  struct Hash {
    size_t operator()(const PlanKey& k) const;
  };
  using Lru = std::list<std::pair<PlanKey, PreparedPlan>>;
  size_t capacity_;
  Lru lru_;  // most recently used first
  std::unordered_map<PlanKey, Lru::iterator, Hash> index_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, evictions_{0}, entries_{0};
};

}  // namespace scalecomm
