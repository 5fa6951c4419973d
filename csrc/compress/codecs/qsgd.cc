// qsgd: per bucket of 512 values, the L2 norm and, per value, a signed
// level in [-s, s] rounded stochastically (unbiased: E[decode] = acc).
// The rounding noise of rank q at step t is the stream t x 1000003 + q + 1,
// so ranks round independently and a step is reproducible.
#include <algorithm>
#include <cmath>

#include "compress/codec.h"
#include "compress/random.h"
#include "core/cpu_features.h"

namespace scalecomm {

namespace {

// u[j] = codec_random::uniformFrom(start, first + j), j < n: with AVX2
// where the CPU has it (its 64-bit lanes vectorise the stream's products);
// the same bits either way.
using UniformFill = void (*)(uint64_t start, uint64_t first, int64_t n, float* u);
inline __attribute__((always_inline)) void drawUniforms(uint64_t start, uint64_t first, int64_t n,
                                                        float* __restrict__ u) {
  for (int64_t j = 0; j < n; ++j) u[j] = codec_random::uniformFrom(start, first + static_cast<uint64_t>(j));
}
void drawUniformsPortable(uint64_t start, uint64_t first, int64_t n, float* u) { drawUniforms(start, first, n, u); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void drawUniformsAvx2(uint64_t start, uint64_t first, int64_t n, float* u) {
  drawUniforms(start, first, n, u);
}
UniformFill uniformFill() { return cpuHasAvx2() ? drawUniformsAvx2 : drawUniformsPortable; }
#else
UniformFill uniformFill() { return drawUniformsPortable; }
#endif

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(int levels) : levels_(levels) {}
  int64_t payloadBytes(int64_t n) const override { return 4 * buckets(n) + n; }
  std::optional<DataType> sumType() const override { return std::nullopt; }

  bool encode(const float* __restrict__ x, float* __restrict__ r, int64_t n, uint8_t* __restrict__ payload,
              uint64_t seed, int rank) const override {
    const uint64_t noise = codec_random::start(qsgdNoiseStream(seed, rank));
    const UniformFill fillUniforms = uniformFill();
    uint8_t* levels = payload + 4 * buckets(n);
    float acc[kQsgdBucket], u[kQsgdBucket];
    uint32_t bad = 0;
    for (int64_t b = 0; b < buckets(n); ++b) {
      const int64_t lo = b * kQsgdBucket, len = std::min<int64_t>(kQsgdBucket, n - lo);
      double squares = 0;
      for (int64_t j = 0; j < len; ++j) {
        acc[j] = r ? x[lo + j] + r[lo + j] : x[lo + j];
        bad |= nonFinite(acc[j]);
        squares += static_cast<double>(acc[j]) * acc[j];
      }
      const auto norm = static_cast<float>(std::sqrt(squares));
      storeField<float>(payload + 4 * b, norm);
      fillUniforms(noise, static_cast<uint64_t>(lo), len, u);
      if (r) {
        roundBucket<true>(acc, u, len, norm, levels + lo, r + lo);
      } else {
        roundBucket<false>(acc, u, len, norm, levels + lo, nullptr);
      }
    }
    return bad == 0;
  }

  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t) const override {
    const uint8_t* levels = payload + 4 * buckets(n);
    for (int64_t b = 0; b < buckets(n); ++b) {
      const float unit = loadField<float>(payload + 4 * b) / static_cast<float>(levels_);
      const int64_t lo = b * kQsgdBucket, hi = std::min<int64_t>(n, lo + kQsgdBucket);
      for (int64_t i = lo; i < hi; ++i) out[i] += static_cast<float>(static_cast<int8_t>(levels[i])) * unit;
    }
  }

 private:
  static int64_t buckets(int64_t n) { return (n + kQsgdBucket - 1) / kQsgdBucket; }
  // One bucket's levels (and residual), from its values acc, its norm and
  // its uniforms u: min(floor(scaled + u), s), branch-free so that the
  // compiler vectorises it. t is in [0, s + 1], where floor is the
  // truncation; a scaled value over s (rounding) still sends s; a bucket
  // of infinities (norm inf, scaled NaN) sends the top level, which decodes
  // to infinity.
  template <bool kFeedback>
  void roundBucket(const float* __restrict__ acc, const float* __restrict__ u, int64_t len, float norm,
                   uint8_t* __restrict__ levels, float* __restrict__ r) const {
    const auto s = static_cast<float>(levels_);
    const float denominator = std::max(norm, 1e-30f), unit = norm / s;  // a level's value
    for (int64_t j = 0; j < len; ++j) {
      const float scaled = std::fabs(acc[j]) / denominator * s;
      const float t = std::min(s + 1.0f, scaled + u[j]);  // NaN (scaled or u): s + 1
      const float magnitude = std::min(static_cast<float>(static_cast<int32_t>(t)), s);
      const float level = static_cast<float>((acc[j] > 0) - (acc[j] < 0)) * magnitude;  // 0 for 0 and NaN
      levels[j] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int32_t>(level)));
      if (kFeedback) r[j] = acc[j] - unit * level;
    }
  }
  int levels_;
};

}  // namespace

CodecEntry qsgdCodec() {
  return {"qsgd", CodecArg::Levels, false,
          [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<QsgdCodec>(s.levels); },
          "stochastic quantisation to signed levels per bucket of 512 (1 byte a value, unbiased); allgathered"};
}

}  // namespace scalecomm
