// sign: one bit per value (value >= 0) and one scale per block of 256 (the
// block's mean |value|); decoded as +-scale. With error feedback the
// residual becomes acc - (+-scale).
#include <algorithm>
#include <cmath>

#include "compress/codec.h"

namespace scalecomm {

namespace {

// signs[byte][t]: +1 where bit t of byte is set, else -1.
struct SignTable {
  float signs[256][8];
  SignTable() {
    for (int byte = 0; byte < 256; ++byte)
      for (int t = 0; t < 8; ++t) signs[byte][t] = ((byte >> t) & 1) ? 1.f : -1.f;
  }
};

class SignCodec final : public Codec {
 public:
  int64_t payloadBytes(int64_t n) const override { return 4 * blocks(n) + (n + 7) / 8; }
  std::optional<DataType> sumType() const override { return std::nullopt; }

  bool encode(const float* __restrict__ x, float* __restrict__ r, int64_t n, uint8_t* __restrict__ payload, uint64_t,
              int) const override {
    uint8_t* bits = payload + 4 * blocks(n);
    float acc[kSignBlock];
    uint32_t bad = 0;
    for (int64_t b = 0; b < blocks(n); ++b) {
      const int64_t lo = b * kSignBlock, len = std::min<int64_t>(kSignBlock, n - lo);
      for (int64_t j = 0; j < len; ++j) {
        acc[j] = r ? x[lo + j] + r[lo + j] : x[lo + j];
        bad |= nonFinite(acc[j]);
      }
      const float scale = absoluteSum(acc, len) / static_cast<float>(len);
      storeField<float>(payload + 4 * b, scale);
      const int64_t whole = len & ~int64_t{7};
      for (int64_t j = 0; j < whole; j += 8) {
        uint32_t byte = 0;
        for (int t = 0; t < 8; ++t) byte |= static_cast<uint32_t>(acc[j + t] >= 0.f) << t;
        bits[(lo + j) >> 3] = static_cast<uint8_t>(byte);
      }
      if (whole < len) {
        uint32_t byte = 0;
        for (int64_t j = whole; j < len; ++j) byte |= static_cast<uint32_t>(acc[j] >= 0.f) << (j - whole);
        bits[(lo + whole) >> 3] = static_cast<uint8_t>(byte);
      }
      if (r) {
        for (int64_t j = 0; j < len; ++j) r[lo + j] = acc[j] - (acc[j] >= 0.f ? scale : -scale);
      }
    }
    return bad == 0;
  }

  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t) const override {
    // Whole bytes through a table of their eight signs (the inner loop
    // vectorises); the last block's tail bit by bit.
    static const SignTable table;
    const uint8_t* bits = payload + 4 * blocks(n);
    for (int64_t b = 0; b < blocks(n); ++b) {
      const float scale = loadField<float>(payload + 4 * b);
      const int64_t lo = b * kSignBlock, hi = std::min<int64_t>(n, lo + kSignBlock),
                    whole = lo + ((hi - lo) & ~int64_t{7});
      int64_t i = lo;
      for (; i < whole; i += 8) {
        const float* sign = table.signs[bits[i >> 3]];
        for (int t = 0; t < 8; ++t) out[i + t] += scale * sign[t];
      }
      for (; i < hi; ++i) out[i] += ((bits[i >> 3] >> (i & 7)) & 1u) ? scale : -scale;
    }
  }

 private:
  static int64_t blocks(int64_t n) { return (n + kSignBlock - 1) / kSignBlock; }
  // sum |acc[j]|, j < len, in 8 interleaved partial sums (a fixed order, the
  // same on every rank and build: the loop vectorises, a single chain of
  // additions would not).
  static float absoluteSum(const float* __restrict__ acc, int64_t len) {
    float part[8] = {};
    int64_t j = 0;
    for (; j + 8 <= len; j += 8)
      for (int t = 0; t < 8; ++t) part[t] += std::fabs(acc[j + t]);
    for (int t = 0; j < len; ++j, ++t) part[t] += std::fabs(acc[j]);
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  }
};

}  // namespace

CodecEntry signCodec() {
  return {"sign", CodecArg::None, true,
          [](const CodecSpec&) -> std::unique_ptr<Codec> { return std::make_unique<SignCodec>(); },
          "sign bits with one scale (mean |x|) per block of 256 (1 bit a value); allgathered"};
}

}  // namespace scalecomm
