// topk / topk_sampled: the k = ratio x n largest |values|, sent as (int32
// index, float32 value) pairs and allgathered. Error feedback is fused into
// the one pass that finds the candidates: acc = x + residual is written
// into the residual, and the sent elements' residual becomes 0.
//
// The threshold comes from a sample of the shared seed's positions (exact
// selection up to kExactUpTo values): the kept elements are the k largest
// |acc| among those at or above it. topk: if fewer than k pass, the exact
// k-th largest |acc| is the threshold instead, so the result is the exact
// top-k (of equal magnitudes the lower index). topk_sampled: the payload is padded with
// (index 0, value 0). A zero threshold admits only nonzero elements (the
// rest decode to the same zero).
// Cost: one read of x and the residual and one write of the residual, plus
// O(sample + candidates) work, and a read of x for its finiteness (the scan
// does not vectorise, and testing there cost more than the read); single-
// threaded (a rank per core). A NaN orders as an infinity wherever
// magnitudes are ranked.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "compress/codec.h"
#include "compress/random.h"
#include "core/error.h"

namespace scalecomm {

namespace {

constexpr int64_t kExactUpTo = 65536;  // topk_sampled is exact up to this n

// |v|, with NaN as an infinity: a strict weak order for the selections.
inline float magnitude(float v) {
  const float m = std::fabs(v);
  return m == m ? m : std::numeric_limits<float>::infinity();
}

// A sample of max(8192, n / 100) positions (with replacement, at most n).
int64_t sampleSize(int64_t n) { return std::min<int64_t>(n, std::max<int64_t>(8192, n / 100)); }

// The sample's rank whose |value| is the threshold: 1.5x margin, so the
// candidates above it are ~1.5 k, enough with overwhelming probability for
// samples of >= 8192 (relative error ~1/sqrt).
int64_t sampleRank(int64_t size, double ratio) {
  const auto ks = static_cast<int64_t>(std::ceil(static_cast<double>(size) * ratio * 1.5));
  return std::max<int64_t>(1, std::min<int64_t>(size, ks));
}

float sampledThreshold(const float* x, const float* r, int64_t n, double ratio, uint64_t seed) {
  const int64_t s = sampleSize(n);
  std::vector<float> mag(static_cast<size_t>(s));
  for (int64_t j = 0; j < s; ++j) {
    const int64_t p = codec_random::index(seed, static_cast<uint64_t>(j), n);
    mag[j] = magnitude(r ? x[p] + r[p] : x[p]);
  }
  const int64_t ks = sampleRank(s, ratio);
  std::nth_element(mag.begin(), mag.begin() + (ks - 1), mag.end(), std::greater<float>());
  return mag[ks - 1];
}

struct Candidates {
  std::vector<int32_t> index;
  std::vector<float> value;
};

// The one pass: acc = x + r into r (when r), candidates |acc| >= thr (!= 0
// when thr is 0). Blocks of kBlock elements: only blocks with a candidate
// are scanned again (gcc 12 does not vectorise the block's test).
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
  for (float& v : mag) v = magnitude(v);
  std::nth_element(mag.begin(), mag.begin() + (k - 1), mag.end(), std::greater<float>());
  return mag[k - 1];
}

class TopkCodec final : public Codec {
 public:
  TopkCodec(double ratio, bool sampled) : ratio_(ratio), sampled_(sampled) {}
  int64_t payloadBytes(int64_t n) const override { return 8 * keptElements(n, ratio_); }
  std::optional<DataType> sumType() const override { return std::nullopt; }

  bool encode(const float* __restrict__ x, float* __restrict__ r, int64_t n, uint8_t* __restrict__ payload,
              uint64_t seed, int) const override {
    if (n > std::numeric_limits<int32_t>::max()) {
      fail(ErrorKind::InvalidArgument, "scalecomm top-k: ", n, " values exceed the int32 indices of its payload");
    }
    // x finite and the residual finite (it always is) give a finite acc
    // but where the sum overflowed: such an infinity passes any threshold,
    // so the candidates show it.
    bool finite = allFinite(x, n);
    if (!finite && r) return false;  // the caller starts the residual afresh and encodes again
    const int64_t k = keptElements(n, ratio_);
    const bool exact = !sampled_ || n <= kExactUpTo;
    float thr = sampledThreshold(x, r, n, ratio_, seed);
    Candidates c = scan(x, r, n, thr, static_cast<size_t>(2 * k + 16));
    finite = finite && allFinite(c.value.data(), static_cast<int64_t>(c.value.size()));
    if (exact && static_cast<int64_t>(c.index.size()) < k) {
      const float* acc = r ? r : x;  // the scan materialised acc in r
      thr = exactThreshold(acc, n, k);
      c = scan(acc, nullptr, n, thr, static_cast<size_t>(2 * k + 16));
    }
    // The k largest |acc| among the candidates, by position in c; of equal
    // magnitudes the lower index (candidates are in index order), so the
    // kept set is a function of acc alone.
    std::vector<int32_t> order(c.index.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int32_t>(j);
    const int64_t kept = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
    if (kept < static_cast<int64_t>(order.size())) {
      std::nth_element(order.begin(), order.begin() + kept, order.end(), [&](int32_t a, int32_t b) {
        const float fa = magnitude(c.value[a]), fb = magnitude(c.value[b]);
        return fa > fb || (fa == fb && a < b);
      });
    }
    std::memset(payload, 0, static_cast<size_t>(8 * k));  // padding: (0, 0.0)
    for (int64_t j = 0; j < kept; ++j) {
      const int32_t at = order[j];
      storeField<int32_t>(payload + 4 * j, c.index[at]);
      storeField<float>(payload + 4 * (k + j), c.value[at]);
      if (r) r[c.index[at]] = 0.f;  // sent exactly: no residual
    }
    return finite;
  }

  void decodeAdd(float* __restrict__ out, int64_t n, const uint8_t* __restrict__ payload, uint64_t) const override {
    const int64_t k = keptElements(n, ratio_);
    for (int64_t j = 0; j < k; ++j) {
      const auto i = loadField<int32_t>(payload + 4 * j);
      if (i < 0 || i >= n) {
        fail(ErrorKind::Internal, "scalecomm compressed allreduce: a top-k payload names element ", i, " of ", n,
             " (ranks passed tensors of different sizes?)");
      }
      out[i] += loadField<float>(payload + 4 * (k + j));
    }
  }

 private:
  double ratio_;
  bool sampled_;
};

}  // namespace

CodecEntry topkCodec() {
  return {"topk", CodecArg::Ratio, true,
          [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<TopkCodec>(s.ratio, false); },
          "the largest |values| (index and value, 8 bytes each), exact selection; allgathered"};
}

CodecEntry topkSampledCodec() {
  return {"topk_sampled", CodecArg::Ratio, true,
          [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<TopkCodec>(s.ratio, true); },
          "top-k with the threshold estimated from a sample (exact up to 65536 values); allgathered"};
}

}  // namespace scalecomm
