// scalecomm core: fp16 and bf16 arithmetic in bulk with x86 vector
// instructions (AVX2, and F16C's fp16 conversions).
//
// Contract: x86HalvesAvailable() says whether this CPU has AVX2 and F16C
// (checked once at run time; false on other architectures, where nothing
// else here may be called). Every function gives, for every value, the bits
// of the per-element code in core/half.h and core/elementwise.h (widen to
// fp32, one IEEE operation, round to nearest even), eight values at a time;
// the one exception is an fp16 NaN, which stays a NaN with the hardware's
// payload. `dtype` is Float16 or BFloat16. Pointers need no alignment.
// Stateless and thread safe.
// - halfFold(dtype, dst, also, in, k, n, divisor): dst[i] (and also[i],
//   where not null) = in[0][i] + in[1][i] + ... + in[k-1][i], rounded to
//   dtype after each addition, then divided by divisor where it is over 1.
//   k >= 1; an input may be dst or also (each element is read before it is
//   written).
// - halfDivide(dtype, p, n, divisor): p[i] = p[i] / divisor.
// - halfEncode(dtype, x, residual, n, out): out[i] = dtype(acc), acc = x[i]
//   (+ residual[i] where not null, which becomes acc - float(out[i]));
//   returns whether every acc (with a residual: every new residual) is
//   finite.
// - halfDecode(dtype, out, n, in, add, divisor): out[i] += float(in[i])
//   (add), or out[i] = (0 + float(in[i])) / divisor (divisor 1: no divide).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace scalecomm {

bool x86HalvesAvailable();

void halfFold(DataType dtype, uint16_t* dst, uint16_t* also, const void* const* in, int k, int64_t n, int64_t divisor);
void halfDivide(DataType dtype, uint16_t* p, int64_t n, int64_t divisor);
bool halfEncode(DataType dtype, const float* x, float* residual, int64_t n, uint8_t* out);
void halfDecode(DataType dtype, float* out, int64_t n, const uint8_t* in, bool add, int64_t divisor);

}  // namespace scalecomm
