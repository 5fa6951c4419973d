// fp16 / bf16: every value cast to a 2-byte float (round to nearest even),
// payloads summed in that type. On x86 CPUs with F16C (every one since
// 2013, checked at run time) fp16 converts with the hardware's instructions,
// eight values at a time: the same bits as core/half.h's conversions for
// every value but a NaN, which stays a NaN (with the hardware's payload).
#include <limits>

#include "compress/codec.h"
#include "core/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SCALECOMM_F16C 1
#endif

namespace scalecomm {

namespace {

template <uint16_t (*toHalf)(float), float (*fromHalf)(uint16_t), DataType kType>
class CastCodec : public Codec {
 public:
  int64_t payloadBytes(int64_t n) const override { return 2 * n; }
  std::optional<DataType> sumType() const override { return kType; }
  bool encode(const float* __restrict__ x, float* __restrict__ residual, int64_t n, uint8_t* __restrict__ payload,
              uint64_t, int) const override {
    // Finite: acc, and with a residual what it keeps (acc above the 2-byte
    // type's range, as fp16's 65504, would keep an infinity in it). One loop
    // per case: gcc does not unswitch fp16's (then it does not vectorise).
    uint32_t bad = 0;
    if (residual) {
      for (int64_t i = 0; i < n; ++i) {
        const float acc = x[i] + residual[i];
        const uint16_t h = toHalf(acc);
        storeField<uint16_t>(payload + 2 * i, h);
        residual[i] = acc - fromHalf(h);
        bad |= nonFinite(residual[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        storeField<uint16_t>(payload + 2 * i, toHalf(x[i]));
        bad |= nonFinite(x[i]);
      }
    }
    return bad == 0;
  }
  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t) const override {
    for (int64_t i = 0; i < n; ++i) out[i] += fromHalf(loadField<uint16_t>(payload + 2 * i));
  }
  // One pass; 0.f + v turns -0 into +0, as adding onto cleared memory does.
  void decode(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t,
              int64_t divisor) const override {
    if (divisor == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = 0.f + fromHalf(loadField<uint16_t>(payload + 2 * i));
      return;
    }
    const auto d = static_cast<float>(divisor);
    for (int64_t i = 0; i < n; ++i) out[i] = (0.f + fromHalf(loadField<uint16_t>(payload + 2 * i))) / d;
  }
};

#if SCALECOMM_F16C
bool haveF16c() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}

// 1 where a lane is an infinity or NaN.
__attribute__((target("avx,f16c"))) inline int nonFinite8(__m256 v) {
  const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.f), v);
  return _mm256_movemask_ps(_mm256_cmp_ps(magnitude, _mm256_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ));
}

__attribute__((target("avx,f16c"))) bool fp16EncodeF16c(const float* x, float* residual, int64_t n, uint8_t* payload) {
  int bad = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(x + i);
    if (residual) acc = _mm256_add_ps(acc, _mm256_loadu_ps(residual + i));
    const __m128i h = _mm256_cvtps_ph(acc, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(payload + 2 * i), h);
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
    storeField<uint16_t>(payload + 2 * i, h);
    if (residual) residual[i] = acc - fp16ToFloat(h);
    bad |= static_cast<int>(nonFinite(residual ? residual[i] : acc));
  }
  return bad == 0;
}

// out += v (add), or out = (0 + v) / divisor (divisor 1: no divide).
__attribute__((target("avx,f16c"))) void fp16DecodeF16c(float* out, int64_t n, const uint8_t* payload, bool add,
                                                        int64_t divisor) {
  const auto d = static_cast<float>(divisor);
  const __m256 zero = _mm256_setzero_ps(), dv = _mm256_set1_ps(d);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(payload + 2 * i)));
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
    const float v = fp16ToFloat(loadField<uint16_t>(payload + 2 * i));
    out[i] = add ? out[i] + v : divisor == 1 ? 0.f + v : (0.f + v) / d;
  }
}

// fp16 with the hardware's conversions where the CPU has them.
class Fp16Codec final : public CastCodec<floatToFp16, fp16ToFloat, DataType::Float16> {
 public:
  using Base = CastCodec<floatToFp16, fp16ToFloat, DataType::Float16>;
  bool encode(const float* __restrict__ x, float* __restrict__ residual, int64_t n, uint8_t* __restrict__ payload,
              uint64_t seed, int rank) const override {
    return f16c_ ? fp16EncodeF16c(x, residual, n, payload) : Base::encode(x, residual, n, payload, seed, rank);
  }
  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload,
                 uint64_t seed) const override {
    if (f16c_) {
      fp16DecodeF16c(out, n, payload, true, 1);
    } else {
      Base::decodeAdd(out, n, payload, seed);
    }
  }
  void decode(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t seed,
              int64_t divisor) const override {
    if (f16c_) {
      fp16DecodeF16c(out, n, payload, false, divisor);
    } else {
      Base::decode(out, n, payload, seed, divisor);
    }
  }

 private:
  bool f16c_ = haveF16c();
};
#else
using Fp16Codec = CastCodec<floatToFp16, fp16ToFloat, DataType::Float16>;
#endif

}  // namespace

CodecEntry fp16Codec() {
  return {"fp16", CodecArg::None, false,
          [](const CodecSpec&) -> std::unique_ptr<Codec> { return std::make_unique<Fp16Codec>(); },
          "cast to float16 (2 bytes a value), summed as float16"};
}

CodecEntry bf16Codec() {
  return {"bf16", CodecArg::None, false,
          [](const CodecSpec&) -> std::unique_ptr<Codec> {
            return std::make_unique<CastCodec<floatToBf16, bf16ToFloat, DataType::BFloat16>>();
          },
          "cast to bfloat16 (2 bytes a value), summed as bfloat16"};
}

}  // namespace scalecomm
