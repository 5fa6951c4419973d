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
// O(sample + candidates) work; single-threaded (a rank per core). Every
// infinity and NaN of acc is a candidate, so the candidates say whether acc
// was finite; a NaN orders as an infinity wherever magnitudes are ranked.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "compress/codec.h"
#include "compress/random.h"
#include "core/error.h"
#include "core/floats4.h"

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
  // Positions in batches, each prefetched before any is read: the reads are
  // cache misses, and this keeps more of them in flight.
  constexpr int64_t kBatch = 32;
  int64_t at[kBatch];
  for (int64_t j0 = 0; j0 < s; j0 += kBatch) {
    const int64_t m = std::min(kBatch, s - j0);
    for (int64_t q = 0; q < m; ++q) {
      at[q] = codec_random::index(seed, static_cast<uint64_t>(j0 + q), n);
      __builtin_prefetch(x + at[q]);
      if (r) __builtin_prefetch(r + at[q]);
    }
    for (int64_t q = 0; q < m; ++q) mag[j0 + q] = magnitude(r ? x[at[q]] + r[at[q]] : x[at[q]]);
  }
  const int64_t ks = sampleRank(s, ratio);
  std::nth_element(mag.begin(), mag.begin() + (ks - 1), mag.end(), std::greater<float>());
  return mag[ks - 1];
}

struct Candidates {
  std::vector<int32_t> index;
  std::vector<float> value;
};

// The one pass: acc = x + r into r (when r), candidates: |acc| >= thr, or
// acc != 0 when thr is 0, and every infinity and NaN (so the candidates
// alone say whether acc was finite). Blocks of kBlock values, tested four at
// a time in GCC/Clang vector types (SSE2 or NEON: gcc 12 does not vectorise
// the scalar form); only blocks with a candidate are read again.
constexpr int64_t kBlock = 16;
using Mask4 = int32_t __attribute__((vector_size(16)));

// The candidate test, per value and four at a time (the same answers: an
// unordered compare lets a NaN pass).
template <bool Zero>
inline bool passes(float a, float thr) {
  return Zero ? a != 0.f : !(std::fabs(a) < thr);
}
template <bool Zero>
inline Mask4 passes4(Floats4 a, Floats4 thr) {
  if constexpr (Zero) {
    return a != 0.f;
  } else {
    const Floats4 m = reinterpret_cast<Floats4>(reinterpret_cast<Mask4>(a) & 0x7fffffff);
    return ~(m < thr);
  }
}
inline bool any4(Mask4 m) {
  uint64_t half[2];
  std::memcpy(half, &m, sizeof half);
  return (half[0] | half[1]) != 0;
}

template <bool Zero>
void scanBlocks(const float* __restrict__ x, float* __restrict__ r, int64_t n, float thr, Candidates& c) {
  const Floats4 t = {thr, thr, thr, thr};
  const float* acc = r ? r : x;
  size_t count = 0;
  // A block's candidates are written without a branch: every value of the
  // block is stored at `count`, which moves past the ones that pass.
  const auto keep = [&](int64_t i, int64_t m) {
    if (count + static_cast<size_t>(m) > c.index.size()) {
      const size_t grown = std::max(2 * c.index.size(), count + static_cast<size_t>(m));
      c.index.resize(grown);
      c.value.resize(grown);
    }
    int32_t* index = c.index.data();
    float* value = c.value.data();
    for (int64_t j = 0; j < m; ++j) {
      const float a = acc[i + j];
      index[count] = static_cast<int32_t>(i + j);
      value[count] = a;
      count += passes<Zero>(a, thr);
    }
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    Mask4 hit = {0, 0, 0, 0};
    if (r) {
      for (int64_t j = 0; j < kBlock; j += 4) {
        const Floats4 a = load4(x + i + j) + load4(r + i + j);
        store4(r + i + j, a);
        hit |= passes4<Zero>(a, t);
      }
    } else {
      for (int64_t j = 0; j < kBlock; j += 4) hit |= passes4<Zero>(load4(x + i + j), t);
    }
    if (any4(hit)) keep(i, kBlock);
  }
  if (r) {
    for (int64_t j = i; j < n; ++j) r[j] = x[j] + r[j];
  }
  keep(i, n - i);
  c.index.resize(count);
  c.value.resize(count);
}

Candidates scan(const float* x, float* r, int64_t n, float thr, size_t expect) {
  Candidates c;
  c.index.resize(expect);
  c.value.resize(expect);
  if (thr <= 0.f) {
    scanBlocks<true>(x, r, n, thr, c);
  } else {
    scanBlocks<false>(x, r, n, thr, c);
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
    const int64_t k = keptElements(n, ratio_);
    const bool exact = !sampled_ || n <= kExactUpTo;
    float thr = sampledThreshold(x, r, n, ratio_, seed);
    Candidates c = scan(x, r, n, thr, static_cast<size_t>(2 * k + 16));
    // Every infinity and NaN of acc is a candidate.
    const bool finite = allFinite(c.value.data(), static_cast<int64_t>(c.value.size()));
    if (!finite && r) return false;  // the caller starts the residual afresh and encodes again
    if (exact && static_cast<int64_t>(c.index.size()) < k) {
      const float* acc = r ? r : x;  // the scan materialised acc in r
      thr = exactThreshold(acc, n, k);
      c = scan(acc, nullptr, n, thr, static_cast<size_t>(2 * k + 16));
    }
    // The k largest |acc| among the candidates; of equal magnitudes the
    // lower index (candidates are in index order), so the kept set is a
    // function of acc alone. One integer key per candidate orders both:
    // a magnitude's bits order as it does (NaN as an infinity), inverted so
    // the largest comes first, then the candidate's position.
    const auto candidates = static_cast<int64_t>(c.index.size());
    std::vector<uint64_t> order(static_cast<size_t>(candidates));
    for (int64_t j = 0; j < candidates; ++j) {
      uint32_t bits;
      const float m = magnitude(c.value[j]);
      std::memcpy(&bits, &m, sizeof bits);
      order[j] = (static_cast<uint64_t>(0x7fffffffu - bits) << 32) | static_cast<uint64_t>(j);
    }
    const int64_t kept = std::min<int64_t>(k, candidates);
    if (kept < candidates) std::nth_element(order.begin(), order.begin() + kept, order.end());
    const auto padding = static_cast<size_t>(4 * (k - kept));  // (index 0, value 0.0) pairs
    std::memset(payload + 4 * kept, 0, padding);
    std::memset(payload + 4 * (k + kept), 0, padding);
    for (int64_t j = 0; j < kept; ++j) {
      const auto at = static_cast<size_t>(order[j] & 0xffffffffu);
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
