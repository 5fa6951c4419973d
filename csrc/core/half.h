// scalecomm core: fp16 and bf16 <-> fp32 conversions.
//
// Contract: bit-exact IEEE round-to-nearest-even conversions, identical on host
// and device (SC_HOST_DEVICE) for every value but NaN, so CPU tests run the
// arithmetic the GPU runs. Values are raw uint16_t bit patterns. NaN stays NaN
// (its payload may differ between host and device); overflow gives inf.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define SC_HOST_DEVICE __host__ __device__
#else
#define SC_HOST_DEVICE
#endif

namespace scalecomm {

SC_HOST_DEVICE inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

SC_HOST_DEVICE inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

SC_HOST_DEVICE inline float bf16ToFloat(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

SC_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Both conversions are written without branches (every case is computed and
// one selected), so the compiler vectorises the reduction loops around them.
SC_HOST_DEVICE inline float fp16ToFloatBits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;                 // exponent and mantissa
  const uint32_t shifted = em << 13;               // in float's place
  const uint32_t exp = shifted & 0x0f800000u;      // the 5 exponent bits
  const uint32_t normal = shifted + (112u << 23);  // rebias 15 -> 127
  const uint32_t infNan = shifted + (224u << 23);  // exponent 31 -> 255, payload kept
  const uint32_t subnormal = floatBits(static_cast<float>(em) * 5.9604644775390625e-08f);  // mant * 2^-24 (0: 0)
  const uint32_t bits = exp == 0x0f800000u ? infNan : exp == 0 ? subnormal : normal;
  return bitsFloat(sign | bits);
}

SC_HOST_DEVICE inline uint16_t floatToFp16Bits(float f) {
  const uint32_t u = floatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t absu = u & 0x7fffffffu;
  // Subnormal or zero result: abs(f) * 2^24 (< 1024, exact) rounded to the
  // nearest integer, ties to even, by adding 2^23 (whose ulp is 1) in the
  // default rounding mode (an FMA gives the same: the product is exact).
  const uint32_t subnormal = floatBits(bitsFloat(absu) * 16777216.0f + 8388608.0f) - 0x4b000000u;
  // Normal: round the 13 dropped bits to nearest even, then rebias 127 -> 15.
  const uint32_t normal = ((absu + 0xfffu + ((absu >> 13) & 1u)) >> 13) - (112u << 10);
  const uint32_t bits = absu > 0x7f800000u    ? 0x7e00u  // NaN
                        : absu >= 0x477ff000u ? 0x7c00u  // rounds to inf
                        : absu < 0x38800000u  ? subnormal
                                              : normal;
  return static_cast<uint16_t>(sign | bits);
}

// fp16 conversions: on the host the integer code above; on the device the
// hardware's (one instruction each way, IEEE round-to-nearest-even: the same
// bits for every value but NaN, which stays NaN with the hardware's payload).
SC_HOST_DEVICE inline float fp16ToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return fp16ToFloatBits(h);
#endif
}

SC_HOST_DEVICE inline uint16_t floatToFp16(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return floatToFp16Bits(f);
#endif
}

}  // namespace scalecomm
