// scalecomm comm/cuda: the CUDA reducer, beside the host reducer
// (comm/reducer.h): the same operations as kernels queued on one stream
// (comm/cuda/reduce_kernels.h), in issue order with the queued channel's
// transfers on that stream; fence() is free (everything that reads the
// results is queued behind them). Builds with CUDA only; header only.
#pragma once

#include "comm/cuda/reduce_kernels.h"
#include "comm/reducer.h"

namespace scalecomm::cuda {

class CudaReducer final : public Reducer {
 public:
  explicit CudaReducer(void* stream) : stream_(stream) {}
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    reduceInto(dst, src, count, dtype, op, stream_);
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    divideInPlace(data, count, dtype, divisor, stream_);
  }
  void scale(void* data, int64_t count, DataType dtype, double factor) override {
    scaleInPlace(data, count, dtype, factor, stream_);
  }
  void fence() override {}

 private:
  void* stream_;
};

}  // namespace scalecomm::cuda
