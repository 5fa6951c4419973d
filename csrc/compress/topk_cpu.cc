#include "compress/topk_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compress/codec.h"
#include "core/error.h"

namespace scalecomm {

namespace {

struct Candidates {
  std::vector<int32_t> index;
  std::vector<float> value;
};

// The threshold: the topkSampleRank-th largest |acc| over the shared sample.
float sampledThreshold(const float* x, const float* r, int64_t n, double ratio, uint64_t seed) {
  at::Tensor pick = topkSamplePositions(n, seed);
  const int64_t* p = pick.data_ptr<int64_t>();
  const int64_t s = pick.numel();
  std::vector<float> mag(static_cast<size_t>(s));
  for (int64_t j = 0; j < s; ++j) mag[j] = std::fabs(r ? x[p[j]] + r[p[j]] : x[p[j]]);
  const int64_t ks = topkSampleRank(s, ratio);
  std::nth_element(mag.begin(), mag.begin() + (ks - 1), mag.end(), std::greater<float>());
  return mag[ks - 1];
}

// The one pass: acc = x + r into r (when r), candidates |acc| >= thr (> 0
// when thr is 0). Blocks of kBlock elements: the arithmetic and the "any
// candidate here?" test vectorise; only blocks with one are scanned again.
constexpr int64_t kBlock = 16;

Candidates scan(const float* x, float* r, int64_t n, float thr, size_t expect) {
  Candidates c;
  c.index.reserve(expect);
  c.value.reserve(expect);
  const bool zero = thr <= 0.f;
  auto passes = [&](float a) { return zero ? a != 0.f : std::fabs(a) >= thr; };
  const float* acc = r ? r : x;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    int hits = 0;
    if (r) {
      for (int64_t j = 0; j < kBlock; ++j) {
        const float a = x[i + j] + r[i + j];
        r[i + j] = a;
        hits += passes(a);
      }
    } else {
      for (int64_t j = 0; j < kBlock; ++j) hits += passes(x[i + j]);
    }
    if (hits == 0) continue;
    for (int64_t j = 0; j < kBlock; ++j) {
      if (passes(acc[i + j])) {
        c.index.push_back(static_cast<int32_t>(i + j));
        c.value.push_back(acc[i + j]);
      }
    }
  }
  for (; i < n; ++i) {
    const float a = r ? (r[i] = x[i] + r[i]) : x[i];
    if (passes(a)) {
      c.index.push_back(static_cast<int32_t>(i));
      c.value.push_back(a);
    }
  }
  return c;
}

// The exact k-th largest |acc| (acc already materialised), for the shortfall.
float exactThreshold(const float* acc, int64_t n, int64_t k) {
  std::vector<float> mag(acc, acc + n);
  for (float& v : mag) v = std::fabs(v);
  std::nth_element(mag.begin(), mag.begin() + (k - 1), mag.end(), std::greater<float>());
  return mag[k - 1];
}

}  // namespace

bool topkCpuApplies(const at::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
         x.numel() <= std::numeric_limits<int32_t>::max();
}

at::Tensor topkEncodeCpu(const at::Tensor& x, at::Tensor* residual, double ratio, bool exact, uint64_t seed) {
  const int64_t n = x.numel(), k = keptElements(n, ratio);
  const float* xp = x.data_ptr<float>();
  float* rp = nullptr;
  bool fresh = false;  // residual was zero: acc is x
  if (residual) {
    if (!residual->defined() || residual->numel() != n) {
      *residual = at::zeros({n}, x.options());
      fresh = true;
    } else if (!topkCpuApplies(*residual)) {  // e.g. restored from a checkpoint
      *residual = residual->to(x.options()).contiguous();
    }
    rp = residual->data_ptr<float>();
  }
  exact = exact || n <= kTopkExactUpTo;
  const float* accBeforeScan = fresh ? nullptr : rp;
  float thr = sampledThreshold(xp, accBeforeScan, n, ratio, seed);
  Candidates c = scan(xp, rp, n, thr, static_cast<size_t>(2 * k + 16));
  if (exact && static_cast<int64_t>(c.index.size()) < k) {
    const float* acc = rp ? rp : xp;  // the scan materialised acc in r
    thr = exactThreshold(acc, n, k);
    c = scan(acc, nullptr, n, thr, static_cast<size_t>(2 * k + 16));
  }
  // The k largest |acc| among the candidates, by position in c.
  std::vector<int32_t> order(c.index.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
  const int64_t kept = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
  if (kept < static_cast<int64_t>(order.size())) {
    std::nth_element(order.begin(), order.begin() + kept, order.end(),
                     [&](int32_t a, int32_t b) { return std::fabs(c.value[a]) > std::fabs(c.value[b]); });
  }
  at::Tensor payload = at::zeros({8 * k}, x.options().dtype(at::kByte));  // padding: (0, 0.0)
  auto* idx = reinterpret_cast<int32_t*>(payload.data_ptr<uint8_t>());
  auto* val = reinterpret_cast<float*>(payload.data_ptr<uint8_t>() + 4 * k);
  for (int64_t j = 0; j < kept; ++j) {
    const int32_t at = order[j];
    idx[j] = c.index[at];
    val[j] = c.value[at];
    if (rp) rp[c.index[at]] = 0.f;  // sent exactly: no residual
  }
  return payload;
}

void topkDecodeAddCpu(at::Tensor& out, const at::Tensor& payload, int64_t k) {
  float* o = out.data_ptr<float>();
  const int64_t n = out.numel();
  const uint8_t* p = payload.data_ptr<uint8_t>();
  for (int64_t j = 0; j < k; ++j) {
    int32_t i;
    float v;
    std::memcpy(&i, p + 4 * j, 4);
    std::memcpy(&v, p + 4 * (k + j), 4);
    if (i < 0 || i >= n) {
      fail(ErrorKind::Internal, "scalecomm compressed allreduce: a top-k payload names element ", i, " of ", n,
           " (ranks passed tensors of different sizes?)");
    }
    o[i] += v;
  }
}

}  // namespace scalecomm
