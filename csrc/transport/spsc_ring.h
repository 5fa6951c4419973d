// scalecomm transport: single-producer single-consumer byte ring on raw memory.
//
// Contract: the ring lives in memory the caller provides (heap for loopback,
// a shared-memory segment for shm): a RingControl followed by `capacity` data
// bytes; capacity is a multiple of 64. head and tail count bytes ever written /
// consumed, so head - tail is the fill level. One producer thread calls write(),
// one consumer thread calls readable()/consume(); either may set the closed flag.
// Memory ordering: data is published by a release store of head and acquired
// by the consumer; space is returned by a release store of tail.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace scalecomm {

struct RingControl {
  alignas(64) std::atomic<uint64_t> head;    // written by producer
  alignas(64) std::atomic<uint64_t> tail;    // written by consumer
  alignas(64) std::atomic<uint32_t> closed;  // 0: open; else 1 + the rank that closed it first
  uint32_t reserved;                         // keeps the shared layout
};
static_assert(sizeof(RingControl) == 192, "RingControl layout is shared between processes");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "need lock-free 64-bit atomics for shm");

class SpscRing {
 public:
  SpscRing() = default;
  SpscRing(RingControl* ctl, uint8_t* data, uint64_t capacity) : ctl_(ctl), data_(data), cap_(capacity) {}

  static void initialize(RingControl* ctl) {
    new (&ctl->head) std::atomic<uint64_t>(0);
    new (&ctl->tail) std::atomic<uint64_t>(0);
    new (&ctl->closed) std::atomic<uint32_t>(0);
    ctl->reserved = 0;
  }

  // Writes up to `bytes`; writes nothing while less than min(bytes, capacity/8)
  // is free, so producer and consumer move large pieces instead of trickling
  // a few bytes per call when the ring is nearly full (silly-window avoidance).
  size_t write(const void* src, size_t bytes) {
    uint64_t head = ctl_->head.load(std::memory_order_relaxed);
    uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
    uint64_t space = cap_ - checkedFill(head, tail);
    if (space < minChunk(bytes) || bytes == 0) return 0;
    size_t n = bytes < space ? bytes : static_cast<size_t>(space);
    uint64_t pos = head % cap_;
    size_t first = static_cast<size_t>(cap_ - pos) < n ? static_cast<size_t>(cap_ - pos) : n;
    std::memcpy(data_ + pos, src, first);
    if (n > first) std::memcpy(data_, static_cast<const uint8_t*>(src) + first, n - first);
    ctl_->head.store(head + n, std::memory_order_release);
    return n;
  }

  // Contiguous readable span (may be shorter than the fill level at wrap-around).
  std::pair<const uint8_t*, size_t> readable() const {
    uint64_t tail = ctl_->tail.load(std::memory_order_relaxed);
    uint64_t head = ctl_->head.load(std::memory_order_acquire);
    uint64_t avail = checkedFill(head, tail);
    uint64_t pos = tail % cap_;
    uint64_t contiguous = cap_ - pos < avail ? cap_ - pos : avail;
    return {data_ + pos, static_cast<size_t>(contiguous)};
  }

  // Copies up to n readable bytes (across the wrap) without consuming them.
  size_t peek(void* out, size_t n) const {
    uint64_t tail = ctl_->tail.load(std::memory_order_relaxed);
    uint64_t head = ctl_->head.load(std::memory_order_acquire);
    uint64_t avail = checkedFill(head, tail);
    size_t take = static_cast<size_t>(avail < n ? avail : n);
    uint64_t pos = tail % cap_;
    size_t first = static_cast<size_t>(cap_ - pos < take ? cap_ - pos : take);
    std::memcpy(out, data_ + pos, first);
    std::memcpy(static_cast<uint8_t*>(out) + first, data_, take - first);
    return take;
  }

  void consume(size_t n) {
    ctl_->tail.store(ctl_->tail.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  bool closed() const { return ctl_->closed.load(std::memory_order_acquire) != 0; }
  // Meaningful once closed(): the rank that closed the link first.
  uint32_t closedBy() const { return ctl_->closed.load(std::memory_order_acquire) - 1; }
  // Both ends may close at once: the first one is recorded (one atomic word,
  // no separate field that the two would race on).
  void close(uint32_t byRank) {
    uint32_t open = 0;
    ctl_->closed.compare_exchange_strong(open, byRank + 1, std::memory_order_acq_rel);
  }
  // Bytes write() could take now.
  uint64_t space() const {
    return cap_ - checkedFill(ctl_->head.load(std::memory_order_relaxed), ctl_->tail.load(std::memory_order_acquire));
  }
  // What write() needs free before it takes anything from a message of `bytes`.
  uint64_t minChunk(size_t bytes) const { return bytes < cap_ / 8 ? bytes : cap_ / 8; }
  bool empty() const {
    return ctl_->head.load(std::memory_order_acquire) == ctl_->tail.load(std::memory_order_relaxed);
  }

 private:
  // head - tail, checked: the other end's index lives in memory it can write,
  // so a fill level beyond the capacity (a corrupted or foreign peer) must not
  // reach pointer arithmetic.
  uint64_t checkedFill(uint64_t head, uint64_t tail) const {
    const uint64_t fill = head - tail;
    if (fill > cap_) {
      fail(ErrorKind::Io, "scalecomm shm: inconsistent ring indices (written ", head, ", consumed ", tail,
           ", capacity ", cap_, "): the peer's memory was corrupted or it is not a scalecomm process");
    }
    return fill;
  }

  RingControl* ctl_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t cap_ = 0;
};

}  // namespace scalecomm
