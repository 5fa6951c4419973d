// fp16 / bf16: every value cast to a 2-byte float (round to nearest even),
// payloads summed in that type. On x86 CPUs with AVX2 and F16C (checked at
// run time) eight values at a time (core/half_x86.h): the same bits as
// core/half.h's conversions for every value but an fp16 NaN, which stays a
// NaN (with the hardware's payload).
#include "compress/codec.h"
#include "core/half.h"
#include "core/half_x86.h"

namespace scalecomm {

namespace {

// The cast to kType; on x86 with AVX2 and F16C the vector code of
// core/half_x86.h, elsewhere these loops (which the compiler vectorises).
template <uint16_t (*toHalf)(float), float (*fromHalf)(uint16_t), DataType kType>
class CastCodec final : public Codec {
 public:
  int64_t payloadBytes(int64_t n) const override { return 2 * n; }
  std::optional<DataType> sumType() const override { return kType; }
  bool encode(const float* __restrict__ x, float* __restrict__ residual, int64_t n, uint8_t* __restrict__ payload,
              uint64_t, int) const override {
    if (x86_) return halfEncode(kType, x, residual, n, payload);
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
    if (x86_) return halfDecode(kType, out, n, payload, true, 1);
    for (int64_t i = 0; i < n; ++i) out[i] += fromHalf(loadField<uint16_t>(payload + 2 * i));
  }
  // One pass; 0.f + v turns -0 into +0, as adding onto cleared memory does.
  void decode(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t,
              int64_t divisor) const override {
    if (x86_) return halfDecode(kType, out, n, payload, false, divisor);
    if (divisor == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = 0.f + fromHalf(loadField<uint16_t>(payload + 2 * i));
      return;
    }
    const auto d = static_cast<float>(divisor);
    for (int64_t i = 0; i < n; ++i) out[i] = (0.f + fromHalf(loadField<uint16_t>(payload + 2 * i))) / d;
  }

 private:
  bool x86_ = x86HalvesAvailable();
};

}  // namespace

CodecEntry fp16Codec() {
  return {"fp16", CodecArg::None, false,
          [](const CodecSpec&) -> std::unique_ptr<Codec> {
            return std::make_unique<CastCodec<floatToFp16, fp16ToFloat, DataType::Float16>>();
          },
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
