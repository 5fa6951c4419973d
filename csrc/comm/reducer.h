// scalecomm comm: element-wise reductions on host memory.
//
// Contract: reduceInto(dst, src, count) computes dst[i] = op(dst[i], src[i]) for
// the (op, dtype) pairs reduceOpSupports() accepts. Sum/Avg/PremulSum all add
// here (scaling is separate: premultiply before, finalize after). fp16 and bf16
// are widened to fp32, combined, and rounded back (round-to-nearest-even); their
// sums run in AVX2/F16C where the CPU has them (core/half_x86.h: the same bits
// but an fp16 NaN's payload).
// src and dst may be unaligned to anything larger than the element size and
// must not overlap partially. The loops vectorise at baseline x86-64 for every
// dtype and op but int64 min, max and product (tests/test_vectorized.py). The
// per-element math is core/elementwise.h, shared with the CUDA kernels.
// Stateless and thread safe.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

void reduceInto(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op);
// dst[i] = op(a[i], b[i]), same rules (dst may be a or b, or overlap neither).
void reduceFrom(void* dst, const void* a, const void* b, int64_t count, DataType dtype, ReduceOp op);
// dst[i] = op(...op(op(in[0][i], in[1][i]), in[2][i])..., in[k-1][i]),
// divided by `divisor` where it is over 1 (AVG's finish), and the same into
// also[i] where `also` is not null: one pass over memory with the bits of
// reduceFrom, reduceInto for each later input and divideInPlace in that
// order. k >= 2; each element of the inputs is read before it is written:
// `also` is null or one of the inputs, and dst overlaps none of them or, where
// `also` is null, is one of them (the fold in place).
void foldInto(void* dst, void* also, const void* const* in, int k, int64_t count, DataType dtype, ReduceOp op,
              int64_t divisor = 1);

// How the executor does arithmetic on the memory a collective runs on: the
// host functions here, or CUDA kernels on a stream (comm/cuda/), or the CPU
// emulation of a stream (comm/emulated_queues.h). reduce(), divide() and
// scale() may only queue the work. On a stream channel `src` is valid during
// the call only (it points into a transport's buffer), so a reducer that
// queues copies it; a queued channel's reductions read its scratch, which
// stays valid in queue order. fence() returns once everything queued has
// landed: the executor fences before it marks a stream channel's
// receive-reduce or finalize task done, so no later task (a send of that
// memory, the collective's return) sees it half reduced. A queued channel's
// reducer works in the channel's queue order and its fence() is free. Used by
// one thread at a time.
class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) = 0;
  virtual void divide(void* data, int64_t count, DataType dtype, int64_t divisor) = 0;
  // data[i] *= factor (PREMUL_SUM's pre-multiplication); floating types only.
  virtual void scale(void* data, int64_t count, DataType dtype, double factor) = 0;
  virtual void fence() = 0;
};

// The synchronous host reducer (reduceInto / divideInPlace; fence() is free).
Reducer& hostReducer();

// dst[i] *= factor (PREMUL_SUM's pre-multiplication); floating types only.
void scaleInPlace(void* data, int64_t count, DataType dtype, double factor);

// AVG's final step: dst[i] /= divisor (integer types truncate toward zero).
void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor);

}  // namespace scalecomm
