// scalecomm core: fp16 and bf16 <-> fp32 conversions.
//
// Contract: bit-exact IEEE round-to-nearest-even conversions, identical on host
// and device (SC_HOST_DEVICE), so CPU tests run the arithmetic the GPU runs.
// Values are raw uint16_t bit patterns. NaN stays NaN; overflow gives inf.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
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

SC_HOST_DEVICE inline float fp16ToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

SC_HOST_DEVICE inline uint16_t floatToFp16(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absu < 0x38800000u) {
    // result is subnormal or zero: round abs(f) * 2^24 to nearest even integer
    float a = bitsFloat(absu);
    float scaled = a * 16777216.0f;  // exact (power of two)
    uint32_t q = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t rounding = 0xfffu + ((absu >> 13) & 1u);
  uint32_t r = (absu + rounding) >> 13;  // exponent rebias below
  return static_cast<uint16_t>(sign | (r - (112u << 10)));
}

}  // namespace scalecomm
