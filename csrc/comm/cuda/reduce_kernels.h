// scalecomm comm/cuda: reduction kernels on device memory (builds with CUDA only).
//
// Contract: the same operations as comm/reducer.h, on device pointers, queued
// on `stream` (a cudaStream_t; nullptr is the legacy default stream) and
// returning at once. The per-element math is core/elementwise.h, shared with
// the CPU reducer, so the CPU tests of reduceInto cover the arithmetic; fp16
// and bf16 accumulate in fp32. Loads and stores are 16-byte vectors when both
// pointers are 16-byte aligned, element-wise otherwise. Launch errors throw
// Error(Io) naming the kernel and CUDA's message; errors of the kernel itself
// surface at the next synchronisation, as with any CUDA work.
// Thread safety: stateless.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm::cuda {

void reduceInto(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op, void* stream);
void scaleInPlace(void* data, int64_t count, DataType dtype, double factor, void* stream);
void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor, void* stream);

}  // namespace scalecomm::cuda
