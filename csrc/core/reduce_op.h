// scalecomm core: reduction operators.
//
// Contract: ReduceOp names the reductions; reduceOpSupports() is the single
// table of which (op, dtype) pairs are valid. AVG divides the sum by the world
// size (integer types: truncating division, as NCCL). PREMUL_SUM multiplies each
// rank's input by a scalar factor, then sums. BAND/BOR/BXOR are integer-only.
// Values are stable (they travel in wire headers). Value type, no state.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace scalecomm {

enum class ReduceOp : uint8_t {
  Sum = 0,
  Avg = 1,
  Min = 2,
  Max = 3,
  Product = 4,
  PremulSum = 5,
  BAnd = 6,
  BOr = 7,
  BXor = 8,
  None = 255,  // not a reduction (broadcast, allgather, ...)
};

inline const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "prod";
    case ReduceOp::PremulSum: return "premul_sum";
    case ReduceOp::BAnd: return "band";
    case ReduceOp::BOr: return "bor";
    case ReduceOp::BXor: return "bxor";
    case ReduceOp::None: return "none";
  }
  return "invalid";
}

inline bool reduceOpSupports(ReduceOp op, DataType t) {
  if (t == DataType::Opaque) return false;
  switch (op) {
    case ReduceOp::BAnd:
    case ReduceOp::BOr:
    case ReduceOp::BXor: return isInteger(t);
    case ReduceOp::PremulSum: return isFloating(t);
    case ReduceOp::None: return false;
    default: return true;
  }
}

}  // namespace scalecomm
