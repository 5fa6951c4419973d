#include "core/half_x86.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/cpu_features.h"
#include "core/elementwise.h"
#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define SC_F16C __attribute__((target("avx2,f16c")))

namespace scalecomm {

bool x86HalvesAvailable() { return cpuHasAvx2F16c(); }

namespace {

// The two 2-byte formats: eight values widened to fp32, and eight rounded
// back (nearest even), as core/half.h's per-element code does.
struct Fp16 {
  using Tag = Fp16Tag;
  SC_F16C static __m256 widen8(__m128i h) { return _mm256_cvtph_ps(h); }
  SC_F16C static __m128i round8(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
};
struct Bf16 {
  using Tag = Bf16Tag;
  SC_F16C static __m256 widen8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  SC_F16C static __m128i round8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i out = _mm256_blendv_epi8(rounded, quiet, nan);  // every lane < 2^16
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0x08);
    return _mm256_castsi256_si128(packed);
  }
};

inline uint16_t bits(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline int nonFinite1(float v) { return (floatBits(v) & 0x7f800000u) == 0x7f800000u; }

// 1 where a lane is an infinity or NaN.
SC_F16C inline int nonFinite8(__m256 v) {
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
  return _mm256_movemask_ps(_mm256_cmp_ps(magnitude, _mm256_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ));
}

template <typename F>
SC_F16C inline __m256 load8(const uint16_t* p) {
  return F::widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// A tile at a time: each addition is a pass over the tile (which stays in
// L1), so the eight-value steps of a pass are independent and pipeline; the
// last addition writes the output unless a last pass follows: the average's
// division, or, for a single input, its copy, rounded as the per-element
// code rounds (a NaN comes out quiet).
constexpr int64_t kTile = 2048;

template <typename F>
SC_F16C void fold(uint16_t* dst, uint16_t* also, const void* const* inputs, int k, int64_t n, int64_t divisor) {
  const auto in = [inputs](int j) { return static_cast<const uint16_t*>(inputs[j]); };
  const auto d = static_cast<float>(divisor);
  const __m256 dv = _mm256_set1_ps(d);
  const auto store = [](uint16_t* p, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); };
  const bool lastPass = divisor > 1 || k == 1;
  alignas(32) uint16_t tile[kTile];
  const int64_t body = n / 8 * 8;
  for (int64_t at = 0; at < body; at += kTile) {
    const int64_t m = std::min(kTile, body - at);
    const uint16_t* sum = in(0) + at;  // the sum so far
    for (int j = 1; j < k; ++j) {
      const uint16_t* z = in(j) + at;
      uint16_t* out = j == k - 1 && !lastPass ? dst + at : tile;
      for (int64_t i = 0; i < m; i += 8) store(out + i, F::round8(_mm256_add_ps(load8<F>(sum + i), load8<F>(z + i))));
      sum = out;
    }
    if (lastPass) {
      for (int64_t i = 0; i < m; i += 8) {
        const __m256 v = load8<F>(sum + i);
        store(dst + at + i, F::round8(divisor > 1 ? _mm256_div_ps(v, dv) : v));
      }
    }
    if (also != nullptr) std::memcpy(also + at, dst + at, static_cast<size_t>(m) * sizeof(uint16_t));
  }
  using Tag = typename F::Tag;  // the tail: the per-element code itself
  for (int64_t i = body; i < n; ++i) {
    uint16_t h = in(0)[i];
    for (int j = 1; j < k; ++j) h = reduceElement<Tag, ReduceOp::Sum>(h, in(j)[i]);
    if (lastPass) h = divideElement<Tag>(h, std::max<int64_t>(divisor, 1));
    dst[i] = h;
    if (also != nullptr) also[i] = h;
  }
}

}  // namespace

void halfFold(DataType dtype, uint16_t* dst, uint16_t* also, const void* const* in, int k, int64_t n, int64_t divisor) {
  if (dtype == DataType::Float16) return fold<Fp16>(dst, also, in, k, n, divisor);
  fold<Bf16>(dst, also, in, k, n, divisor);
}

void halfDivide(DataType dtype, uint16_t* p, int64_t n, int64_t divisor) {
  const void* in[] = {p};
  halfFold(dtype, p, nullptr, in, 1, n, divisor);
}

namespace {

template <typename F>
SC_F16C bool encode(const float* x, float* residual, int64_t n, uint8_t* out) {
  int bad = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(x + i);
    if (residual) acc = _mm256_add_ps(acc, _mm256_loadu_ps(residual + i));
    const __m128i h = F::round8(acc);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
    if (residual) {
      const __m256 kept = _mm256_sub_ps(acc, F::widen8(h));
      _mm256_storeu_ps(residual + i, kept);
      bad |= nonFinite8(kept);
    } else {
      bad |= nonFinite8(acc);
    }
  }
  for (; i < n; ++i) {
    const float acc = residual ? x[i] + residual[i] : x[i];
    const uint16_t h = Storage<typename F::Tag>::store(acc);
    std::memcpy(out + 2 * i, &h, sizeof h);
    if (residual) residual[i] = acc - Storage<typename F::Tag>::load(h);
    bad |= nonFinite1(residual ? residual[i] : acc);
  }
  return bad == 0;
}

template <typename F>
SC_F16C void decode(float* out, int64_t n, const uint8_t* in, bool add, int64_t divisor) {
  const auto d = static_cast<float>(divisor);
  const __m256 zero = _mm256_setzero_ps(), dv = _mm256_set1_ps(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = F::widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
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
    const float v = Storage<typename F::Tag>::load(bits(in + 2 * i));
    out[i] = add ? out[i] + v : divisor == 1 ? 0.f + v : (0.f + v) / d;
  }
}

}  // namespace

bool halfEncode(DataType dtype, const float* x, float* residual, int64_t n, uint8_t* out) {
  return dtype == DataType::Float16 ? encode<Fp16>(x, residual, n, out) : encode<Bf16>(x, residual, n, out);
}

void halfDecode(DataType dtype, float* out, int64_t n, const uint8_t* in, bool add, int64_t divisor) {
  if (dtype == DataType::Float16) return decode<Fp16>(out, n, in, add, divisor);
  decode<Bf16>(out, n, in, add, divisor);
}

}  // namespace scalecomm

#else

#include "core/error.h"

namespace scalecomm {

bool x86HalvesAvailable() { return false; }
void halfFold(DataType, uint16_t*, uint16_t*, const void* const*, int, int64_t, int64_t) {
  SC_CHECK(false, "halfFold without x86 vector instructions");
}
void halfDivide(DataType, uint16_t*, int64_t, int64_t) {
  SC_CHECK(false, "halfDivide without x86 vector instructions");
}
bool halfEncode(DataType, const float*, float*, int64_t, uint8_t*) {
  SC_CHECK(false, "halfEncode without x86 vector instructions");
  return false;
}
void halfDecode(DataType, float*, int64_t, const uint8_t*, bool, int64_t) {
  SC_CHECK(false, "halfDecode without x86 vector instructions");
}

}  // namespace scalecomm

#endif
