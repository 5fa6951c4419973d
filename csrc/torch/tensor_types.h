// scalecomm torch adapter: torch dtypes and reduce ops in scalecomm terms.
//
// Contract: arithmeticType() maps the torch dtypes our reducer handles and
// returns nullopt for the rest (which can still be moved as bytes);
// toReduceOp() maps c10d::ReduceOp, returning the PREMUL_SUM factor too.
// Pure functions.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

inline std::optional<DataType> arithmeticType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::Float32;
    case at::kDouble: return DataType::Float64;
    case at::kHalf: return DataType::Float16;
    case at::kBFloat16: return DataType::BFloat16;
    case at::kChar: return DataType::Int8;
    case at::kShort: return DataType::Int16;
    case at::kInt: return DataType::Int32;
    case at::kLong: return DataType::Int64;
    case at::kByte: return DataType::UInt8;
    default: return std::nullopt;
  }
}

struct MappedOp {
  ReduceOp op = ReduceOp::None;
  double premulFactor = 1.0;
};

inline std::optional<MappedOp> toReduceOp(const c10d::ReduceOp& r) {
  MappedOp m;
  switch (r.op_) {
    case c10d::ReduceOp::SUM: m.op = ReduceOp::Sum; break;
    case c10d::ReduceOp::AVG: m.op = ReduceOp::Avg; break;
    case c10d::ReduceOp::MIN: m.op = ReduceOp::Min; break;
    case c10d::ReduceOp::MAX: m.op = ReduceOp::Max; break;
    case c10d::ReduceOp::PRODUCT: m.op = ReduceOp::Product; break;
    case c10d::ReduceOp::BAND: m.op = ReduceOp::BAnd; break;
    case c10d::ReduceOp::BOR: m.op = ReduceOp::BOr; break;
    case c10d::ReduceOp::BXOR: m.op = ReduceOp::BXor; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      m.op = ReduceOp::PremulSum;
      // NCCLPreMulSumSupplement: the name every torch since 2.11 has (later ones alias it).
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(r.supplement_.get());
      if (sup == nullptr) return std::nullopt;
      m.premulFactor = sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      break;
    }
    default: return std::nullopt;
  }
  return m;
}

}  // namespace scalecomm
