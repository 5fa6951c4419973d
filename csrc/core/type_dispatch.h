// scalecomm core: from runtime (dtype, op) to the compile-time types of core/elementwise.h.
//
// Contract: dispatchType(dtype, fn) calls fn(Tag{}) with the storage tag of
// the dtype (float, double, Fp16Tag, Bf16Tag, int8_t, ..., uint8_t);
// dispatchOp(op, fn) calls fn(std::integral_constant<ReduceOp, op>{});
// dispatchReduction(dtype, op, fn) calls fn(Tag{}, opConstant) for the pairs
// that have arithmetic (kCombines), so callers instantiate nothing invalid.
// Opaque and ReduceOp::None have no arithmetic: internal error. Host code
// only (the CPU reducer and the CUDA kernels' launchers). Header only.
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "core/elementwise.h"
#include "core/error.h"

namespace scalecomm {

template <typename Fn>
void dispatchType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::Float32: return fn(float{});
    case DataType::Float64: return fn(double{});
    case DataType::Float16: return fn(Fp16Tag{});
    case DataType::BFloat16: return fn(Bf16Tag{});
    case DataType::Int8: return fn(int8_t{});
    case DataType::Int16: return fn(int16_t{});
    case DataType::Int32: return fn(int32_t{});
    case DataType::Int64: return fn(int64_t{});
    case DataType::UInt8: return fn(uint8_t{});
    default: SC_CHECK(false, "no arithmetic for dtype ", dataTypeName(dtype));
  }
}

template <typename Fn>
void dispatchOp(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
    case ReduceOp::PremulSum: return fn(std::integral_constant<ReduceOp, ReduceOp::Sum>{});
    case ReduceOp::Product: return fn(std::integral_constant<ReduceOp, ReduceOp::Product>{});
    case ReduceOp::Min: return fn(std::integral_constant<ReduceOp, ReduceOp::Min>{});
    case ReduceOp::Max: return fn(std::integral_constant<ReduceOp, ReduceOp::Max>{});
    case ReduceOp::BAnd: return fn(std::integral_constant<ReduceOp, ReduceOp::BAnd>{});
    case ReduceOp::BOr: return fn(std::integral_constant<ReduceOp, ReduceOp::BOr>{});
    case ReduceOp::BXor: return fn(std::integral_constant<ReduceOp, ReduceOp::BXor>{});
    default: SC_CHECK(false, "no arithmetic for reduction ", reduceOpName(op));
  }
}

template <typename Fn>
void dispatchReduction(DataType dtype, ReduceOp op, Fn&& fn) {
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    dispatchOp(op, [&](auto opc) {
      constexpr ReduceOp Op = decltype(opc)::value;
      if constexpr (kCombines<Tag, Op>) fn(tag, opc);
    });
  });
}

}  // namespace scalecomm
