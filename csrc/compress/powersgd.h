// scalecomm compress: PowerSGD (Vogels et al., 2019), one power iteration
// per call, warm-started, on raw float32 host memory.
//
// Contract: powerSgd() views the n values of c as a rows x cols matrix M
// (powerSgdShape: rows = matrixRows, a weight's own shape, or near-square
// when 0; zero padded), with Q (cols x rank, row-major) the warm start:
//   P = M Q; allreduceSum(P); P = orthonormal columns of P;
//   Q = M^T P; local = P Q^T; allreduceSum(Q); sum = P Q^T
// and keeps the summed Q for the next call. A Q of another shape (first
// call, or the tensor changed) starts from the same normal draws on every
// rank. Where the factors would not be smaller than the tensor
// (shape.gains false), sum is the dense allreduce of c and local is c.
// Columns of P that vanish (a rank-deficient M) stay zero.
// `local` (nullable) is this rank's own approximation, for the error-
// feedback residual. `sum` and `local` hold n values; neither may alias c.
// Returns false when the summed P is not finite (some rank's c was not):
// then `sum` is not finite either, and neither the warm start nor `local`
// is written, so no infinity or NaN enters the state.
// Cost: two passes over M (P and Q) plus rows x rank^2 for the
// orthonormalisation; allreduces of (rows + cols) x rank floats.
// Thread safety: none needed (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace scalecomm {

struct PowerSgdShape {
  int64_t rows, cols;
  bool gains;  // the factors are smaller than the tensor
};

PowerSgdShape powerSgdShape(int64_t n, int rank, int64_t matrixRows = 0);

// The stream of the first warm start's Q (codec_random::normal), the same on
// every rank and in both forms (torch/tensor_codecs.h).
constexpr uint64_t kPowerSgdWarmStartSeed = 0x5ca1ec033ULL;

struct PowerSgdWarmStart {
  std::vector<float> q;  // cols x rank, row-major; empty: none yet
  int64_t cols = 0;
};

bool powerSgd(const float* c, int64_t n, int rank, int64_t matrixRows, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* sum, float* local);

}  // namespace scalecomm
