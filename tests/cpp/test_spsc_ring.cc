// The shared-memory ring trusts nothing the other end can write: indices
// that claim more than the capacity raise instead of reaching memcpy.
#include <vector>

#include "core/error.h"
#include "harness.h"
#include "transport/spsc_ring.h"

using namespace scalecomm;

namespace {

struct HeapRing {
  explicit HeapRing(uint64_t cap) : mem(sizeof(RingControl) + cap) {
    ctl = reinterpret_cast<RingControl*>(mem.data());
    SpscRing::initialize(ctl);
    ring = SpscRing(ctl, mem.data() + sizeof(RingControl), cap);
  }
  std::vector<uint8_t> mem;
  RingControl* ctl;
  SpscRing ring;
};

template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(bytes_round_trip_across_the_wrap) {
  HeapRing r(256);
  std::vector<uint8_t> in(200), out(200);
  for (int round = 0; round < 5; ++round) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + round);
    CHECK_EQ(r.ring.write(in.data(), in.size()), in.size());
    CHECK_EQ(r.ring.peek(out.data(), out.size()), out.size());
    CHECK(in == out);
    r.ring.consume(out.size());
    CHECK(r.ring.empty());
  }
}

TEST(a_fill_level_beyond_the_capacity_is_refused) {
  HeapRing r(256);
  std::vector<uint8_t> buf(4096);
  r.ctl->head.store(10000);  // the producer claims 10000 unread bytes in a 256-byte ring
  const std::string peek = errorOf([&] { r.ring.peek(buf.data(), buf.size()); });
  CHECK(peek.find("inconsistent ring indices (written 10000, consumed 0, capacity 256)") != std::string::npos);
  CHECK(errorOf([&] { r.ring.readable(); }).find("inconsistent ring indices") != std::string::npos);
  r.ctl->head.store(0);
  r.ctl->tail.store(5000);  // the consumer claims to have read what was never written
  CHECK(errorOf([&] { r.ring.write(buf.data(), buf.size()); }).find("inconsistent ring indices") != std::string::npos);
}

TEST_MAIN()
