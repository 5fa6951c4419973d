// scalecomm compress: PowerSGD (Vogels et al., 2019), one power iteration
// per call, warm-started, on raw float32 host memory.
//
// Contract: powerSgd() views the n values of x (on entry: this rank's c, the
// gradient plus its carried residual) as a rows x cols matrix M
// (powerSgdShape: rows = matrixRows, a weight's own shape, or near-square
// when 0; zero padded), with Q (cols x rank, row-major) the warm start:
//   P = M Q; allreduceSum(P); P = orthonormal columns of P;
//   Q = M^T P; residual = M - P Q^T; allreduceSum(Q); x = P Q^T
// and keeps the summed Q for the next call. A Q of another shape (first
// call, or the tensor changed) starts from the same normal draws on every
// rank. Where the factors would not be smaller than the tensor
// (shape.gains false), x is the dense allreduce of c and the residual zero.
// Columns of P that vanish (a rank-deficient M) stay zero.
// `residual` (nullable, n values, not aliasing x) receives what this rank's
// approximation left out, for error feedback.
// Returns false when the summed P is not finite (some rank's c was not):
// then x is not finite either, and neither the warm start nor the residual
// is written, so no infinity or NaN enters the state.
// Cost: three passes over M (P, Q and the residual), one over x for the sum,
// plus rows x rank^2 for the orthonormalisation; allreduces of
// (rows + cols) x rank floats. Each of P's entries is summed in 8 partial
// sums (element j into sum j mod 8), the same order on every machine.
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

bool powerSgd(float* x, int64_t n, int rank, int64_t matrixRows, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* residual);

}  // namespace scalecomm
