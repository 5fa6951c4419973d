// scalecomm compress: compress="auto"'s accuracy guard, its measures. What
// they decide (a codec left out) is compress/auto_select.h's.
//
// Contract: the guard reads a fixed sample of a key's n values
// (forEachSampleRun: the same elements on every call and every rank), so
// its cost per call does not grow with the tensor. On that sample it keeps
// the key's recent gradient (AutoChoice::window: the inputs summed with a
// decay of 1 - 1/kAutoWindowCalls per call; an input with a non-finite
// sampled value is left out), and measures how much of it a codec's
// error-feedback residual e holds back along it: <e, w> / |w|^2, the
// largest of the whole tensor's and each of its layout's weights' (those
// with at least kAutoSampleRun sampled values), never below 0. A residual
// along the recent gradient lags the training where it has been heading; a
// residual of noise, which error feedback sends within a few calls, lies
// mostly across it, however large its norm (PowerSGD's residual on a noisy
// gradient: its norm two fifths of the window's, its part along it a
// seventh). Per weight: a sparsifier over a bucket sends the largest
// values, so a weight whose values are small (a norm's gain, a bias, a
// layer whose gradient is an order smaller) can hold back all of its recent
// gradient while the bucket as a whole holds little.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compress/auto_choice.h"
#include "compress/powersgd.h"

namespace scalecomm {

constexpr int kAutoWindowCalls = 64;            // the recent gradient's horizon (its decay: 1 - 1/this per call)
constexpr int64_t kAutoSampleElements = 65536;  // the guard's norms: at most about this many elements
constexpr int64_t kAutoSampleRun = 16;          // ... in runs of this many neighbours (a cache line of floats)

// The guard's sample of n elements: a run of kAutoSampleRun neighbours at the
// start of every autoSampleStride(n) runs (all n where n <= kAutoSampleElements),
// so a call reads a sixteenth of the cache lines a strided sample would.
// f(sample, element, length) per run: sample is the run's first index in the
// sample, element its first in the n.
inline int64_t autoSampleStride(int64_t n) {
  return std::max<int64_t>(1, (n + kAutoSampleElements - 1) / kAutoSampleElements);
}
template <typename F>
int64_t forEachSampleRun(int64_t n, F&& f) {
  const int64_t step = autoSampleStride(n) * kAutoSampleRun;
  int64_t sample = 0;
  for (int64_t e = 0; e < n; e += step) {
    const int64_t length = std::min(kAutoSampleRun, n - e);
    f(sample, e, length);
    sample += length;
  }
  return sample;  // the sample's size
}
inline int64_t autoSampleSize(int64_t n) {
  return forEachSampleRun(n, [](int64_t, int64_t, int64_t) {});
}

// Adds this call's input x[0..n) to the key's window (sized at the first
// call); false, and nothing added, where a sampled value is not finite.
bool addToWindow(AutoChoice& choice, const float* x, int64_t n);

// The sample's values of x[0..n), side by side, into `sample` (resized to
// autoSampleSize(n)).
void gatherSample(const float* x, int64_t n, std::vector<float>& sample);

// The guard's share for a residual e of the key's n values.
double residualRatio(const float* e, int64_t n, const float* window, const PowerSgdLayout& layout);

// ... for a residual held at the sample's values only (side by side, as the
// window): a codec replayed on the sample before it runs.
double sampleResidualRatio(const float* e, int64_t n, const float* window, const PowerSgdLayout& layout);

}  // namespace scalecomm
