#include "compress/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compress/codec.h"
#include "compress/random.h"

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

bool powerSgd(float* x, int64_t n, int r, int64_t matrixRows, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* residual) {
  const PowerSgdShape s = powerSgdShape(n, r, matrixRows);
  if (!s.gains) {  // dense
    allreduceSum(x, n);
    if (!allFinite(x, n)) return false;
    if (residual) std::fill(residual, residual + n, 0.f);
    return true;
  }
  const size_t qCount = static_cast<size_t>(s.cols * r);
  std::vector<float> qt(qCount);
  if (warm.cols != s.cols || warm.q.size() != qCount) {
    warm.q.resize(qCount);
    for (size_t i = 0; i < qCount; ++i) warm.q[i] = codec_random::normal(kPowerSgdWarmStartSeed, i);
    warm.cols = s.cols;
  }
  for (int64_t j = 0; j < s.cols; ++j) {
    for (int t = 0; t < r; ++t) qt[t * s.cols + j] = warm.q[j * r + t];
  }
  std::vector<float> p(static_cast<size_t>(s.rows * r));
  timesQ(x, n, s, qt.data(), r, p.data());
  allreduceSum(p.data(), s.rows * r);
  if (!allFinite(p.data(), s.rows * r)) {  // some rank's c was not finite: so is the sum
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    return false;
  }
  orthonormalise(p.data(), s.rows, r);
  transposeTimesP(x, n, s, p.data(), r, qt.data());
  if (residual) {
    for (int64_t i = 0; i < s.rows; ++i) {
      const int64_t len = rowLength(s, n, i);
      float* e = residual + i * s.cols;
      const float* m = x + i * s.cols;
      productRow(p.data() + i * r, qt.data(), s.cols, r, len, e);
      for (int64_t j = 0; j < len; ++j) e[j] = m[j] - e[j];
    }
  }
  allreduceSum(qt.data(), s.cols * r);
  for (int64_t i = 0; i < s.rows; ++i)
    productRow(p.data() + i * r, qt.data(), s.cols, r, rowLength(s, n, i), x + i * s.cols);
  for (int64_t j = 0; j < s.cols; ++j) {
    for (int t = 0; t < r; ++t) warm.q[j * r + t] = qt[t * s.cols + j];
  }
  return true;
}

}  // namespace scalecomm
