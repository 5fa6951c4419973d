// scalecomm compress: PowerSGD (Vogels et al., 2019), one power iteration
// per call, warm-started, on raw float32 host memory.
//
// Contract: powerSgd() compresses c = x + residual (x: this rank's n
// values on entry; `residual`: nullable, n values, not aliasing x, what the
// last call left out) block by block (`layout`: the weights of a DDP
// bucket, in order; empty: one near-square matrix). A matrix block M of c
// (rows x cols, zero padded) with Q (cols x rank, row-major) its warm start
// runs
//   P = M Q; allreduceSum(all P and the dense blocks); P = orthonormal
//   columns of P; Q = M^T P; residual = M - P Q^T;
//   allreduceSum(all Q); M's values in x = P Q^T / divisor
// and keeps its summed Q for the next call: two allreduces per call, however
// many blocks. A dense block (kPowerSgdDense: a bias, a norm's scale, or a
// matrix whose factors would not be smaller than it) is summed exactly in the
// first allreduce, divided, and leaves a zero residual. The division is one
// per value, as divideInPlace's (divisor 1: none). Warm starts of another
// layout (first call, or the tensor changed) start from the same normal
// draws on every rank (block-local indices). Columns of P that vanish (a
// rank-deficient M) stay zero.
// When this rank's c is not finite, it sends infinities and its residual
// starts afresh (zeros). When the first sum is not finite (some rank's c was
// not), x is not finite either, and neither the warm start nor (on the
// ranks whose c was finite) the residual is written, so no infinity or NaN
// enters the state.
// Cost: one pass over x (c, and whether it is finite), then three over
// each matrix (P, Q, and one that writes the residual and x), plus rows x
// rank^2 for the orthonormalisation; allreduces of (rows + cols) x rank
// floats plus the dense values. Each of P's entries is summed in 8 partial
// sums (element j into sum j mod 8, added pairwise), each of Q's and of the
// products in order, no fused multiply-add (core/floats4.h): the same bits
// on every machine.
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

// `count` values after the previous block's: a rows x (count / rows) matrix
// (rows 0: near-square), or kPowerSgdDense: summed exactly.
constexpr int64_t kPowerSgdDense = -1;
struct PowerSgdBlock {
  int64_t count;
  int64_t rows;
};
using PowerSgdLayout = std::vector<PowerSgdBlock>;

// The layout's blocks with their shapes and offsets into x, P's and the
// dense values' buffer (first allreduce) and Q's (second): what both forms
// (host, torch/tensor_codecs.h) run. An empty layout is one block {n, 0}.
// Throws (ErrorKind::InvalidArgument) when the counts do not add up to n or a
// matrix's rows do not divide its count.
struct PowerSgdPlan {
  struct Block {
    int64_t offset, count;
    PowerSgdShape shape;  // gains false: dense
    int64_t first;        // offset in the first buffer (P, or the dense values)
    int64_t second;       // offset in the second (Q), matrices only
  };
  std::vector<Block> blocks;
  int64_t firstCount = 0, secondCount = 0;
  int64_t qCols = 0;  // the warm starts' rows together (sum of the matrices' cols)
};
PowerSgdPlan powerSgdPlan(int64_t n, int rank, const PowerSgdLayout& layout);

// The stream of the first warm start's Q (codec_random::normal), the same on
// every rank and in both forms (torch/tensor_codecs.h).
constexpr uint64_t kPowerSgdWarmStartSeed = 0x5ca1ec033ULL;

struct PowerSgdWarmStart {
  std::vector<float> q;  // per matrix block, cols x rank, row-major; empty: none yet
  int64_t cols = 0;      // the blocks' cols together
};

void powerSgd(float* x, int64_t n, int rank, const PowerSgdLayout& layout, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* residual, int64_t divisor = 1);

}  // namespace scalecomm
