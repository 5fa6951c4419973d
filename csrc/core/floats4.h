// scalecomm core: four floats as one GCC/Clang vector (an SSE2 or NEON
// register), for the host loops gcc does not vectorise in scalar form.
//
// Contract: Floats4's arithmetic is per lane, one IEEE operation each: the
// same bits as the scalar code in the same order, as the compiler fuses no
// multiply-add (x86-64's baseline has no FMA; the build passes
// -ffp-contract=off, so an FMA target such as aarch64 fuses none either).
// load4/store4 take any alignment. splat4 copies a into every lane (a -0
// keeps its sign, which 0 + a would not).
// Stateless.
#pragma once

#include <cstring>

namespace scalecomm {

using Floats4 = float __attribute__((vector_size(16)));

inline Floats4 load4(const float* p) {
  Floats4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, Floats4 v) { std::memcpy(p, &v, sizeof v); }
inline Floats4 splat4(float a) { return Floats4{a, a, a, a}; }

}  // namespace scalecomm
