// scalecomm compress: top-k with error feedback fused into one pass over a
// contiguous float32 CPU tensor (compressedAllreduce's fast path for topk and
// topk_sampled; the ATen codec in codec.cc stays the reference and the CUDA
// path).
//
// Contract:
// - topkEncodeCpu(x, residual, ratio, exact, seed) returns the topk payload of
//   codec.h (k = keptElements(numel, ratio) x int32 index, then k x float32
//   value) for acc = x + residual.
//   residual == nullptr: no error feedback (acc = x). Otherwise *residual
//   (float32, numel of x; undefined means zero and is allocated) becomes
//   acc - decode(payload): acc everywhere except the sent elements, which
//   become 0. `x` is only read.
// - The threshold comes from the same random sample as the ATen codec
//   (seeded by `seed`): the kept elements are the k largest |acc| among those
//   above it. exact: if fewer than k pass, the exact k-th largest |acc| is
//   computed instead, so the result is the exact top-k (ties broken
//   arbitrarily); otherwise (topk_sampled) the payload is padded with
//   (index 0, value 0). A zero threshold admits only nonzero elements (the
//   rest are padding with the same decoded value).
// - topkDecodeAddCpu(out, payload, k): out[index] += value for each entry of
//   one payload (uint8 tensor of 8k bytes, any alignment).
// Cost: one read of x and the residual and one write of the residual, plus
// O(sample + candidates) work; single-threaded (a rank per core).
// Thread safety: none needed (no shared state).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace scalecomm {

at::Tensor topkEncodeCpu(const at::Tensor& x, at::Tensor* residual, double ratio, bool exact, uint64_t seed);

void topkDecodeAddCpu(at::Tensor& out, const at::Tensor& payload, int64_t k);

// Whether compressedAllreduce may take the fused path for this tensor.
bool topkCpuApplies(const at::Tensor& x);

}  // namespace scalecomm
