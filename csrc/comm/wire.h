// scalecomm comm: the message header every segment carries on the wire.
//
// Contract: one 64-byte header precedes each payload; payload plus padding make
// the message a multiple of 64 bytes (so headers never straddle a ring's end).
// The receiver checks every field against what it expects and reports both
// sides' values on a mismatch: that is how different shapes, dtypes, ops, roots
// or collectives across ranks become clear errors instead of corrupted data.
// POD, same layout on every host (little-endian x86_64/aarch64 assumed).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

enum class CollectiveKind : uint8_t {
  Allreduce = 0,
  Broadcast = 1,
  Allgather = 2,
  Barrier = 3,
  Reduce = 4,
  ReduceScatter = 5,
  Gather = 6,
  Scatter = 7,
  Alltoall = 8,
  SendRecv = 9,
  // A rank's last message on a link when it leaves the group in order (every
  // call it made completed): a header alone, and nothing follows it.
  Leave = 10,
};

inline const char* collectiveName(CollectiveKind k) {
  static const char* names[] = {"allreduce", "broadcast", "allgather", "barrier",   "reduce", "reduce_scatter",
                                "gather",    "scatter",   "alltoall",  "send/recv", "leave"};
  auto i = static_cast<unsigned>(k);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

// Which exchange of a collective call a message belongs to. A group may run
// more than one exchange under a call's seq: auto's online selection agrees
// on the ranks' times right after a measured call, and a compressed call
// runs its codec's rounds and auto's decision one after another. A rank
// still in one exchange must not take a peer's message (or window post) of
// the next for its own, so the part is part of the identity every check
// compares, and two consecutive exchanges under one seq never share it.
enum class CallPart : uint8_t {
  Call = 0,       // the collective the user called (a compressed call's first exchange)
  Agreement = 1,  // auto's agreement on the call's times (a small allreduce)
  Later = 2,      // a compressed call's later exchanges: Later + k for its (k+2)-th, modulo 254
};

// The part of a compressed call's exchange number k (0: its first).
inline CallPart exchangePart(int k) {
  return k == 0 ? CallPart::Call : static_cast<CallPart>(static_cast<int>(CallPart::Later) + (k - 1) % 254);
}

inline const char* callPartName(uint8_t part) {
  return part == static_cast<uint8_t>(CallPart::Call)        ? "the call"
         : part == static_cast<uint8_t>(CallPart::Agreement) ? "auto's agreement on its times"
                                                             : "a later exchange of the compressed call";
}

constexpr uint32_t kWireMagic = 0x5343574d;  // "SCWM"
constexpr uint64_t kWireAlign = 64;

struct alignas(64) WireHeader {
  uint32_t magic;
  uint8_t collective;  // CollectiveKind
  uint8_t dtype;       // DataType
  uint8_t reduceOp;    // ReduceOp
  uint8_t part;        // CallPart
  // Collectives: the root rank (-1 when the collective has none);
  // point-to-point messages (collective SendRecv): the tag.
  int32_t rootOrTag;
  int32_t step;        // schedule step
  uint64_t seq;        // collective sequence number in the group
  int64_t totalCount;  // elements of the whole collective (per rank), for shape checks
  int64_t block;       // schedule block
  int64_t segment;     // segment within the block
  int64_t payloadBytes;
  // What must agree for the messages to match (wireId of each; 0: none): the
  // algorithm's name, and the settings that shape its messages (segment
  // size, parameter-server count). Ranks configured differently fail with
  // a message naming the difference instead of a step/segment mismatch.
  uint32_t algorithm;
  uint32_t settings;
};
static_assert(sizeof(WireHeader) == 64, "wire header must be 64 bytes");

// A 32-bit FNV-1a digest of `text` for the header's identity fields; 0 for "".
inline uint32_t wireId(const char* text, size_t n) {
  if (n == 0) return 0;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(text[i])) * 16777619u;
  return h == 0 ? 1 : h;
}

inline WireHeader leaveHeader() {
  WireHeader h{};
  h.magic = kWireMagic;
  h.collective = static_cast<uint8_t>(CollectiveKind::Leave);
  h.rootOrTag = -1;
  return h;
}

// The whole header, not its kind alone: a peek that lands inside a payload
// cannot pass for a notice by chance.
inline bool isLeave(const WireHeader& h) {
  const WireHeader notice = leaveHeader();
  return std::memcmp(&h, &notice, sizeof(h)) == 0;
}

inline uint64_t paddedMessageBytes(int64_t payloadBytes) {
  uint64_t total = sizeof(WireHeader) + static_cast<uint64_t>(payloadBytes);
  return (total + kWireAlign - 1) / kWireAlign * kWireAlign;
}

}  // namespace scalecomm
