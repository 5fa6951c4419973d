// scalecomm compress: the random numbers codecs draw, counter based.
//
// Contract: every function is pure. draw(seed, i) is the i-th 64-bit value
// of the stream `seed` (splitmix64's output function over a Weyl sequence
// started from the mixed seed): the same on every rank, thread, device and
// build for the same (seed, i), so ranks that share a seed draw the same
// positions without sending them, and a test (or a device kernel) can
// reproduce any draw from its index alone.
// start(seed) mixes the seed once; drawFrom(start(seed), i) == draw(seed, i),
// and uniformFrom likewise, for loops that draw many values of one stream.
// - index(seed, i, n): uniform in [0, n), n >= 1 (Lemire's multiply-shift).
// - uniform(seed, i): uniform float in [0, 1), 24 random bits.
// - normal(seed, i): standard normal float (Box-Muller over draws 2i, 2i+1).
#pragma once

#include <cmath>
#include <cstdint>

namespace scalecomm {

namespace codec_random {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

inline uint64_t finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The stream's start, mixed once: draw(seed, i) is drawFrom(start(seed), i).
inline uint64_t start(uint64_t seed) { return finalize(seed + kGolden); }
inline uint64_t drawFrom(uint64_t start, uint64_t i) { return finalize(start + (i + 1) * kGolden); }
inline uint64_t draw(uint64_t seed, uint64_t i) { return drawFrom(start(seed), i); }

inline int64_t index(uint64_t seed, uint64_t i, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(draw(seed, i)) * static_cast<uint64_t>(n)) >> 64);
}

inline float uniformFrom(uint64_t start, uint64_t i) {  // 24 bits: exact through int32 (a vector conversion)
  return static_cast<float>(static_cast<int32_t>(drawFrom(start, i) >> 40)) * (1.0f / 16777216.0f);
}
inline float uniform(uint64_t seed, uint64_t i) { return uniformFrom(start(seed), i); }

inline float normal(uint64_t seed, uint64_t i) {
  const double u1 = (static_cast<double>(draw(seed, 2 * i) >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
  const double u2 = static_cast<double>(draw(seed, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace codec_random

}  // namespace scalecomm
