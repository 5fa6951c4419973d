#include "core/half_x86.h"

#include <cstring>
#include <limits>

#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SC_F16C __attribute__((target("avx,f16c")))

namespace scalecomm {

bool f16cAvailable() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}

namespace {

SC_F16C inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
SC_F16C inline __m128i round8(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
SC_F16C inline void store8(uint16_t* p, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round8(v)); }
inline uint16_t bits(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline int nonFinite1(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x7f800000u) == 0x7f800000u;
}

// 1 where a lane is an infinity or NaN.
SC_F16C inline int nonFinite8(__m256 v) {
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
  return _mm256_movemask_ps(_mm256_cmp_ps(magnitude, _mm256_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ));
}

}  // namespace

SC_F16C void fp16Fold(uint16_t* dst, uint16_t* also, const uint16_t* const* in, int k, int64_t n, int64_t divisor) {
  const auto d = static_cast<float>(divisor);
  const __m256 dv = _mm256_set1_ps(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = load8(in[0] + i);
    for (int j = 1; j < k; ++j) acc = _mm256_cvtph_ps(round8(_mm256_add_ps(acc, load8(in[j] + i))));
    if (divisor > 1) acc = _mm256_div_ps(acc, dv);
    const __m128i h = round8(acc);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    if (also != nullptr) _mm_storeu_si128(reinterpret_cast<__m128i*>(also + i), h);
  }
  for (; i < n; ++i) {
    float acc = fp16ToFloat(in[0][i]);
    for (int j = 1; j < k; ++j) acc = fp16ToFloat(floatToFp16(acc + fp16ToFloat(in[j][i])));
    const uint16_t h = floatToFp16(divisor > 1 ? acc / d : acc);
    dst[i] = h;
    if (also != nullptr) also[i] = h;
  }
}

SC_F16C void fp16Divide(uint16_t* p, int64_t n, int64_t divisor) {
  const uint16_t* in[] = {p};
  fp16Fold(p, nullptr, in, 1, n, divisor);
}

SC_F16C bool fp16Encode(const float* x, float* residual, int64_t n, uint8_t* out) {
  int bad = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(x + i);
    if (residual) acc = _mm256_add_ps(acc, _mm256_loadu_ps(residual + i));
    const __m128i h = round8(acc);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    if (residual) {
      const __m256 kept = _mm256_sub_ps(acc, _mm256_cvtph_ps(h));
      _mm256_storeu_ps(residual + i, kept);
      bad |= nonFinite8(kept);
    } else {
      bad |= nonFinite8(acc);
    }
  }
  for (; i < n; ++i) {
    const float acc = residual ? x[i] + residual[i] : x[i];
    const uint16_t h = floatToFp16(acc);
    std::memcpy(out + 2 * i, &h, sizeof h);
    if (residual) residual[i] = acc - fp16ToFloat(h);
    bad |= nonFinite1(residual ? residual[i] : acc);
  }
  return bad == 0;
}

SC_F16C void fp16Decode(float* out, int64_t n, const uint8_t* in, bool add, int64_t divisor) {
  const auto d = static_cast<float>(divisor);
  const __m256 zero = _mm256_setzero_ps(), dv = _mm256_set1_ps(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    __m256 o;
    if (add) {
      o = _mm256_add_ps(_mm256_loadu_ps(out + i), v);
    } else {
      o = _mm256_add_ps(zero, v);
      if (divisor != 1) o = _mm256_div_ps(o, dv);
    }
    _mm256_storeu_ps(out + i, o);
  }
  for (; i < n; ++i) {
    const float v = fp16ToFloat(bits(in + 2 * i));
    out[i] = add ? out[i] + v : divisor == 1 ? 0.f + v : (0.f + v) / d;
  }
}

}  // namespace scalecomm

#else

#include "core/error.h"

namespace scalecomm {

bool f16cAvailable() { return false; }
void fp16Fold(uint16_t*, uint16_t*, const uint16_t* const*, int, int64_t, int64_t) { SC_CHECK(false, "no F16C"); }
void fp16Divide(uint16_t*, int64_t, int64_t) { SC_CHECK(false, "no F16C"); }
bool fp16Encode(const float*, float*, int64_t, uint8_t*) {
  SC_CHECK(false, "no F16C");
  return false;
}
void fp16Decode(float*, int64_t, const uint8_t*, bool, int64_t) { SC_CHECK(false, "no F16C"); }

}  // namespace scalecomm

#endif
