// scalecomm core: element types.
//
// Contract: DataType names every element type a collective can carry. Values
// are stable (they travel in wire headers). Opaque covers types that are only
// moved, never reduced (bool, complex views, ...); its element size is 1 byte
// and counts are in bytes. Value type, no state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace scalecomm {

enum class DataType : uint8_t {
  Float32 = 0,
  Float64 = 1,
  Float16 = 2,
  BFloat16 = 3,
  Int8 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  UInt8 = 8,
  Opaque = 9,
};

constexpr int kNumDataTypes = 10;

inline size_t elementSize(DataType t) {
  switch (t) {
    case DataType::Float64:
    case DataType::Int64: return 8;
    case DataType::Float32:
    case DataType::Int32: return 4;
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16: return 2;
    default: return 1;
  }
}

inline bool isFloating(DataType t) {
  return t == DataType::Float32 || t == DataType::Float64 || t == DataType::Float16 || t == DataType::BFloat16;
}

inline bool isInteger(DataType t) {
  return t == DataType::Int8 || t == DataType::Int16 || t == DataType::Int32 || t == DataType::Int64 ||
         t == DataType::UInt8;
}

inline const char* dataTypeName(DataType t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int8",
                                "int16",   "int32",   "int64",   "uint8",    "bytes"};
  auto i = static_cast<unsigned>(t);
  return i < kNumDataTypes ? names[i] : "invalid";
}

}  // namespace scalecomm
