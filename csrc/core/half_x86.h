// scalecomm core: fp16 arithmetic in bulk with the x86 F16C instructions.
//
// Contract: f16cAvailable() says whether this CPU has AVX and F16C (checked
// once at run time; false on other architectures, where nothing else here
// may be called). Every function gives, for every value but a NaN, the bits
// of the per-element code in core/half.h and core/elementwise.h (widen to
// fp32, one IEEE operation, round to nearest even), eight values at a time;
// a NaN stays a NaN, with the hardware's payload. Pointers need no
// alignment. Stateless and thread safe.
// - fp16Fold(dst, also, in, k, n, divisor): dst[i] (and also[i], where not
//   null) = the sum in[0][i] + in[1][i] + ... + in[k-1][i], rounded to fp16
//   after each addition, then divided by divisor where it is over 1. k >= 1;
//   an input may be dst or also (each element is read before it is written).
// - fp16Divide(p, n, divisor): p[i] = p[i] / divisor.
// - fp16Encode(x, residual, n, out): out[i] = fp16(acc), acc = x[i] (+
//   residual[i] where not null, which becomes acc - float(out[i])); returns
//   whether every acc (with a residual: every new residual) is finite.
// - fp16Decode(out, n, in, add, divisor): out[i] += float(in[i]) (add), or
//   out[i] = (0 + float(in[i])) / divisor (divisor 1: no divide).
#pragma once

#include <cstdint>

namespace scalecomm {

bool f16cAvailable();

void fp16Fold(uint16_t* dst, uint16_t* also, const uint16_t* const* in, int k, int64_t n, int64_t divisor);
void fp16Divide(uint16_t* p, int64_t n, int64_t divisor);
bool fp16Encode(const float* x, float* residual, int64_t n, uint8_t* out);
void fp16Decode(float* out, int64_t n, const uint8_t* in, bool add, int64_t divisor);

}  // namespace scalecomm
