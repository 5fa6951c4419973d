#include "comm/reducer.h"

#include <algorithm>
#include <cstring>

#include "core/elementwise.h"
#include "core/error.h"
#include "core/half_x86.h"
#include "core/type_dispatch.h"

namespace scalecomm {

namespace {

// fp16 and bf16 sums (Sum, Avg, PremulSum add) with x86's AVX2 and F16C
// where the CPU has them (core/half_x86.h: the same bits but an fp16 NaN's
// payload); the portable loops below convert in SSE2 integer code, 2-7x
// slower.
bool halvesInHardware(DataType dtype, ReduceOp op) {
  static const bool available = x86HalvesAvailable();
  return available && (dtype == DataType::Float16 || dtype == DataType::BFloat16) &&
         (op == ReduceOp::Sum || op == ReduceOp::Avg || op == ReduceOp::PremulSum);
}
uint16_t* halves(void* p) { return static_cast<uint16_t*>(p); }

// The loops' functions start on a cache line, so where their hot loops fall
// does not move with unrelated changes elsewhere in the library: measured, a
// different link layout alone made the 4 MiB ring 8-10% slower (the reduce
// loop's share of a profile 10% against 7.5%), and both layouts ran at the
// faster speed once aligned.
//
// d = op(a, b) element-wise; kInPlace: a is d (a loop the compiler vectorises
// without an aliasing check).
template <bool kInPlace>
[[gnu::aligned(64)]] void reduceLoop(void* dst, const void* a, const void* b, int64_t count, DataType dtype,
                                     ReduceOp op) {
  SC_CHECK(reduceOpSupports(op, dtype), reduceOpName(op), " on ", dataTypeName(dtype));
  if (halvesInHardware(dtype, op)) {
    const void* in[] = {a, b};
    return halfFold(dtype, halves(dst), nullptr, in, 2, count, 1);
  }
  dispatchReduction(dtype, op, [&](auto tag, auto opc) {
    using Tag = decltype(tag);
    using E = typename Storage<Tag>::Elem;
    constexpr ReduceOp Op = decltype(opc)::value;
    auto* d = static_cast<E*>(dst);
    const auto* y = static_cast<const E*>(b);
    if constexpr (kInPlace) {
      for (int64_t i = 0; i < count; ++i) d[i] = reduceElement<Tag, Op>(d[i], y[i]);
    } else {
      const auto* x = static_cast<const E*>(a);
      for (int64_t i = 0; i < count; ++i) d[i] = reduceElement<Tag, Op>(x[i], y[i]);
    }
  });
}

// d[i] = e[i] = op(a[i], b[i]), where e is a (kEIsA) or b, and d overlaps
// none of them: foldInto's two-input case in one loop (a tile would add a
// pass through L1 to the two writes).
template <bool kEIsA>
[[gnu::aligned(64)]] void reduceLoopTwice(void* dst, void* also, const void* other, int64_t count, DataType dtype,
                                          ReduceOp op) {
  SC_CHECK(reduceOpSupports(op, dtype), reduceOpName(op), " on ", dataTypeName(dtype));
  if (halvesInHardware(dtype, op)) {
    const void* in[] = {kEIsA ? also : other, kEIsA ? other : also};
    return halfFold(dtype, halves(dst), halves(also), in, 2, count, 1);
  }
  dispatchReduction(dtype, op, [&](auto tag, auto opc) {
    using Tag = decltype(tag);
    using E = typename Storage<Tag>::Elem;
    constexpr ReduceOp Op = decltype(opc)::value;
    E* __restrict__ d = static_cast<E*>(dst);
    auto* e = static_cast<E*>(also);
    const E* __restrict__ y = static_cast<const E*>(other);
    for (int64_t i = 0; i < count; ++i)
      d[i] = e[i] = kEIsA ? reduceElement<Tag, Op>(e[i], y[i]) : reduceElement<Tag, Op>(y[i], e[i]);
  });
}

// foldInto, a tile at a time: the tile's result builds up in a buffer of its
// own, which stays in L1 and aliases no input (so each pass vectorises), and
// is then written to both outputs.
constexpr int64_t kFoldTileBytes = 8192;

// tile[i] = op(tile[i], z[i]): a pass of foldLoop over one of its later
// inputs, a function of its own so that the vectoriser takes the loop alone,
// not as the inner loop of the passes over the inputs.
template <typename Tag, ReduceOp Op>
[[gnu::noinline]] void foldPass(typename Storage<Tag>::Elem* __restrict__ tile,
                                const typename Storage<Tag>::Elem* __restrict__ z, int64_t m) {
  for (int64_t i = 0; i < m; ++i) tile[i] = reduceElement<Tag, Op>(tile[i], z[i]);
}

[[gnu::aligned(64)]] void foldLoop(void* dst, void* also, const void* const* in, int k, int64_t count, DataType dtype,
                                   ReduceOp op, int64_t divisor) {
  SC_CHECK(reduceOpSupports(op, dtype), reduceOpName(op), " on ", dataTypeName(dtype));
  if (halvesInHardware(dtype, op)) {
    return halfFold(dtype, halves(dst), halves(also), in, k, count, divisor);
  }
  dispatchReduction(dtype, op, [&](auto tag, auto opc) {
    using Tag = decltype(tag);
    using E = typename Storage<Tag>::Elem;
    constexpr ReduceOp Op = decltype(opc)::value;
    constexpr int64_t kTile = kFoldTileBytes / static_cast<int64_t>(sizeof(E));
    alignas(64) E tile[kTile];
    for (int64_t at = 0; at < count; at += kTile) {
      const int64_t m = std::min(kTile, count - at);
      const E* x = static_cast<const E*>(in[0]) + at;
      const E* y = static_cast<const E*>(in[1]) + at;
      for (int64_t i = 0; i < m; ++i) tile[i] = reduceElement<Tag, Op>(x[i], y[i]);
      for (int j = 2; j < k; ++j) foldPass<Tag, Op>(tile, static_cast<const E*>(in[j]) + at, m);
      if (divisor > 1)
        for (int64_t i = 0; i < m; ++i) tile[i] = divideElement<Tag>(tile[i], divisor);
      std::memcpy(static_cast<E*>(dst) + at, tile, static_cast<size_t>(m) * sizeof(E));
      if (also != nullptr) std::memcpy(static_cast<E*>(also) + at, tile, static_cast<size_t>(m) * sizeof(E));
    }
  });
}

}  // namespace

void foldInto(void* dst, void* also, const void* const* in, int k, int64_t count, DataType dtype, ReduceOp op,
              int64_t divisor) {
  SC_CHECK(k >= 2, "foldInto: ", k, " inputs");
  if (k == 2 && divisor <= 1) {
    if (also == nullptr && dst != in[1]) return reduceFrom(dst, in[0], in[1], count, dtype, op);
    if (also == in[0]) return reduceLoopTwice<true>(dst, also, in[1], count, dtype, op);
    if (also == in[1]) return reduceLoopTwice<false>(dst, also, in[0], count, dtype, op);
  }
  foldLoop(dst, also, in, k, count, dtype, op, divisor);
}

void reduceInto(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  reduceLoop<true>(dst, dst, src, count, dtype, op);
}

void reduceFrom(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op) {
  if (dst == a) return reduceLoop<true>(dst, a, b, count, dtype, op);
  reduceLoop<false>(dst, a, b, count, dtype, op);
}

void scaleInPlace(void* data, int64_t count, DataType dtype, double factor) {
  SC_CHECK(isFloating(dtype));
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    auto* p = static_cast<typename Storage<Tag>::Elem*>(data);
    for (int64_t i = 0; i < count; ++i) p[i] = scaleElement<Tag>(p[i], factor);
  });
}

void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor) {
  if (halvesInHardware(dtype, ReduceOp::Avg)) return halfDivide(dtype, halves(data), count, divisor);
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    auto* p = static_cast<typename Storage<Tag>::Elem*>(data);
    for (int64_t i = 0; i < count; ++i) p[i] = divideElement<Tag>(p[i], divisor);
  });
}

namespace {

class HostReducer final : public Reducer {
 public:
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    reduceInto(dst, src, count, dtype, op);
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    divideInPlace(data, count, dtype, divisor);
  }
  void scale(void* data, int64_t count, DataType dtype, double factor) override {
    scaleInPlace(data, count, dtype, factor);
  }
  void fence() override {}
};

}  // namespace

Reducer& hostReducer() {
  static HostReducer reducer;
  return reducer;
}

}  // namespace scalecomm
