// scalecomm compress: gradient codecs (what a compressed allreduce sends).
//
// Contract: every codec is one CodecEntry of codecRegistry() (codec.cc):
// its name, the argument its spec takes, whether it is biased (error
// feedback on by default), whether the fused float32 CPU path serves it, and
// how to make it. CodecSpec::parse reads "<name>" or "<name>:<argument>"
// ("fp16", "topk:0.01", "qsgd:8", "powersgd:4", ...) against that table
// (Error(InvalidArgument) naming the choices otherwise); the parser, str(),
// biased(), makeCodec, the compressed allreduce's routing, the hooks and
// pyscalecomm.codec_table() read it. Adding a codec is its Codec class plus
// one entry. A Codec turns a
// float32 1-D tensor into a payload and back, with ATen operations only, so
// the same code runs on CPU and CUDA tensors (the CPU tests exercise it).
// - summable(): payloads of all ranks add up to the payload of the sum
//   (fp16, bf16, random-k with indices from the shared seed), so the
//   collective allreduces payloads; otherwise (top-k, QSGD, sign) it
//   allgathers them and decodes each into the sum.
// - encode(x, seed, rank) -> payload; `seed` is the same on every rank for a
//   step (random-k's indices), `rank` decorrelates stochastic rounding.
// - decodeAdd(out, payload): out += decode(payload) (payload of one rank, or
//   the summed payload of a summable codec).
// - wireBytes(numel): bytes a rank sends per call, as on the wire.
// Wire formats (little-endian, per rank):
//   fp16 / bf16: numel x 2 B.
//   topk(k): k x int32 index, then k x float32 value (ratio 8k/4n).
//   randomk(k): k x float32 value (indices from the seed; ratio k/n).
//   qsgd(s <= 127): ceil(n/512) x float32 norm (one per bucket of 512), then
//     numel x int8 signed level (value = norm * level / s; stochastic
//     rounding keeps it unbiased).
//   sign: ceil(n/B) x float32 scale (mean |x| of each block of B = 256),
//     then ceil(n/8) bytes of sign bits (bit i of byte j: element 8j+i >= 0).
// PowerSGD is not a Codec (two rounds of communication): compress/powersgd.h.
// Biased codecs (topk, randomk, sign, powersgd) use error feedback by default.
// Thread safety: codecs are stateless.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace scalecomm {

class Codec;
struct CodecSpec;

// What a codec's spec takes after the colon: nothing, the share of values
// kept (0, 1], quantisation levels [1, 127], or a low-rank approximation's
// rank [1, 64].
enum class CodecArg : uint8_t { None, Ratio, Levels, Rank };

struct CodecEntry {
  const char* name;
  CodecArg arg;
  bool biased;  // error feedback on by default
  // One round of communication (encode, allreduce or allgather, decode);
  // null for a codec of its own protocol (powersgd: compressed_allreduce.cc).
  std::unique_ptr<Codec> (*make)(const CodecSpec& spec);
  const char* summary;
  // The fused pass over a contiguous float32 CPU tensor (null: none): encode
  // x + *residual into the codec's payload, updating *residual (nullptr: no
  // error feedback); and out += decode(one rank's payload). Allgathered.
  at::Tensor (*fusedEncode)(const at::Tensor& x, at::Tensor* residual, const CodecSpec& spec, uint64_t step) = nullptr;
  void (*fusedDecodeAdd)(at::Tensor& out, const at::Tensor& payload, const CodecSpec& spec) = nullptr;
};

const std::vector<CodecEntry>& codecRegistry();
// The entry named `name`, or nullptr.
const CodecEntry* findCodec(const std::string& name);

struct CodecSpec {
  const CodecEntry* entry = nullptr;
  std::string name;     // entry->name
  double ratio = 0.01;  // CodecArg::Ratio: share of elements sent
  int levels = 8;       // CodecArg::Levels
  int rank = 4;         // CodecArg::Rank
  static CodecSpec parse(const std::string& spec);
  std::string str() const;  // canonical, e.g. "topk:0.01"
  bool biased() const { return entry->biased; }
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual bool summable() const = 0;
  virtual at::Tensor encode(const at::Tensor& x, uint64_t seed, int rank) const = 0;
  virtual void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t seed) const = 0;
  virtual int64_t wireBytes(int64_t numel) const = 0;
};

// A codec for spec; InvalidArgument for one of its own protocol (powersgd).
std::unique_ptr<Codec> makeCodec(const CodecSpec& spec);

constexpr int64_t kSignBlock = 256;  // elements per scale of the sign codec

// Elements top-k / random-k keep out of numel (at least 1).
int64_t keptElements(int64_t numel, double ratio);

// topk_sampled's threshold: the topkSampleRank-th largest |x| of
// topkSampleSize(numel) elements drawn (with replacement) by
// topkSamplePositions; shared by the ATen codec and the fused CPU path
// (compress/topk_cpu.h) so both pick the same threshold.
constexpr int64_t kTopkExactUpTo = 65536;  // topk_sampled is exact up to this numel
int64_t topkSampleSize(int64_t numel);
int64_t topkSampleRank(int64_t sampleSize, double ratio);
at::Tensor topkSamplePositions(int64_t numel, uint64_t seed);  // int64 CPU tensor

}  // namespace scalecomm
