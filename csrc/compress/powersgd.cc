#include "compress/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compress/codec.h"
#include "compress/random.h"

namespace scalecomm {

namespace {

// out (rows x r) = M Q: one pass over M's rows, Q's row j scaled by M[i][j].
void timesQ(const float* c, int64_t n, const PowerSgdShape& s, const float* q, int r, float* out) {
  std::fill(out, out + s.rows * r, 0.f);
  for (int64_t i = 0; i < s.rows; ++i) {
    float* o = out + i * r;
    const int64_t end = std::min(s.cols, n - i * s.cols);
    for (int64_t j = 0; j < end; ++j) {
      const float m = c[i * s.cols + j];
      const float* qj = q + j * r;
      for (int t = 0; t < r; ++t) o[t] += m * qj[t];
    }
  }
}

// out (cols x r) = M^T P.
void transposeTimesP(const float* c, int64_t n, const PowerSgdShape& s, const float* p, int r, float* out) {
  std::fill(out, out + s.cols * r, 0.f);
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* pi = p + i * r;
    const int64_t end = std::min(s.cols, n - i * s.cols);
    for (int64_t j = 0; j < end; ++j) {
      const float m = c[i * s.cols + j];
      float* o = out + j * r;
      for (int t = 0; t < r; ++t) o[t] += m * pi[t];
    }
  }
}

// out (n values of rows x cols) = P Q^T.
void product(const float* p, const float* q, int64_t n, const PowerSgdShape& s, int r, float* out) {
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* pi = p + i * r;
    const int64_t end = std::min(s.cols, n - i * s.cols);
    for (int64_t j = 0; j < end; ++j) {
      const float* qj = q + j * r;
      float v = 0.f;
      for (int t = 0; t < r; ++t) v += pi[t] * qj[t];
      out[i * s.cols + j] = v;
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

bool powerSgd(const float* c, int64_t n, int r, int64_t matrixRows, PowerSgdWarmStart& warm,
              const std::function<void(float*, int64_t)>& allreduceSum, float* sum, float* local) {
  const PowerSgdShape s = powerSgdShape(n, r, matrixRows);
  if (!s.gains) {  // dense
    std::memcpy(sum, c, static_cast<size_t>(n) * sizeof(float));
    allreduceSum(sum, n);
    if (!allFinite(sum, n)) return false;
    if (local) std::memcpy(local, c, static_cast<size_t>(n) * sizeof(float));
    return true;
  }
  if (warm.cols != s.cols || warm.q.size() != static_cast<size_t>(s.cols * r)) {
    warm.q.resize(static_cast<size_t>(s.cols * r));
    for (size_t i = 0; i < warm.q.size(); ++i) warm.q[i] = codec_random::normal(kPowerSgdWarmStartSeed, i);
    warm.cols = s.cols;
  }
  std::vector<float> p(static_cast<size_t>(s.rows * r));
  timesQ(c, n, s, warm.q.data(), r, p.data());
  allreduceSum(p.data(), s.rows * r);
  if (!allFinite(p.data(), s.rows * r)) {  // some rank's c was not finite: so is the sum
    std::fill(sum, sum + n, std::numeric_limits<float>::quiet_NaN());
    return false;
  }
  orthonormalise(p.data(), s.rows, r);
  std::vector<float> q(static_cast<size_t>(s.cols * r));
  transposeTimesP(c, n, s, p.data(), r, q.data());
  if (local) product(p.data(), q.data(), n, s, r, local);
  allreduceSum(q.data(), s.cols * r);
  product(p.data(), q.data(), n, s, r, sum);
  warm.q = std::move(q);
  return true;
}

}  // namespace scalecomm
