#include "compress/codec.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <sstream>

#include "compress/sign_cpu.h"
#include "compress/topk_cpu.h"
#include "core/error.h"

namespace scalecomm {

namespace {

constexpr int64_t kQsgdBucket = 512;  // elements per norm of QSGD

// Random numbers come from a CPU generator seeded per call (the same stream
// on CPU and CUDA builds) and move to the tensor's device.
at::Generator generator(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

at::Tensor bytesOf(const at::Tensor& t) { return t.contiguous().view(at::kByte); }

class CastCodec : public Codec {
 public:
  explicit CastCodec(at::ScalarType t) : type_(t) {}
  bool summable() const override { return true; }
  at::Tensor encode(const at::Tensor& x, uint64_t, int) const override { return x.to(type_); }
  void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t) const override {
    out.add_(payload.to(at::kFloat));
  }
  int64_t wireBytes(int64_t numel) const override { return numel * 2; }

 private:
  at::ScalarType type_;
};

class TopkCodec : public Codec {
 public:
  TopkCodec(double ratio, bool sampled) : ratio_(ratio), sampled_(sampled) {}
  bool summable() const override { return false; }
  at::Tensor encode(const at::Tensor& x, uint64_t seed, int) const override {
    const int64_t n = x.numel(), k = keptElements(n, ratio_);
    at::Tensor idx = sampled_ && n > kTopkExactUpTo ? sampledIndices(x, k, seed) : std::get<1>(at::topk(x.abs(), k));
    at::Tensor vals = x.index_select(0, idx);
    return at::cat({bytesOf(idx.to(at::kInt)), bytesOf(vals)});
  }
  void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t) const override {
    const int64_t k = keptElements(out.numel(), ratio_);
    at::Tensor idx = payload.narrow(0, 0, 4 * k).view(at::kInt).to(at::kLong);
    at::Tensor vals = payload.narrow(0, 4 * k, 4 * k).view(at::kFloat);
    out.index_add_(0, idx, vals);  // padding entries are (0, 0.0)
  }
  int64_t wireBytes(int64_t numel) const override { return 8 * keptElements(numel, ratio_); }

 private:
  // Threshold estimated from a random sample, then the exact top-k among the
  // (few) elements above it; padded with (index 0, value 0) if too few pass.
  at::Tensor sampledIndices(const at::Tensor& x, int64_t k, uint64_t seed) const {
    at::Tensor pick = topkSamplePositions(x.numel(), seed).to(x.device());
    at::Tensor sample = x.index_select(0, pick).abs();
    at::Tensor thr = std::get<0>(at::topk(sample, topkSampleRank(pick.numel(), ratio_))).min();
    at::Tensor cand = at::nonzero(x.abs() >= thr).view({-1});
    if (cand.numel() >= k) {
      at::Tensor best = std::get<1>(at::topk(x.index_select(0, cand).abs(), k));
      return cand.index_select(0, best);
    }
    return at::cat({cand, at::zeros({k - cand.numel()}, cand.options())});
  }
  double ratio_;
  bool sampled_;
};

class RandomkCodec : public Codec {
 public:
  explicit RandomkCodec(double ratio) : ratio_(ratio) {}
  bool summable() const override { return true; }
  at::Tensor encode(const at::Tensor& x, uint64_t seed, int) const override {
    return x.index_select(0, indices(x.numel(), seed, x.device()));
  }
  void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t seed) const override {
    // Repeated indices carry equal values (same element, same ranks): write, not add.
    at::Tensor idx = indices(out.numel(), seed, out.device());
    out.index_put_({idx}, out.index_select(0, idx) + payload, /*accumulate=*/false);
  }
  int64_t wireBytes(int64_t numel) const override { return 4 * keptElements(numel, ratio_); }

 private:
  at::Tensor indices(int64_t n, uint64_t seed, const at::Device& device) const {
    auto gen = generator(seed);
    return at::randint(0, n, {keptElements(n, ratio_)}, gen, at::TensorOptions().dtype(at::kLong)).to(device);
  }
  double ratio_;
};

// Norms per bucket of kQsgdBucket elements (QSGD's bucketing: the variance
// bound scales with the bucket, not the tensor).
class QsgdCodec : public Codec {
 public:
  explicit QsgdCodec(int levels) : levels_(levels) {}
  bool summable() const override { return false; }
  at::Tensor encode(const at::Tensor& x, uint64_t seed, int rank) const override {
    const int64_t n = x.numel(), buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    at::Tensor padded = at::constant_pad_nd(x, {0, buckets * kQsgdBucket - n}).view({buckets, kQsgdBucket});
    at::Tensor norms = padded.norm(2, {1}, /*keepdim=*/true).to(at::kFloat);
    auto gen = generator(seed * 1000003ULL + static_cast<uint64_t>(rank) + 1);
    at::Tensor noise = at::rand({buckets, kQsgdBucket}, gen, at::TensorOptions().dtype(at::kFloat)).to(x.device());
    at::Tensor scaled = padded.abs() / norms.clamp_min(1e-30f) * levels_;
    at::Tensor level = (at::floor(scaled + noise).clamp_max(levels_) * padded.sign()).view({-1}).narrow(0, 0, n);
    return at::cat({bytesOf(norms.view({-1})), bytesOf(level.to(at::kChar))});
  }
  void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t) const override {
    const int64_t n = out.numel(), buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    at::Tensor norms = payload.narrow(0, 0, 4 * buckets).view(at::kFloat);
    at::Tensor level = payload.narrow(0, 4 * buckets, n).view(at::kChar);
    at::Tensor scale = (norms / static_cast<float>(levels_)).repeat_interleave(kQsgdBucket).narrow(0, 0, n);
    out.add_(level.to(at::kFloat) * scale);
  }
  int64_t wireBytes(int64_t numel) const override { return 4 * ((numel + kQsgdBucket - 1) / kQsgdBucket) + numel; }

 private:
  int levels_;
};

