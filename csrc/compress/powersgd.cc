#include "compress/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "comm/reducer.h"
#include "compress/codec.h"
#include "compress/random.h"
#include "core/error.h"
#include "core/floats4.h"

namespace scalecomm {

namespace {

// Q is kept transposed inside a call (qt: rank x cols, each of Q's columns
// contiguous) so that every pass below runs along M's rows, four values at
// a time in GCC/Clang vector types (SSE2, NEON; gcc 12 vectorises none of
// the scalar forms, whose sums it keeps in memory; eight-wide AVX measured
// no faster: the passes are bound by memory). Every product and sum is one
// IEEE operation in a fixed order (no fused multiply-add: core/floats4.h),
// so the bits are the same on every machine.

// qt's rows lie `ld` floats apart: cols rounded up to a cache line, one
// line more where that is a multiple of 2 KiB. A power-of-two stride would
// put a block's r rows of Q (and of this rank's Q, read beside them) in the
// same L1 sets, which the last pass's ten streams (M, the residual, r rows
// of each Q) overflow. Q travels packed (cols apart) for its sum.
int64_t qStride(int64_t cols) {
  const int64_t ld = (cols + 15) / 16 * 16;
  return ld % 512 == 0 ? ld + 16 : ld;
}

int64_t rowLength(const PowerSgdShape& s, int64_t n, int64_t i) {
  return std::max<int64_t>(0, std::min(s.cols, n - i * s.cols));
}

// out[b] = M's row m (len values) . qt's row b, for B rows of qt from q (a
// row every `stride` values); each sum in 8 partial sums (element j into j
// mod 8, added pairwise at the end), then the tail in order.
template <int B>
void rowDots(const float* m, int64_t len, const float* q, int64_t stride, float* out) {
  Floats4 acc[B][2] = {};  // elements 0-3 and 4-7 of each eight
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) {
    for (int g = 0; g < 2; ++g) {
      const Floats4 v = load4(m + j + 4 * g);
      for (int b = 0; b < B; ++b) acc[b][g] += v * load4(q + b * stride + j + 4 * g);
    }
  }
  for (int b = 0; b < B; ++b) {
    float part[8];
    std::memcpy(part, acc[b], sizeof part);
    float sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (int64_t t = j; t < len; ++t) sum += m[t] * q[b * stride + t];
    out[b] = sum;
  }
}

// x[0..len) += e[0..len) (e nullable: x as it is); false if a value is
// not finite (nonFinite, ORed: the loop vectorises).
bool accumulate(float* x, const float* e, int64_t len) {
  if (e == nullptr) return allFinite(x, len);
  uint32_t bad = 0;
  for (int64_t j = 0; j < len; ++j) bad |= nonFinite(x[j] += e[j]);
  return bad == 0;
}

// out (rows x r, row-major) = M Q.
void timesQ(const float* c, int64_t n, const PowerSgdShape& s, const float* qt, int64_t ld, int r, float* out) {
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* m = c + i * s.cols;
    const int64_t len = rowLength(s, n, i);
    float* o = out + i * r;
    int t = 0;
    for (; t + 4 <= r; t += 4) rowDots<4>(m, len, qt + t * ld, ld, o + t);
    for (; t < r; ++t) rowDots<1>(m, len, qt + t * ld, ld, o + t);
  }
}

// qt (r x cols) = (M^T P)^T: Q's column t is 0 + P[0][t] M[0] + P[1][t] M[1]
// + ..., added row by row in order. Rows go kRowBlock at a time, so Q's
// values stay in registers across the block's rows; sixteen values of a row
// at a time (independent sums per multiplier).
constexpr int kRowBlock = 4;

