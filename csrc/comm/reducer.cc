#include "comm/reducer.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace scalecomm {

namespace {

template <typename T>
struct Plain {
  using Acc = T;
  static Acc load(const T* p, int64_t i) { return p[i]; }
  static void store(T* p, int64_t i, Acc v) { p[i] = v; }
};

struct Half16 {
  using Acc = float;
  static Acc load(const uint16_t* p, int64_t i) { return fp16ToFloat(p[i]); }
  static void store(uint16_t* p, int64_t i, Acc v) { p[i] = floatToFp16(v); }
};

struct BFloat16 {
  using Acc = float;
  static Acc load(const uint16_t* p, int64_t i) { return bf16ToFloat(p[i]); }
  static void store(uint16_t* p, int64_t i, Acc v) { p[i] = floatToBf16(v); }
};

template <typename Storage, typename Traits, typename Fn>
void apply(void* dstv, const void* srcv, int64_t n, Fn fn) {
  auto* dst = static_cast<Storage*>(dstv);
  const auto* src = static_cast<const Storage*>(srcv);
  for (int64_t i = 0; i < n; ++i) Traits::store(dst, i, fn(Traits::load(dst, i), Traits::load(src, i)));
}

template <typename Storage, typename Traits>
void reduceTyped(void* dst, const void* src, int64_t n, ReduceOp op) {
  using A = typename Traits::Acc;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
    case ReduceOp::PremulSum:
      return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return static_cast<A>(a + b); });
    case ReduceOp::Product: return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return static_cast<A>(a * b); });
    case ReduceOp::Min:
      // NaN propagates, as torch.minimum does.
      return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return (a < b || a != a) ? a : b; });
    case ReduceOp::Max: return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return (a > b || a != a) ? a : b; });
    default: break;
  }
  if constexpr (std::is_integral_v<A>) {
    switch (op) {
      case ReduceOp::BAnd: return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return static_cast<A>(a & b); });
      case ReduceOp::BOr: return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return static_cast<A>(a | b); });
      case ReduceOp::BXor: return apply<Storage, Traits>(dst, src, n, [](A a, A b) { return static_cast<A>(a ^ b); });
      default: break;
    }
  }
  SC_CHECK(false, "unsupported reduction ", reduceOpName(op));
}

template <typename Fn>
void dispatch(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float32: return fn(static_cast<float*>(nullptr), Plain<float>{});
    case DataType::Float64: return fn(static_cast<double*>(nullptr), Plain<double>{});
    case DataType::Float16: return fn(static_cast<uint16_t*>(nullptr), Half16{});
    case DataType::BFloat16: return fn(static_cast<uint16_t*>(nullptr), BFloat16{});
    case DataType::Int8: return fn(static_cast<int8_t*>(nullptr), Plain<int8_t>{});
    case DataType::Int16: return fn(static_cast<int16_t*>(nullptr), Plain<int16_t>{});
    case DataType::Int32: return fn(static_cast<int32_t*>(nullptr), Plain<int32_t>{});
    case DataType::Int64: return fn(static_cast<int64_t*>(nullptr), Plain<int64_t>{});
    case DataType::UInt8: return fn(static_cast<uint8_t*>(nullptr), Plain<uint8_t>{});
    default: SC_CHECK(false, "no arithmetic for dtype ", dataTypeName(dtype));
  }
}

}  // namespace

void reduceInto(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) {
  SC_CHECK(reduceOpSupports(op, dtype), reduceOpName(op), " on ", dataTypeName(dtype));
  dispatch(dtype, [&](auto* tag, auto traits) {
    using Storage = std::remove_pointer_t<decltype(tag)>;
    reduceTyped<Storage, decltype(traits)>(dst, src, count, op);
  });
}

void scaleInPlace(void* data, int64_t count, DataType dtype, double factor) {
  SC_CHECK(isFloating(dtype));
  dispatch(dtype, [&](auto* tag, auto traits) {
    using Storage = std::remove_pointer_t<decltype(tag)>;
    using Traits = decltype(traits);
    using A = typename Traits::Acc;
    auto* p = static_cast<Storage*>(data);
    const A f = static_cast<A>(factor);
    for (int64_t i = 0; i < count; ++i) Traits::store(p, i, static_cast<A>(Traits::load(p, i) * f));
  });
}

void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor) {
  dispatch(dtype, [&](auto* tag, auto traits) {
    using Storage = std::remove_pointer_t<decltype(tag)>;
    using Traits = decltype(traits);
    using A = typename Traits::Acc;
    auto* p = static_cast<Storage*>(data);
    using D = std::conditional_t<std::is_integral_v<A>, int64_t, A>;
    const D d = static_cast<D>(divisor);
    for (int64_t i = 0; i < count; ++i) Traits::store(p, i, static_cast<A>(Traits::load(p, i) / d));
  });
}

}  // namespace scalecomm
