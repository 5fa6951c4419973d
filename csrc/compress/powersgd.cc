#include "compress/powersgd.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compress/codec.h"
#include "compress/random.h"
#include "core/error.h"

namespace scalecomm {

namespace {

// Q is kept transposed inside a call (qt: rank x cols, each of Q's columns
// contiguous) so that every pass below runs along M's rows.

int64_t rowLength(const PowerSgdShape& s, int64_t n, int64_t i) {
  return std::max<int64_t>(0, std::min(s.cols, n - i * s.cols));
}

// out[b] = M's row m (len values) . q[b], for B columns at once; each sum in
// 8 partial sums (element j into j mod 8), so the loop vectorises and the
// order is the same on every machine.
template <int B>
void rowDots(const float* m, int64_t len, const float* const* q, float* out) {
  float acc[B][8] = {};
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) {
    for (int b = 0; b < B; ++b) {
      for (int k = 0; k < 8; ++k) acc[b][k] += m[j + k] * q[b][j + k];
    }
  }
  for (int b = 0; b < B; ++b) {
    float s = ((acc[b][0] + acc[b][1]) + (acc[b][2] + acc[b][3])) + ((acc[b][4] + acc[b][5]) + (acc[b][6] + acc[b][7]));
    for (int64_t t = j; t < len; ++t) s += m[t] * q[b][t];
    out[b] = s;
  }
}

// out (rows x r, row-major) = M Q.
void timesQ(const float* c, int64_t n, const PowerSgdShape& s, const float* qt, int r, float* out) {
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* m = c + i * s.cols;
    const int64_t len = rowLength(s, n, i);
    float* o = out + i * r;
    int t = 0;
    for (; t + 4 <= r; t += 4) {
      const float* q[4] = {qt + t * s.cols, qt + (t + 1) * s.cols, qt + (t + 2) * s.cols, qt + (t + 3) * s.cols};
      rowDots<4>(m, len, q, o + t);
    }
    for (; t < r; ++t) {
      const float* q[1] = {qt + t * s.cols};
      rowDots<1>(m, len, q, o + t);
    }
  }
}

// qt (r x cols) = (M^T P)^T: each row of M added to Q's columns, scaled by P.
void transposeTimesP(const float* c, int64_t n, const PowerSgdShape& s, const float* p, int r, float* qt) {
  std::fill(qt, qt + s.cols * r, 0.f);
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* m = c + i * s.cols;
    const int64_t len = rowLength(s, n, i);
    for (int t = 0; t < r; ++t) {
      const float a = p[i * r + t];
      float* q = qt + t * s.cols;
      for (int64_t j = 0; j < len; ++j) q[j] += a * m[j];
    }
  }
}

// Row i of P Q^T into out (len values): P[i][0] Q[.][0] + P[i][1] Q[.][1] + ...
void productRow(const float* pi, const float* qt, int64_t cols, int r, int64_t len, float* out) {
  for (int64_t j = 0; j < len; ++j) out[j] = pi[0] * qt[j];
  for (int t = 1; t < r; ++t) {
    const float a = pi[t];
    const float* q = qt + t * cols;
    for (int64_t j = 0; j < len; ++j) out[j] += a * q[j];
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
              const std::function<void(float*, int64_t)>& allreduceSum, float* residual) {
  const PowerSgdPlan plan = powerSgdPlan(n, r, layout);
  if (plan.secondCount == 0) {  // nothing gains from factors: the dense sum
    allreduceSum(x, n);
    if (!allFinite(x, n)) return;
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
  std::vector<float> first(static_cast<size_t>(plan.firstCount)), qt(static_cast<size_t>(plan.secondCount));
  for (const auto& b : plan.blocks) {
    const float* m = x + b.offset;
    if (!b.shape.gains) {
      std::copy(m, m + b.count, first.data() + b.first);
      continue;
    }
    float* q = qt.data() + b.second;
    const float* warmQ = warm.q.data() + b.second;
    for (int64_t j = 0; j < b.shape.cols; ++j) {
      for (int t = 0; t < r; ++t) q[t * b.shape.cols + j] = warmQ[j * r + t];
    }
    timesQ(m, b.count, b.shape, q, r, first.data() + b.first);
  }
  allreduceSum(first.data(), plan.firstCount);
  if (!allFinite(first.data(), plan.firstCount)) {  // some rank's c was not finite: so is the sum
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  for (const auto& b : plan.blocks) {
    float* m = x + b.offset;
    const float* sum = first.data() + b.first;
    if (!b.shape.gains) {
      std::copy(sum, sum + b.count, m);
      if (residual) std::fill(residual + b.offset, residual + b.offset + b.count, 0.f);
      continue;
    }
    const PowerSgdShape& s = b.shape;
    float* p = first.data() + b.first;
    float* q = qt.data() + b.second;
    orthonormalise(p, s.rows, r);
    transposeTimesP(m, b.count, s, p, r, q);
    if (residual) {
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t len = rowLength(s, b.count, i);
        float* e = residual + b.offset + i * s.cols;
        productRow(p + i * r, q, s.cols, r, len, e);
        for (int64_t j = 0; j < len; ++j) e[j] = m[i * s.cols + j] - e[j];
      }
    }
  }
  allreduceSum(qt.data(), plan.secondCount);
  for (const auto& b : plan.blocks) {
    if (!b.shape.gains) continue;
    const PowerSgdShape& s = b.shape;
    const float* p = first.data() + b.first;
    const float* q = qt.data() + b.second;
    for (int64_t i = 0; i < s.rows; ++i)
      productRow(p + i * r, q, s.cols, r, rowLength(s, b.count, i), x + b.offset + i * s.cols);
    float* warmQ = warm.q.data() + b.second;
    for (int64_t j = 0; j < s.cols; ++j) {
      for (int t = 0; t < r; ++t) warmQ[j * r + t] = q[t * s.cols + j];
    }
  }
}

}  // namespace scalecomm