template <int R>
void addRowsTimesP(const float* m, int64_t cols, int64_t len, const float* p, int r, float* qt, int64_t ld) {
  constexpr int U = 4;  // vectors per sixteen values
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    for (int t = 0; t < r; ++t) {
      float* qj = qt + t * ld + j;
      Floats4 q[U];
      for (int u = 0; u < U; ++u) q[u] = load4(qj + 4 * u);
      for (int k = 0; k < R; ++k) {
        const auto a = splat4(p[k * r + t]);
        const float* mj = m + k * cols + j;
        for (int u = 0; u < U; ++u) q[u] += a * load4(mj + 4 * u);
      }
      for (int u = 0; u < U; ++u) store4(qj + 4 * u, q[u]);
    }
  }
  for (; j < len; ++j) {
    for (int t = 0; t < r; ++t) {
      float q = qt[t * ld + j];
      for (int k = 0; k < R; ++k) q += p[k * r + t] * m[k * cols + j];
      qt[t * ld + j] = q;
    }
  }
}

void transposeTimesP(const float* c, int64_t n, const PowerSgdShape& s, const float* p, int r, float* qt, int64_t ld) {
  std::fill(qt, qt + ld * r, 0.f);
  int64_t i = 0;
  for (; i + kRowBlock <= s.rows && rowLength(s, n, i + kRowBlock - 1) == s.cols; i += kRowBlock)
    addRowsTimesP<kRowBlock>(c + i * s.cols, s.cols, s.cols, p + i * r, r, qt, ld);
  for (; i < s.rows; ++i) addRowsTimesP<1>(c + i * s.cols, s.cols, rowLength(s, n, i), p + i * r, r, qt, ld);
}

// Row i of P Q^T at column j: P[i][0] Q[j][0] + P[i][1] Q[j][1] + ... in order.
inline float product1(const float* pi, const float* qt, int64_t ld, int r, int64_t j) {
  float out = pi[0] * qt[j];
  for (int t = 1; t < r; ++t) out += pi[t] * qt[t * ld + j];
  return out;
}

// The last pass over a matrix (its rows of x, in place): residual (where
// not null) = M - P (this rank's Q)^T, then M = P (the summed Q)^T /
// divisor (one division per value, as divideInPlace's; none where divisor
// is 1); sixteen values at a time, as product1 adds.
template <bool Residual>
void finishRows(float* x, int64_t n, const PowerSgdShape& s, const float* p, const float* local, const float* summed,
                int64_t ld, int r, float* residual, int64_t divisor) {
  constexpr int U = 4;
  const int64_t cols = s.cols;
  const float d = static_cast<float>(divisor);
  const bool divide = divisor != 1;
  for (int64_t i = 0; i < s.rows; ++i) {
    float* m = x + i * cols;
    float* e = Residual ? residual + i * cols : nullptr;
    const float* pi = p + i * r;
    const int64_t len = rowLength(s, n, i);
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
      Floats4 mine[U], all[U];
      Floats4 a = splat4(pi[0]);
      for (int u = 0; u < U; ++u) {
        if (Residual) mine[u] = a * load4(local + j + 4 * u);
        all[u] = a * load4(summed + j + 4 * u);
      }
      for (int t = 1; t < r; ++t) {
        a = splat4(pi[t]);
        for (int u = 0; u < U; ++u) {
          if (Residual) mine[u] += a * load4(local + t * ld + j + 4 * u);
          all[u] += a * load4(summed + t * ld + j + 4 * u);
        }
      }
      for (int u = 0; u < U; ++u) {
        if (Residual) store4(e + j + 4 * u, load4(m + j + 4 * u) - mine[u]);
        store4(m + j + 4 * u, divide ? all[u] / splat4(d) : all[u]);
      }
    }
    for (; j < len; ++j) {
      if (Residual) e[j] = m[j] - product1(pi, local, ld, r, j);
      const float v = product1(pi, summed, ld, r, j);
      m[j] = divide ? v / d : v;
    }
  }
}

