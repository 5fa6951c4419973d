// Inputs whose reduction has a known exact result, for the algorithm grids of
// the C++ tests (tests/cpp/test_executor.cc over links, test_queued_channel.cc
// over the emulated queued channel).
// reductionInput(rank, i, op) is small integers, so every op's exact result is
// representable in every dtype; reducedValue() is that result as the dtype
// holds it (int8/uint8 wrap around, AVG of integers truncates); matches()
// compares with a tolerance for the 16-bit floats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace sctest {

inline double reductionInput(int rank, int64_t i, scalecomm::ReduceOp op) {
  using scalecomm::ReduceOp;
  if (op == ReduceOp::Product) return (rank + static_cast<int>(i)) % 2 + 1;  // 1 or 2
  if (op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor) return (rank * 5 + i * 3) % 16;
  return (rank * 3 + i) % 7 - (op == ReduceOp::Sum || op == ReduceOp::Avg ? 0 : 3);
}

// Element i of the reduction over n ranks (PREMUL_SUM scales each input by factor).
inline double reducedValue(int n, int64_t i, scalecomm::ReduceOp op, double factor, scalecomm::DataType t) {
  using scalecomm::DataType;
  using scalecomm::ReduceOp;
  double acc = reductionInput(0, i, op) * (op == ReduceOp::PremulSum ? factor : 1);
  for (int r = 1; r < n; ++r) {
    const double v = reductionInput(r, i, op) * (op == ReduceOp::PremulSum ? factor : 1);
    const auto a = static_cast<int64_t>(acc), b = static_cast<int64_t>(v);
    switch (op) {
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
      case ReduceOp::Product: acc *= v; break;
      case ReduceOp::BAnd: acc = static_cast<double>(a & b); break;
      case ReduceOp::BOr: acc = static_cast<double>(a | b); break;
      case ReduceOp::BXor: acc = static_cast<double>(a ^ b); break;
      default: acc += v;
    }
  }
  if (op == ReduceOp::Avg) acc = scalecomm::isInteger(t) ? std::trunc(acc / n) : acc / n;
  if (t == DataType::UInt8) acc = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(acc)));
  if (t == DataType::Int8) acc = static_cast<double>(static_cast<int8_t>(static_cast<int64_t>(acc)));
  return acc;
}

inline bool matches(double got, double want, scalecomm::DataType t) {
  return scalecomm::isFloating(t) ? std::fabs(got - want) <= 1e-2 * std::max(1.0, std::fabs(want)) : got == want;
}

inline constexpr scalecomm::DataType kAllTypes[] = {
    scalecomm::DataType::Float32,  scalecomm::DataType::Float64, scalecomm::DataType::Float16,
    scalecomm::DataType::BFloat16, scalecomm::DataType::Int8,    scalecomm::DataType::Int16,
    scalecomm::DataType::Int32,    scalecomm::DataType::Int64,   scalecomm::DataType::UInt8};
inline constexpr scalecomm::ReduceOp kAllOps[] = {
    scalecomm::ReduceOp::Sum,  scalecomm::ReduceOp::Avg,     scalecomm::ReduceOp::Min,
    scalecomm::ReduceOp::Max,  scalecomm::ReduceOp::Product, scalecomm::ReduceOp::PremulSum,
    scalecomm::ReduceOp::BAnd, scalecomm::ReduceOp::BOr,     scalecomm::ReduceOp::BXor};

}  // namespace sctest
