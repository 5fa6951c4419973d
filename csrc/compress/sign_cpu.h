// scalecomm compress: the sign (1-bit) codec with error feedback fused into
// one pass over a contiguous float32 CPU tensor (compressedAllreduce's fast
// path for "sign"; the ATen codec in codec.cc stays the reference and the
// CUDA path).
//
// Contract:
// - signEncodeCpu(x, residual) returns the sign payload of codec.h
//   (ceil(n/256) float32 scales = mean |acc| per block of 256, then ceil(n/8)
//   bytes of bits, bit i of byte j set when acc[8j+i] >= 0) for
//   acc = x + residual. residual == nullptr: no error feedback. Otherwise
//   *residual (float32, numel of x; undefined means zero and is allocated)
//   becomes acc - decode(payload). `x` is only read.
// - signDecodeAddCpu(out, payload): out += decode(payload) for one payload
//   (uint8 tensor, any alignment).
// Results equal the ATen codec's up to float summation order in the scales.
// Cost: one read of x and the residual and one write of the residual.
// Thread safety: none needed (no shared state).
#pragma once

#include <ATen/ATen.h>

namespace scalecomm {

at::Tensor signEncodeCpu(const at::Tensor& x, at::Tensor* residual);

void signDecodeAddCpu(at::Tensor& out, const at::Tensor& payload);

}  // namespace scalecomm
