// randomk: the values at k = ratio x n positions drawn (with replacement)
// from the seed every rank shares for the step, so only values travel and
// payloads sum: the summed payload holds the sum at each drawn position.
// A position drawn twice carries the same value twice and counts once.
#include <vector>

#include "compress/codec.h"
#include "compress/random.h"

namespace scalecomm {

namespace {

class RandomkCodec final : public Codec {
 public:
  explicit RandomkCodec(double ratio) : ratio_(ratio) {}
  int64_t payloadBytes(int64_t n) const override { return 4 * keptElements(n, ratio_); }
  std::optional<DataType> sumType() const override { return DataType::Float32; }

  bool encode(const float* __restrict__ x, float* __restrict__ r, int64_t n, uint8_t* __restrict__ payload,
              uint64_t seed, int) const override {
    const int64_t k = keptElements(n, ratio_);
    uint32_t bad = 0;
    if (r) {
      for (int64_t i = 0; i < n; ++i) {
        r[i] += x[i];
        bad |= nonFinite(r[i]);
      }
    } else {
      bad = !allFinite(x, n);  // it reads only k values: an unsent one must show too
    }
    const float* acc = r ? r : x;
    for (int64_t j = 0; j < k; ++j) storeField<float>(payload + 4 * j, acc[position(seed, j, n)]);
    // The residual is cleared in a second pass (positions drawn again, which
    // is cheaper than storing them): a position drawn twice must send its
    // value both times, as decodeAdd reads every slot before it writes.
    if (r) {
      for (int64_t j = 0; j < k; ++j) r[position(seed, j, n)] = 0.f;  // sent exactly
    }
    return bad == 0;
  }

  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload,
                 uint64_t seed) const override {
    // Every read before any write: a repeated position adds its value once.
    const int64_t k = keptElements(n, ratio_);
    std::vector<float> sum(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) sum[j] = out[position(seed, j, n)] + loadField<float>(payload + 4 * j);
    for (int64_t j = 0; j < k; ++j) out[position(seed, j, n)] = sum[j];
  }

 private:
  static int64_t position(uint64_t seed, int64_t j, int64_t n) {
    return codec_random::index(seed, static_cast<uint64_t>(j), n);
  }
  double ratio_;
};

}  // namespace

CodecEntry randomkCodec() {
  return {"randomk", CodecArg::Ratio, true,
          [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<RandomkCodec>(s.ratio); },
          "values at positions drawn from a seed every rank shares (4 bytes each), summed"};
}

}  // namespace scalecomm
