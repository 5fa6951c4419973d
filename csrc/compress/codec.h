// scalecomm compress: gradient codecs (what a compressed allreduce sends).
//
// Contract: every codec is one CodecEntry of codecRegistry() (codec.cc),
// made by one file of compress/codecs/: its name, the argument its spec
// takes, whether it is biased (error feedback on by default), and how to
// make it. CodecSpec::parse reads "<name>" or "<name>:<argument>" ("fp16",
// "topk:0.01", "qsgd:8", "powersgd:4", ...) against that table
// (Error(InvalidArgument) naming the choices otherwise); the parser, str(),
// biased(), makeCodec, the compressed allreduce, the hooks (which pass a
// shaped codec their weights' shapes) and pyscalecomm.codec_table() read
// it. Adding a codec is its file (which defines `CodecEntry <name>Codec()`)
// plus one line of the table in codec.cc.
//
// A Codec works on raw host memory: float32 values in, a byte payload out,
// with no dependency beyond the standard library (the C++ tests build and
// check every codec without torch). Payload fields need no alignment.
// - encode(x, residual, n, payload, seed, rank): payload <- encode(acc) with
//   acc = x + *residual (residual == nullptr: acc = x, no error feedback);
//   with a residual, it becomes acc - decode(payload). `x` is only read.
//   It writes every one of the payloadBytes(n) bytes (the caller reuses
//   payload memory between calls without clearing it). It returns whether
//   every value of acc, and of what the residual keeps, is finite (tested
//   in the pass that reads acc, or in a pass of its own where that costs
//   less: top-k); on false, payload and residual hold whatever the pass
//   left: the caller starts the residual afresh and encodes again.
//   `seed` is the same on every rank for a step (random-k's positions,
//   top-k's sample), `rank` decorrelates stochastic rounding.
// - decodeAdd(out, n, payload, seed): out += decode(payload), for one rank's
//   payload or, for a summable codec, the sum of all ranks' payloads.
// - decode(out, n, payload, seed, divisor): out = decode(payload) / divisor,
//   out's contents before unread: the bits that clearing out, decodeAdd and
//   dividing each value by float(divisor) give (divisor 1: no divide; a -0
//   comes out +0). A codec may override it to write in one pass (the casts
//   do); the compressed allreduce decodes a summed payload with it.
// - sumType(): summable codecs (fp16, bf16, random-k with positions from the
//   shared seed) return the element type their payloads are summed in, so
//   the collective allreduces payloads; the others return nullopt, and their
//   payloads are allgathered and each decoded into the sum.
// - payloadBytes(n): bytes a rank sends per call, as on the wire.
// Wire formats (little-endian, per rank):
//   fp16 / bf16: n x 2 B.
//   topk(k): k x int32 index, then k x float32 value (ratio 8k/4n).
//   randomk(k): k x float32 value (positions from the seed; ratio k/n).
//   qsgd(s <= 127): ceil(n/512) x float32 norm (one per bucket of 512), then
//     n x int8 signed level (value = norm / s * level; stochastic rounding
//     keeps it unbiased).
//   sign: ceil(n/256) x float32 scale (mean |x| of each block of 256), then
//     ceil(n/8) bytes of sign bits (bit i of byte j: element 8j+i >= 0).
// PowerSGD has no Codec (two rounds of communication): compress/powersgd.h.
// Thread safety: codecs are immutable; one may serve many threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

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
  // null for a codec of its own protocol (powersgd: compress/powersgd.h).
  std::unique_ptr<Codec> (*make)(const CodecSpec& spec);
  const char* summary;
  // Factors each weight in its own matrix shape: a caller that knows its
  // tensor's weights passes their shapes (PowerSgdLayout), and without them
  // the tensor is one matrix (2-D) or sent dense (flat).
  bool shaped = false;
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
  virtual int64_t payloadBytes(int64_t n) const = 0;
  virtual std::optional<DataType> sumType() const = 0;
  virtual bool encode(const float* x, float* residual, int64_t n, uint8_t* payload, uint64_t seed, int rank) const = 0;
  virtual void decodeAdd(float* out, int64_t n, const uint8_t* payload, uint64_t seed) const = 0;
  virtual void decode(float* out, int64_t n, const uint8_t* payload, uint64_t seed, int64_t divisor) const;
  bool summable() const { return sumType().has_value(); }
};

// A codec for spec; InvalidArgument for one of its own protocol (powersgd).
std::unique_ptr<Codec> makeCodec(const CodecSpec& spec);

// The wire formats' constants, shared by the host codecs and their torch
// form (torch/tensor_codecs.h), so that both send the same bytes.
constexpr int64_t kQsgdBucket = 512;  // QSGD: values per norm
constexpr int64_t kSignBlock = 256;   // sign: values per scale; a multiple of 8
// QSGD's rounding noise for `rank` at the step's `seed`: a stream of its own
// per rank and step (codec_random).
constexpr uint64_t qsgdNoiseStream(uint64_t seed, int rank) {
  return seed * 1000003ULL + static_cast<uint64_t>(rank) + 1;
}

// Elements top-k / random-k keep out of n (at least 1).
int64_t keptElements(int64_t n, double ratio);

// 1 if v is an infinity or NaN, else 0 (branch-free: a codec ORs it over
// the values its pass reads, and the loop still vectorises).
inline uint32_t nonFinite(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
}

// No element of x[0..n) is an infinity or NaN (one pass; vectorises).
inline bool allFinite(const float* x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= nonFinite(x[i]);
  return bad == 0;
}

// Unaligned payload fields.
template <typename T>
inline T loadField(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void storeField(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace scalecomm
