// scalecomm core: the per-element math of every reduction, for host and device.
//
// Contract: one definition of what reducing two elements means, compiled
// into the CPU reducer (comm/reducer.cc) and the CUDA kernels
// (comm/cuda/reduce_kernels.cu) alike, so CPU tests of the reducer test the
// arithmetic the GPU runs. Storage<T> loads an element into its accumulator
// type (fp16/bf16: fp32, round-to-nearest-even on store, see core/half.h) and
// stores it back. combine<Op>(a, b) is the binary op: Sum, Product, Min, Max
// (NaN propagates as in torch.minimum/maximum), BAnd, BOr, BXor (integers).
// AVG and PREMUL_SUM add here; their scaling is applied separately
// (scaleElement before, divideElement after). Header only, no state.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "core/reduce_op.h"

namespace scalecomm {

template <typename T>
struct Storage {
  using Elem = T;
  using Acc = T;
  SC_HOST_DEVICE static Acc load(T v) { return v; }
  SC_HOST_DEVICE static T store(Acc v) { return v; }
};

// fp16 and bf16 travel as raw 16-bit patterns; distinct tag types select the format.
struct Fp16Tag {};
struct Bf16Tag {};

template <>
struct Storage<Fp16Tag> {
  using Elem = uint16_t;
  using Acc = float;
  SC_HOST_DEVICE static Acc load(uint16_t v) { return fp16ToFloat(v); }
  SC_HOST_DEVICE static uint16_t store(Acc v) { return floatToFp16(v); }
};

template <>
struct Storage<Bf16Tag> {
  using Elem = uint16_t;
  using Acc = float;
  SC_HOST_DEVICE static Acc load(uint16_t v) { return bf16ToFloat(v); }
  SC_HOST_DEVICE static uint16_t store(Acc v) { return floatToBf16(v); }
};

template <ReduceOp Op, typename A>
SC_HOST_DEVICE inline A combine(A a, A b) {
  if constexpr (Op == ReduceOp::Sum || Op == ReduceOp::Avg || Op == ReduceOp::PremulSum) {
    return static_cast<A>(a + b);
  } else if constexpr (Op == ReduceOp::Product) {
    return static_cast<A>(a * b);
  } else if constexpr (Op == ReduceOp::Min) {
    return (a < b || a != a) ? a : b;  // a != a: NaN wins
  } else if constexpr (Op == ReduceOp::Max) {
    return (a > b || a != a) ? a : b;
  } else {
    static_assert(std::is_integral_v<A>, "bitwise reductions are for integers");
    if constexpr (Op == ReduceOp::BAnd) return static_cast<A>(a & b);
    if constexpr (Op == ReduceOp::BOr) return static_cast<A>(a | b);
    return static_cast<A>(a ^ b);
  }
}

// One element of dst = op(dst, src), through the storage's accumulator.
template <typename Tag, ReduceOp Op>
SC_HOST_DEVICE inline typename Storage<Tag>::Elem reduceElement(typename Storage<Tag>::Elem dst,
                                                                typename Storage<Tag>::Elem src) {
  using S = Storage<Tag>;
  return S::store(combine<Op>(S::load(dst), S::load(src)));
}

// PREMUL_SUM's pre-multiplication (floating types).
template <typename Tag>
SC_HOST_DEVICE inline typename Storage<Tag>::Elem scaleElement(typename Storage<Tag>::Elem v, double factor) {
  using S = Storage<Tag>;
  using A = typename S::Acc;
  return S::store(static_cast<A>(S::load(v) * static_cast<A>(factor)));
}

// AVG's final division: floating types divide, integers truncate toward zero.
template <typename Tag>
SC_HOST_DEVICE inline typename Storage<Tag>::Elem divideElement(typename Storage<Tag>::Elem v, int64_t divisor) {
  using S = Storage<Tag>;
  using A = typename S::Acc;
  using D = std::conditional_t<std::is_integral_v<A>, int64_t, A>;
  return S::store(static_cast<A>(S::load(v) / static_cast<D>(divisor)));
}

// Whether an (op, storage) pair has a combine<> (the same table as reduceOpSupports()).
template <typename Tag, ReduceOp Op>
constexpr bool kCombines = (Op != ReduceOp::BAnd && Op != ReduceOp::BOr && Op != ReduceOp::BXor) ||
                           std::is_integral_v<typename Storage<Tag>::Acc>;

}  // namespace scalecomm