class SignCodec : public Codec {
 public:
  bool summable() const override { return false; }
  at::Tensor encode(const at::Tensor& x, uint64_t, int) const override {
    const int64_t n = x.numel(), blocks = (n + kSignBlock - 1) / kSignBlock;
    at::Tensor padded = at::constant_pad_nd(x, {0, blocks * kSignBlock - n});
    at::Tensor scales = padded.view({blocks, kSignBlock}).abs().sum(1) / countsPerBlock(n, blocks, x.device());
    const int64_t bytes = (n + 7) / 8;
    at::Tensor bits = at::constant_pad_nd((x >= 0).to(at::kByte), {0, bytes * 8 - n}).view({bytes, 8});
    at::Tensor packed = (bits * weights(x.device())).sum(1).to(at::kByte);
    return at::cat({bytesOf(scales.to(at::kFloat)), packed});
  }
  void decodeAdd(at::Tensor& out, const at::Tensor& payload, uint64_t) const override {
    const int64_t n = out.numel(), blocks = (n + kSignBlock - 1) / kSignBlock, bytes = (n + 7) / 8;
    at::Tensor scales = payload.narrow(0, 0, 4 * blocks).view(at::kFloat);
    at::Tensor packed = payload.narrow(0, 4 * blocks, bytes);
    at::Tensor bits = packed.unsqueeze(1).bitwise_and(weights(out.device())).ne(0).view({-1}).narrow(0, 0, n);
    at::Tensor signs = bits.to(at::kFloat) * 2 - 1;
    out.add_(signs * scales.repeat_interleave(kSignBlock).narrow(0, 0, n));
  }
  int64_t wireBytes(int64_t numel) const override {
    return 4 * ((numel + kSignBlock - 1) / kSignBlock) + (numel + 7) / 8;
  }

 private:
  static at::Tensor weights(const at::Device& d) {
    return at::tensor({1, 2, 4, 8, 16, 32, 64, 128}, at::TensorOptions().dtype(at::kByte)).to(d);
  }
  // The last block may be partial: divide its |x| sum by its real length.
  static at::Tensor countsPerBlock(int64_t n, int64_t blocks, const at::Device& d) {
    at::Tensor c = at::full({blocks}, static_cast<float>(kSignBlock), at::TensorOptions().dtype(at::kFloat));
    c[blocks - 1] = static_cast<float>(n - (blocks - 1) * kSignBlock);
    return c.to(d);
  }
};

double parseNumber(const std::string& spec, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  fail(ErrorKind::InvalidArgument, "scalecomm compression '", spec, "': '", text, "' is not a number");
}

}  // namespace

int64_t keptElements(int64_t numel, double ratio) {
  return std::max<int64_t>(1, std::min<int64_t>(numel, static_cast<int64_t>(std::llround(numel * ratio))));
}

int64_t topkSampleSize(int64_t numel) { return std::min<int64_t>(numel, std::max<int64_t>(8192, numel / 100)); }

int64_t topkSampleRank(int64_t sampleSize, double ratio) {
  // 1.5x margin: the candidates above the threshold are ~1.5 k, enough with
  // overwhelming probability for samples of >= 8192 (relative error ~1/sqrt).
  const auto ks = static_cast<int64_t>(std::ceil(static_cast<double>(sampleSize) * ratio * 1.5));
  return std::max<int64_t>(1, std::min<int64_t>(sampleSize, ks));
}

at::Tensor topkSamplePositions(int64_t numel, uint64_t seed) {
  auto gen = generator(seed);
  return at::randint(0, numel, {topkSampleSize(numel)}, gen, at::TensorOptions().dtype(at::kLong));
}

namespace {

at::Tensor topkFusedEncode(const at::Tensor& x, at::Tensor* residual, const CodecSpec& spec, uint64_t step) {
  return topkEncodeCpu(x, residual, spec.ratio, /*exact=*/true, step);
}

at::Tensor topkSampledFusedEncode(const at::Tensor& x, at::Tensor* residual, const CodecSpec& spec, uint64_t step) {
  return topkEncodeCpu(x, residual, spec.ratio, /*exact=*/false, step);
}

void topkFusedDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec& spec) {
  topkDecodeAddCpu(out, payload, keptElements(out.numel(), spec.ratio));
}

}  // namespace