// P's columns (rows x r, row-major) made orthonormal: modified Gram-Schmidt,
// each column projected twice (stable to rounding for r <= 64); a column
// left with no norm (dependent on the ones before it) becomes zero.
void orthonormalise(float* p, int64_t rows, int r) {
  auto dot = [&](int a, int b) {
    double s = 0;
    for (int64_t i = 0; i < rows; ++i) s += static_cast<double>(p[i * r + a]) * p[i * r + b];
    return s;
  };
  for (int t = 0; t < r; ++t) {
    const double before = std::sqrt(dot(t, t));
    for (int pass = 0; pass < 2; ++pass) {
      for (int u = 0; u < t; ++u) {
        const auto d = static_cast<float>(dot(u, t));
        for (int64_t i = 0; i < rows; ++i) p[i * r + t] -= d * p[i * r + u];
      }
    }
    const double norm = std::sqrt(dot(t, t));
    const float scale = norm > 1e-6 * before && norm > 1e-30 ? static_cast<float>(1.0 / norm) : 0.f;
    for (int64_t i = 0; i < rows; ++i) p[i * r + t] *= scale;
  }
}

}  // namespace

PowerSgdShape powerSgdShape(int64_t n, int r, int64_t matrixRows) {
  const int64_t rows = matrixRows > 0 ? matrixRows : static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t cols = (n + rows - 1) / rows;
  return {rows, cols, (rows + cols) * r < n && r < std::min(rows, cols)};
}

PowerSgdPlan powerSgdPlan(int64_t n, int r, const PowerSgdLayout& layout) {
  const PowerSgdLayout whole{{n, 0}};
  const PowerSgdLayout& blocks = layout.empty() ? whole : layout;
  PowerSgdPlan plan;
  int64_t offset = 0;
  for (const PowerSgdBlock& b : blocks) {
    if (b.count < 0 || (b.rows > 0 && b.count % b.rows != 0) || b.rows < kPowerSgdDense) {
      fail(ErrorKind::InvalidArgument, "scalecomm powersgd: a block of ", b.count, " values with ", b.rows,
           " rows is not a matrix; give each weight's shape (rows first) or a vector");
    }
    PowerSgdShape shape =
        b.rows == kPowerSgdDense ? PowerSgdShape{b.count, 1, false} : powerSgdShape(b.count, r, b.rows);
    PowerSgdPlan::Block block{offset, b.count, shape, plan.firstCount, plan.secondCount};
    if (shape.gains) {
      plan.firstCount += shape.rows * r;
      plan.secondCount += shape.cols * r;
      plan.qCols += shape.cols;
    } else {
      plan.firstCount += b.count;
    }
    plan.blocks.push_back(block);
    offset += b.count;
  }
  if (offset != n) {
    fail(ErrorKind::InvalidArgument, "scalecomm powersgd: the layout's blocks hold ", offset, " values, the tensor ", n,
         "; give the shapes of the weights the tensor holds, in order");
  }
  return plan;
}

