// qsgd: per bucket of 512 values, the L2 norm and, per value, a signed
// level in [-s, s] rounded stochastically (unbiased: E[decode] = acc).
// The rounding noise of rank q at step t is the stream t x 1000003 + q + 1,
// so ranks round independently and a step is reproducible.
#include <algorithm>
#include <cmath>

#include "compress/codec.h"
#include "compress/random.h"

namespace scalecomm {

namespace {

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(int levels) : levels_(levels) {}
  int64_t payloadBytes(int64_t n) const override { return 4 * buckets(n) + n; }
  std::optional<DataType> sumType() const override { return std::nullopt; }

  bool encode(const float* __restrict__ x, float* __restrict__ r, int64_t n, uint8_t* __restrict__ payload,
              uint64_t seed, int rank) const override {
    const uint64_t noise = qsgdNoiseStream(seed, rank);
    const auto s = static_cast<float>(levels_);
    uint8_t* levels = payload + 4 * buckets(n);
    float acc[kQsgdBucket];
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
      const float unit = norm / s;  // a level's value
      for (int64_t j = 0; j < len; ++j) {
        const float scaled = std::fabs(acc[j]) / std::max(norm, 1e-30f) * s;
        // A bucket of infinities (norm inf, scaled NaN) sends the top level,
        // which decodes to infinity.
        const float magnitude =
            scaled <= s ? std::min(std::floor(scaled + codec_random::uniform(noise, lo + j)), s) : s;
        const float level = acc[j] > 0 ? magnitude : acc[j] < 0 ? -magnitude : 0.f;
        levels[lo + j] = static_cast<uint8_t>(static_cast<int8_t>(level));
        if (r) r[lo + j] = acc[j] - unit * level;
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
  int levels_;
};

}  // namespace

CodecEntry qsgdCodec() {
  return {"qsgd", CodecArg::Levels, false,
          [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<QsgdCodec>(s.levels); },
          "stochastic quantisation to signed levels per bucket of 512 (1 byte a value, unbiased); allgathered"};
}

}  // namespace scalecomm