const std::vector<CodecEntry>& codecRegistry() {
  static const std::vector<CodecEntry> table = {
      {"fp16", CodecArg::None, false,
       [](const CodecSpec&) -> std::unique_ptr<Codec> { return std::make_unique<CastCodec>(at::kHalf); },
       "cast to float16 (2 bytes a value), summed as float16"},
      {"bf16", CodecArg::None, false,
       [](const CodecSpec&) -> std::unique_ptr<Codec> { return std::make_unique<CastCodec>(at::kBFloat16); },
       "cast to bfloat16 (2 bytes a value), summed as bfloat16"},
      {"topk", CodecArg::Ratio, true,
       [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<TopkCodec>(s.ratio, false); },
       "the largest |values| (index and value, 8 bytes each), exact selection; allgathered", &topkFusedEncode,
       &topkFusedDecodeAdd},
      {"topk_sampled", CodecArg::Ratio, true,
       [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<TopkCodec>(s.ratio, true); },
       "top-k with the threshold estimated from a sample (exact up to 65536 values); allgathered",
       &topkSampledFusedEncode, &topkFusedDecodeAdd},
      {"randomk", CodecArg::Ratio, true,
       [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<RandomkCodec>(s.ratio); },
       "values at positions drawn from a seed every rank shares (4 bytes each), summed"},
      {"qsgd", CodecArg::Levels, false,
       [](const CodecSpec& s) -> std::unique_ptr<Codec> { return std::make_unique<QsgdCodec>(s.levels); },
       "stochastic quantisation to signed levels per bucket of 512 (1 byte a value, unbiased); allgathered"},
      {"sign", CodecArg::None, true,
       [](const CodecSpec&) -> std::unique_ptr<Codec> { return std::make_unique<SignCodec>(); },
       "sign bits with one scale (mean |x|) per block of 256 (1 bit a value); allgathered",
       [](const at::Tensor& x, at::Tensor* residual, const CodecSpec&, uint64_t) { return signEncodeCpu(x, residual); },
       [](at::Tensor& out, const at::Tensor& payload, const CodecSpec&) { signDecodeAddCpu(out, payload); }},
      {"powersgd", CodecArg::Rank, true, nullptr,
       "low-rank approximation P Q^T of each weight's matrix, two allreduces of the factors per call"},
  };
  return table;
}

const CodecEntry* findCodec(const std::string& name) {
  for (const CodecEntry& c : codecRegistry())
    if (name == c.name) return &c;
  return nullptr;
}

namespace {

// "fp16, bf16, topk:<ratio>, ..." for error texts.
std::string codecChoices() {
  std::string out;
  for (const CodecEntry& c : codecRegistry()) {
    static const char* args[] = {"", ":<ratio>", ":<levels>", ":<rank>"};
    out += strCat(out.empty() ? "" : ", ", c.name, args[static_cast<int>(c.arg)]);
  }
  return out;
}

}  // namespace

CodecSpec CodecSpec::parse(const std::string& spec) {
  CodecSpec c;
  const auto colon = spec.find(':');
  c.name = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  c.entry = findCodec(c.name);
  if (c.entry == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm: unknown compression '", spec, "'; choose ", codecChoices());
  }
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail(ErrorKind::InvalidArgument, "scalecomm compression '", spec, "': ", what);
  };
  // A lossy codec's strength is spelled out: a default would hide how much is dropped.
  switch (c.entry->arg) {
    case CodecArg::Ratio:
      need(!arg.empty(), strCat("give the fraction of values kept, e.g. ", c.name, ":0.01 (1 %)"));
      c.ratio = parseNumber(spec, arg);
      need(c.ratio > 0 && c.ratio <= 1, strCat("the ratio must lie in (0, 1], e.g. ", c.name, ":0.01"));
      break;
    case CodecArg::Levels:
      need(!arg.empty(), strCat("give the quantisation levels, e.g. ", c.name, ":8"));
      c.levels = static_cast<int>(parseNumber(spec, arg));
      need(c.levels >= 1 && c.levels <= 127, strCat("the levels must lie in [1, 127], e.g. ", c.name, ":8"));
      break;
    case CodecArg::Rank:
      need(!arg.empty(), strCat("give the rank of the approximation, e.g. ", c.name, ":4"));
      c.rank = static_cast<int>(parseNumber(spec, arg));
      need(c.rank >= 1 && c.rank <= 64, strCat("the rank must lie in [1, 64], e.g. ", c.name, ":4"));
      break;
    case CodecArg::None: need(arg.empty(), "takes no argument"); break;
  }
  return c;
}

std::string CodecSpec::str() const {
  std::ostringstream os;
  os << name;
  switch (entry->arg) {
    case CodecArg::Ratio: os << ":" << ratio; break;
    case CodecArg::Levels: os << ":" << levels; break;
    case CodecArg::Rank: os << ":" << rank; break;
    case CodecArg::None: break;
  }
  return os.str();
}

std::unique_ptr<Codec> makeCodec(const CodecSpec& spec) {
  if (spec.entry->make == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm: compression '", spec.str(), "' has no single-round codec");
  }
  return spec.entry->make(spec);
}

}  // namespace scalecomm