void powerSgd(float* x, int64_t n, int r, const PowerSgdLayout& layout, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* residual, int64_t divisor) {
  const PowerSgdPlan plan = powerSgdPlan(n, r, layout);
  const auto divide = [divisor](float* v, int64_t count) {
    if (divisor != 1) divideInPlace(v, count, DataType::Float32, divisor);
  };
  // A rank whose c is not finite sends infinities, so that every rank's sum
  // shows it; its residual starts afresh.
  const auto poisoned = [&](float* sent, int64_t count) {
    std::fill(sent, sent + count, std::numeric_limits<float>::infinity());
    if (residual) std::fill(residual, residual + n, 0.f);
  };
  if (plan.secondCount == 0) {  // nothing gains from factors: the dense sum
    if (!accumulate(x, residual, n)) poisoned(x, n);
    allreduceSum(x, n);
    if (!allFinite(x, n)) return;
    divide(x, n);
    if (residual) std::fill(residual, residual + n, 0.f);
    return;
  }
  if (warm.cols != plan.qCols || warm.q.size() != static_cast<size_t>(plan.secondCount)) {
    warm.q.resize(static_cast<size_t>(plan.secondCount));
    for (const auto& b : plan.blocks) {
      if (!b.shape.gains) continue;
      for (int64_t i = 0; i < b.shape.cols * r; ++i)
        warm.q[b.second + i] = codec_random::normal(kPowerSgdWarmStartSeed, i);
    }
    warm.cols = plan.qCols;
  }
  // Each matrix's qt: r rows at its qStride, from qAt[block].
  std::vector<int64_t> qAt(plan.blocks.size());
  int64_t qCount = 0;
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    qAt[i] = qCount;
    if (plan.blocks[i].shape.gains) qCount += qStride(plan.blocks[i].shape.cols) * r;
  }
  std::vector<float> first(static_cast<size_t>(plan.firstCount)), qt(static_cast<size_t>(qCount));
  const bool finite = accumulate(x, residual, n);
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const auto& b = plan.blocks[i];
    const float* m = x + b.offset;
    if (!b.shape.gains) {
      std::copy(m, m + b.count, first.data() + b.first);
      continue;
    }
    const int64_t ld = qStride(b.shape.cols);
    float* q = qt.data() + qAt[i];
    const float* warmQ = warm.q.data() + b.second;
    for (int64_t j = 0; j < b.shape.cols; ++j) {
      for (int t = 0; t < r; ++t) q[t * ld + j] = warmQ[j * r + t];
    }
    timesQ(m, b.count, b.shape, q, ld, r, first.data() + b.first);
  }
  if (!finite) poisoned(first.data(), plan.firstCount);
  allreduceSum(first.data(), plan.firstCount);
  if (!allFinite(first.data(), plan.firstCount)) {  // some rank's c was not finite: so is the sum
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const auto& b = plan.blocks[i];
    float* m = x + b.offset;
    const float* sum = first.data() + b.first;
    if (!b.shape.gains) {
      std::copy(sum, sum + b.count, m);
      divide(m, b.count);
      if (residual) std::fill(residual + b.offset, residual + b.offset + b.count, 0.f);
      continue;
    }
    const PowerSgdShape& s = b.shape;
    float* p = first.data() + b.first;
    orthonormalise(p, s.rows, r);
    transposeTimesP(m, b.count, s, p, r, qt.data() + qAt[i], qStride(s.cols));
  }
  // Q's sum travels packed (each matrix's r rows of cols values, at the
  // plan's offsets) and comes back at qt's stride; qt stays this rank's Q,
  // for the residual, which the last pass writes with x.
  std::vector<float> packed(static_cast<size_t>(plan.secondCount)), summed(static_cast<size_t>(qCount));
  const auto rowsOfQ = [&](const auto& copyRow) {
    for (size_t i = 0; i < plan.blocks.size(); ++i) {
      const auto& b = plan.blocks[i];
      if (!b.shape.gains) continue;
      const int64_t cols = b.shape.cols, ld = qStride(cols);
      for (int t = 0; t < r; ++t) copyRow(qAt[i] + t * ld, b.second + t * cols, cols);
    }
  };
  rowsOfQ([&](int64_t at, int64_t to, int64_t cols) { std::copy_n(qt.data() + at, cols, packed.data() + to); });
  allreduceSum(packed.data(), plan.secondCount);
  rowsOfQ([&](int64_t at, int64_t to, int64_t cols) { std::copy_n(packed.data() + to, cols, summed.data() + at); });
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const auto& b = plan.blocks[i];
    if (!b.shape.gains) continue;
    const PowerSgdShape& s = b.shape;
    const float* p = first.data() + b.first;
    const float* q = summed.data() + qAt[i];
    if (residual) {
      finishRows<true>(x + b.offset, b.count, s, p, qt.data() + qAt[i], q, qStride(s.cols), r, residual + b.offset,
                       divisor);
    } else {
      finishRows<false>(x + b.offset, b.count, s, p, nullptr, q, qStride(s.cols), r, nullptr, divisor);
    }
    const float* sum = packed.data() + b.second;
    float* warmQ = warm.q.data() + b.second;
    for (int64_t j = 0; j < s.cols; ++j) {
      for (int t = 0; t < r; ++t) warmQ[j * r + t] = sum[t * s.cols + j];
    }
  }
}

}  // namespace scalecomm
