#include "compress/auto_guard.h"

#include <algorithm>
#include <vector>

#include "compress/codec.h"

namespace scalecomm {

namespace {

double dot(const float* x, const float* y, int64_t n) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]) * y[j];
  return s;
}

double sumOfSquares(const float* x, int64_t n) { return dot(x, x, n); }

// The guard's share (compress/auto_guard.h); eAt(sample, element): the
// residual's values at a run of the sample. A residual pointing against the
// window holds nothing back (0).
template <typename ResidualAt>
double residualRatioAt(int64_t n, const float* window, const PowerSgdLayout& layout, ResidualAt eAt) {
  const size_t blocks = std::max<size_t>(layout.size(), 1);
  std::vector<double> ew(blocks), ww(blocks);
  std::vector<int64_t> counts(blocks);
  size_t b = 0;
  int64_t end = layout.empty() ? n : layout[0].count;
  forEachSampleRun(n, [&](int64_t i, int64_t el, int64_t length) {
    while (length > 0) {
      while (el >= end && b + 1 < blocks) end += layout[++b].count;
      const int64_t part = el < end ? std::min(length, end - el) : length;
      ew[b] += dot(eAt(i, el), window + i, part);
      ww[b] += sumOfSquares(window + i, part);
      counts[b] += part;
      el += part;
      i += part;
      length -= part;
    }
  });
  double ewAll = 0, wwAll = 0, worst = 0;
  for (size_t j = 0; j < blocks; ++j) {
    ewAll += ew[j];
    wwAll += ww[j];
    if (counts[j] >= kAutoSampleRun && ww[j] > 0) worst = std::max(worst, ew[j] / ww[j]);
  }
  return std::max({worst, wwAll > 0 ? ewAll / wwAll : 0.0, 0.0});
}

}  // namespace

bool addToWindow(AutoChoice& c, const float* x, int64_t n) {
  if (c.window.empty()) c.window.assign(static_cast<size_t>(autoSampleSize(n)), 0.0f);
  bool finite = true;
  forEachSampleRun(n, [&](int64_t, int64_t e, int64_t length) { finite &= allFinite(x + e, length); });
  if (!finite) return false;
  constexpr float keep = 1.0f - 1.0f / kAutoWindowCalls;
  float* w = c.window.data();
  forEachSampleRun(n, [&](int64_t i, int64_t e, int64_t length) {
    for (int64_t j = 0; j < length; ++j) w[i + j] = keep * w[i + j] + x[e + j];
  });
  return true;
}

void gatherSample(const float* x, int64_t n, std::vector<float>& sample) {
  sample.resize(static_cast<size_t>(autoSampleSize(n)));
  forEachSampleRun(n,
                   [&](int64_t j, int64_t e, int64_t length) { std::copy(x + e, x + e + length, sample.data() + j); });
}

double residualRatio(const float* e, int64_t n, const float* window, const PowerSgdLayout& layout) {
  return residualRatioAt(n, window, layout, [e](int64_t, int64_t element) { return e + element; });
}

double sampleResidualRatio(const float* e, int64_t n, const float* window, const PowerSgdLayout& layout) {
  return residualRatioAt(n, window, layout, [e](int64_t sample, int64_t) { return e + sample; });
}

}  // namespace scalecomm
