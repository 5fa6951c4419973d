#include "algo/plan_cache.h"

namespace scalecomm {

size_t PlanCache::Hash::operator()(const PlanKey& k) const {
  size_t h = std::hash<const void*>()(k.algorithm);
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  mix(static_cast<uint64_t>(k.kind));
  mix(static_cast<uint64_t>(k.count));
  mix(static_cast<uint64_t>(k.dtype));
  mix(static_cast<uint64_t>(k.root + 1));
  mix(k.finalize ? 1 : 0);
  mix(static_cast<uint64_t>(k.segmentElems));
  mix(static_cast<uint64_t>(k.paceSegments));
  mix(static_cast<uint64_t>(k.variant));
  return h;
}

const PreparedPlan& PlanCache::obtain(const PlanKey& key, int worldSize, const std::function<Schedule()>& build) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  Schedule s = build();
  Plan p = compilePlan(s, worldSize, key.segmentElems, key.paceSegments);
  if (lru_.size() >= capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  lru_.emplace_front(key, PreparedPlan{std::move(s), std::move(p)});
  index_.emplace(key, lru_.begin());
  entries_.store(lru_.size(), std::memory_order_relaxed);
  return lru_.front().second;
}

}  // namespace scalecomm
