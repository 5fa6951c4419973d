#include "torch/tensor_codecs.h"

#include <cstring>
#include <limits>
#include <vector>

#include "compress/codec.h"
#include "compress/powersgd.h"
#include "compress/random.h"
#include "core/error.h"

namespace scalecomm {

namespace {

int64_t asBits(uint64_t v) { return static_cast<int64_t>(v); }

// Logical right shift of int64 lanes (torch's >> is arithmetic).
at::Tensor shiftRight(const at::Tensor& z, int s) {
  return at::bitwise_and(at::bitwise_right_shift(z, s), asBits((uint64_t{1} << (64 - s)) - 1));
}

// codec_random::finalize, lane by lane (int64 products wrap as uint64's do).
at::Tensor finalize(at::Tensor z) {
  z = at::mul(at::bitwise_xor(z, shiftRight(z, 30)), asBits(0xbf58476d1ce4e5b9ULL));
  z = at::mul(at::bitwise_xor(z, shiftRight(z, 27)), asBits(0x94d049bb133111ebULL));
  return at::bitwise_xor(z, shiftRight(z, 31));
}

at::Tensor iota(int64_t count, const at::Device& device) {
  return at::arange(count, at::TensorOptions().dtype(at::kLong).device(device));
}

// codec_random::index(seed, j, n) for j < k, n < 2^31: the high word of
// draw x n from 32-bit halves (each product below 2^63).
at::Tensor positions(uint64_t seed, int64_t k, int64_t n, const at::Device& device) {
  if (n > std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::InvalidArgument, "scalecomm random-k on ", device.str(), ": ", n,
         " values; on a device it takes tensors of fewer than 2^31 (split the bucket)");
  }
  const at::Tensor d = randomDraws(seed, iota(k, device));
  const at::Tensor hi = shiftRight(d, 32), lo = at::bitwise_and(d, asBits(0xffffffffULL));
  return at::bitwise_right_shift(at::add(at::mul(hi, n), at::bitwise_right_shift(at::mul(lo, n), 32)), 32);
}

// codec_random::uniform(seed, i) for i < count.
at::Tensor uniforms(uint64_t seed, int64_t count, const at::Device& device) {
  return shiftRight(randomDraws(seed, iota(count, device)), 40).to(at::kFloat).mul_(1.0f / 16777216.0f);
}

at::Tensor bytesOn(int64_t n, const at::Tensor& like) { return at::empty({n}, like.options().dtype(at::kByte)); }

// acc's n values as `blocks` rows of `width` (zero padded).
at::Tensor blocked(const at::Tensor& acc, int64_t width) {
  const int64_t n = acc.numel(), blocks = (n + width - 1) / width;
  return at::constant_pad_nd(acc, {0, blocks * width - n}).view({blocks, width});
}

at::Tensor firstN(const at::Tensor& rows, int64_t n) { return rows.reshape({-1}).narrow(0, 0, n); }

// The codecs. encode(acc, feedback, ...) returns the payload (bytes on acc's
// device) and, with feedback, leaves the residual acc - decode(payload) in
// acc; without, acc is only read. decodeAdd(out, payload, ...) adds the
// decoded payload to out.
struct TensorCodec {
  const char* name;  // the codec table's (compress/codec.cc)
  at::Tensor (*encode)(at::Tensor& acc, bool feedback, const CodecSpec& spec, uint64_t seed, int rank);
  void (*decodeAdd)(at::Tensor& out, const at::Tensor& payload, const CodecSpec& spec, uint64_t seed);
};

template <at::ScalarType kHalf>
at::Tensor castEncode(at::Tensor& acc, bool feedback, const CodecSpec&, uint64_t, int) {
  at::Tensor h = acc.to(kHalf);  // round to nearest even, as the host codecs
  if (feedback) acc.sub_(h.to(at::kFloat));
  return h.view(at::kByte);
}

template <at::ScalarType kHalf>
void castDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec&, uint64_t) {
  out.add_(payload.view(kHalf));
}

at::Tensor randomkEncode(at::Tensor& acc, bool feedback, const CodecSpec& spec, uint64_t seed, int) {
  const int64_t n = acc.numel();
  const at::Tensor drawn = positions(seed, keptElements(n, spec.ratio), n, acc.device());
  at::Tensor values = acc.index_select(0, drawn);
  if (feedback) acc.index_fill_(0, drawn, 0.f);  // sent exactly
  return values.view(at::kByte);
}

void randomkDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec& spec, uint64_t seed) {
  const int64_t n = out.numel();
  const at::Tensor drawn = positions(seed, keptElements(n, spec.ratio), n, out.device());
  // Read before written: a position drawn twice adds its value once (its
  // copies write the same sum).
  out.index_copy_(0, drawn, out.index_select(0, drawn).add_(payload.view(at::kFloat)));
}

at::Tensor topkEncode(at::Tensor& acc, bool feedback, const CodecSpec& spec, uint64_t, int) {
  const int64_t n = acc.numel();
  if (n > std::numeric_limits<int32_t>::max()) {
    fail(ErrorKind::InvalidArgument, "scalecomm top-k: ", n, " values exceed the int32 indices of its payload");
  }
  const int64_t k = keptElements(n, spec.ratio);
  const at::Tensor index = std::get<1>(acc.abs().topk(k, 0, /*largest=*/true, /*sorted=*/false));
  at::Tensor payload = bytesOn(8 * k, acc);
  payload.narrow(0, 0, 4 * k).view(at::kInt).copy_(index);
  payload.narrow(0, 4 * k, 4 * k).view(at::kFloat).copy_(acc.index_select(0, index));
  if (feedback) acc.index_fill_(0, index, 0.f);  // sent exactly
  return payload;
}

void topkDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec&, uint64_t) {
  const int64_t n = out.numel(), k = payload.numel() / 8;
  const at::Tensor index = payload.narrow(0, 0, 4 * k).view(at::kInt).to(at::kLong);
  // A device kernel must not index outside out: checked first (one sync).
  if (at::logical_or(index.lt(0), index.ge(n)).any().item<bool>()) {
    fail(ErrorKind::Internal, "scalecomm compressed allreduce: a top-k payload names an element outside the ", n,
         " of this rank's tensor (ranks passed tensors of different sizes?)");
  }
  out.index_add_(0, index, payload.narrow(0, 4 * k, 4 * k).view(at::kFloat));
}

at::Tensor qsgdEncode(at::Tensor& acc, bool feedback, const CodecSpec& spec, uint64_t seed, int rank) {
  const int64_t n = acc.numel();
  const auto s = static_cast<float>(spec.levels);
  const at::Tensor a = blocked(acc, kQsgdBucket);
  const int64_t buckets = a.size(0);
  const at::Tensor norm = a.to(at::kDouble).square().sum(1).sqrt().to(at::kFloat);
  const uint64_t noise = qsgdNoiseStream(seed, rank);
  const at::Tensor u = uniforms(noise, a.numel(), acc.device()).view(a.sizes());
  const at::Tensor scaled = a.abs().div_(norm.clamp_min(1e-30f).unsqueeze(1)).mul_(s);
  // NaN (a bucket of infinities) sends the top level, as the host codec does.
  const at::Tensor level = a.sign().mul_(scaled.add_(u).floor_().clamp_max_(s).nan_to_num_(s));
  at::Tensor payload = bytesOn(4 * buckets + n, acc);
  payload.narrow(0, 0, 4 * buckets).view(at::kFloat).copy_(norm);
  payload.narrow(0, 4 * buckets, n).view(at::kChar).copy_(firstN(level, n));
  if (feedback) acc.sub_(firstN(level.mul((norm / s).unsqueeze(1)), n));
  return payload;
}

void qsgdDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec& spec, uint64_t) {
  const int64_t n = out.numel(), buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
  const at::Tensor unit = payload.narrow(0, 0, 4 * buckets).view(at::kFloat) / static_cast<float>(spec.levels);
  const at::Tensor level = blocked(payload.narrow(0, 4 * buckets, n).view(at::kChar).to(at::kFloat), kQsgdBucket);
  out.add_(firstN(level.mul_(unit.unsqueeze(1)), n));
}

at::Tensor bitShifts(const at::Tensor& like) { return iota(8, like.device()).to(at::kByte); }

at::Tensor signEncode(at::Tensor& acc, bool feedback, const CodecSpec&, uint64_t, int) {
  const int64_t n = acc.numel();
  const at::Tensor a = blocked(acc, kSignBlock);
  const int64_t blocks = a.size(0);
  at::Tensor length = at::full({blocks}, static_cast<float>(kSignBlock), acc.options());
  length.narrow(0, blocks - 1, 1).fill_(static_cast<float>(n - (blocks - 1) * kSignBlock));
  const at::Tensor scale = a.abs().sum(1).div_(length);
  at::Tensor positive = a.ge(0.f);
  if (a.numel() > n) positive.view({-1}).narrow(0, n, a.numel() - n).fill_(false);  // as the host: tail bits 0
  const at::Tensor bits =
      at::bitwise_left_shift(positive.view({-1, 8}).to(at::kByte), bitShifts(acc)).sum(1, false, at::kByte);
  at::Tensor payload = bytesOn(4 * blocks + (n + 7) / 8, acc);
  payload.narrow(0, 0, 4 * blocks).view(at::kFloat).copy_(scale);
  payload.narrow(0, 4 * blocks, (n + 7) / 8).copy_(bits.narrow(0, 0, (n + 7) / 8));
  if (feedback) acc.sub_(firstN(at::where(positive, scale.unsqueeze(1), scale.neg().unsqueeze(1)), n));
  return payload;
}

void signDecodeAdd(at::Tensor& out, const at::Tensor& payload, const CodecSpec&, uint64_t) {
  const int64_t n = out.numel(), blocks = (n + kSignBlock - 1) / kSignBlock, bytes = (n + 7) / 8;
  const at::Tensor scale = payload.narrow(0, 0, 4 * blocks).view(at::kFloat).unsqueeze(1);
  const at::Tensor bits =
      at::constant_pad_nd(payload.narrow(0, 4 * blocks, bytes), {0, blocks * kSignBlock / 8 - bytes});
  const at::Tensor positive =
      at::bitwise_and(at::bitwise_right_shift(bits.unsqueeze(1), bitShifts(out)), 1).to(at::kBool).view({blocks, -1});
  out.add_(firstN(at::where(positive, scale, scale.neg()), n));
}

const TensorCodec kTensorCodecs[] = {
    {"fp16", castEncode<at::kHalf>, castDecodeAdd<at::kHalf>},
    {"bf16", castEncode<at::kBFloat16>, castDecodeAdd<at::kBFloat16>},
    {"topk", topkEncode, topkDecodeAdd},
    {"topk_sampled", topkEncode, topkDecodeAdd},  // exact selection: what the sample approximates
    {"randomk", randomkEncode, randomkDecodeAdd},
    {"qsgd", qsgdEncode, qsgdDecodeAdd},
    {"sign", signEncode, signDecodeAdd},
};

const TensorCodec& tensorCodec(const CodecSpec& spec) {
  for (const TensorCodec& c : kTensorCodecs)
    if (std::strcmp(c.name, spec.entry->name) == 0) return c;
  fail(ErrorKind::Internal, "scalecomm: codec ", spec.str(),
       " has no form as torch operations (torch/tensor_codecs.cc)");
}

// The state on the device: the residual (undefined: zero) and PowerSGD's Q.
struct TensorState final : CompressState::OnDevice {
  at::Tensor residual;
  at::Tensor q;  // cols x rank
  void copyTo(CompressState& host) const override {
    host.residual.clear();
    host.warm = {};
    if (residual.defined()) {
      const at::Tensor r = residual.to(at::kCPU).contiguous();
      host.residual.assign(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
    }
    if (q.defined()) {
      const at::Tensor c = q.to(at::kCPU).contiguous();
      host.warm.q.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      host.warm.cols = q.size(0);
    }
  }
};

at::Tensor onDevice(const std::vector<float>& host, const at::Tensor& like) {
  // from_blob borrows `host`: a copy that owns its memory, on like's device.
  return at::from_blob(const_cast<float*>(host.data()), {static_cast<int64_t>(host.size())}, at::kFloat)
      .to(like.options(), /*non_blocking=*/false, /*copy=*/true);
}

// The state's tensors on x's device, moved there from host form (a restored
// checkpoint, or calls that ran on the host codecs) on first use.
TensorState& stateOn(CompressState& state, const at::Tensor& x, bool feedback) {
  if (state.device && dynamic_cast<TensorState*>(state.device.get()) == nullptr) state.toHost();
  if (!state.device) {
    auto st = std::make_shared<TensorState>();
    if (!state.residual.empty()) st->residual = onDevice(state.residual, x);
    if (!state.warm.q.empty() && state.warm.cols > 0) {
      st->q = onDevice(state.warm.q, x).view({state.warm.cols, -1});
    }
    state.residual.clear();
    state.warm = {};
    state.device = st;
  }
  auto& st = static_cast<TensorState&>(*state.device);
  // A key whose tensor changed size (DDP rebuilds its buckets after the first
  // step) starts over: an old residual belongs to other elements.
  if (st.residual.defined() && st.residual.numel() != x.numel()) st.residual.reset();
  if (feedback && !st.residual.defined()) st.residual = at::zeros_like(x);
  if (st.residual.defined() && st.residual.device() != x.device()) st.residual = st.residual.to(x.device());
  if (st.q.defined() && st.q.device() != x.device()) st.q = st.q.to(x.device());
  return st;
}

void allreduceSum(const CompressComms& comms, const at::Tensor& t) {
  comms.allreduce(t.data_ptr(), t.numel(), DataType::Float32, ReduceOp::Sum);
}

// P's columns made orthonormal as compress/powersgd.cc does (modified
// Gram-Schmidt, each column projected twice, dot products in double; a
// column left with no norm becomes zero), with no sync with the host.
void orthonormalise(at::Tensor& p) {
  const auto dot = [](const at::Tensor& a, const at::Tensor& b) {
    return a.to(at::kDouble).mul(b.to(at::kDouble)).sum();
  };
  for (int64_t t = 0; t < p.size(1); ++t) {
    at::Tensor col = p.select(1, t);
    const at::Tensor before = dot(col, col).sqrt();
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t u = 0; u < t; ++u) col.sub_(p.select(1, u) * dot(p.select(1, u), col).to(at::kFloat));
    }
    const at::Tensor norm = dot(col, col).sqrt();
    const at::Tensor keep = at::logical_and(norm.gt(before * 1e-6), norm.gt(1e-30));
    col.mul_(at::where(keep, norm.reciprocal(), at::zeros_like(norm)).to(at::kFloat));
  }
}

// compress/powersgd.h's powerSgd on acc (x + residual) over the layout's
// blocks, the sum into x; with feedback, acc becomes acc - this rank's own
// approximation (zero on dense blocks).
void powerSgdTensor(at::Tensor& acc, bool feedback, const at::Tensor& x, int r, const PowerSgdLayout& layout,
                    TensorState& st, const CompressComms& comms) {
  const int64_t n = acc.numel();
  const PowerSgdPlan plan = powerSgdPlan(n, r, layout);
  if (plan.secondCount == 0) {  // dense
    if (!x.is_same(acc)) x.copy_(acc);
    allreduceSum(comms, x);
    if (feedback) acc.zero_();  // sent whole (also when the sum is not finite: then it starts afresh)
    return;
  }
  if (!st.q.defined() || st.q.size(0) != plan.qCols || st.q.size(1) != r) {
    std::vector<float> q(static_cast<size_t>(plan.secondCount));
    for (const auto& b : plan.blocks) {
      if (!b.shape.gains) continue;
      for (int64_t i = 0; i < b.shape.cols * r; ++i) q[b.second + i] = codec_random::normal(kPowerSgdWarmStartSeed, i);
    }
    st.q = onDevice(q, x).view({plan.qCols, r});
  }
  // A block as its matrix: a view of acc where its shape holds it exactly (a
  // weight's own shape), else a zero-padded copy (a flat tensor's near-square matrix).
  const auto matrix = [&](const PowerSgdPlan::Block& b) {
    const at::Tensor a = acc.narrow(0, b.offset, b.count);
    const int64_t padding = b.shape.rows * b.shape.cols - b.count;
    return (padding == 0 ? a : at::constant_pad_nd(a, {0, padding})).view({b.shape.rows, b.shape.cols});
  };
  std::vector<at::Tensor> firsts;
  for (const auto& b : plan.blocks) {
    firsts.push_back(b.shape.gains ? matrix(b).mm(st.q.narrow(0, b.second / r, b.shape.cols)).view({-1})
                                   : acc.narrow(0, b.offset, b.count));
  }
  at::Tensor first = at::cat(firsts);
  allreduceSum(comms, first);
  // Some rank's acc was not finite (then the first sum is not, on every
  // rank): the sum is not either, and the residual and warm start stay as
  // they were, with no sync (a finite rank's residual is acc - x again).
  const at::Tensor finite = at::isfinite(first).all();
  std::vector<at::Tensor> ps, seconds;
  for (const auto& b : plan.blocks) {
    if (!b.shape.gains) continue;
    at::Tensor p = first.narrow(0, b.first, b.shape.rows * r).view({b.shape.rows, r});
    orthonormalise(p);
    seconds.push_back(matrix(b).t().mm(p).contiguous());
    ps.push_back(p);
  }
  size_t k = 0;
  for (const auto& b : plan.blocks) {
    at::Tensor xb = x.narrow(0, b.offset, b.count);
    if (!b.shape.gains) {
      if (feedback) acc.narrow(0, b.offset, b.count).sub_(at::where(finite, acc.narrow(0, b.offset, b.count), xb));
      xb.copy_(first.narrow(0, b.first, b.count));
      continue;
    }
    if (feedback)
      acc.narrow(0, b.offset, b.count).sub_(at::where(finite, firstN(ps[k].mm(seconds[k].t()), b.count), xb));
    ++k;
  }
  std::vector<at::Tensor> flat;
  for (const at::Tensor& q : seconds) flat.push_back(q.view({-1}));
  at::Tensor second = at::cat(flat);
  allreduceSum(comms, second);
  k = 0;
  for (const auto& b : plan.blocks) {
    if (!b.shape.gains) continue;
    const at::Tensor q = second.narrow(0, b.second, b.shape.cols * r).view({b.shape.cols, r});
    x.narrow(0, b.offset, b.count).copy_(firstN(ps[k].mm(q.t()), b.count));
    ++k;
  }
  st.q = at::where(finite, second.view({plan.qCols, r}), st.q);
}

at::Tensor sliceForViews(const at::Tensor& all, int64_t offset, int64_t bytes) {
  at::Tensor s = all.narrow(0, offset, bytes);
  return offset % 8 == 0 ? s : s.clone();  // float fields need aligned storage
}

}  // namespace

at::Tensor randomDraws(uint64_t seed, const at::Tensor& i) {
  const int64_t base = asBits(codec_random::start(seed));
  return finalize(at::add(at::mul(at::add(i, 1), asBits(codec_random::kGolden)), base));
}

void compressedAllreduceTensor(const at::Tensor& x, const CompressedSite& site, bool errorFeedback,
                               CompressState& state, const CompressComms& comms, const PowerSgdLayout& layout) {
  TensorState& st = stateOn(state, x, errorFeedback);
  const uint64_t step = state.steps;
  // An overflowed gradient (compress/compressed_allreduce.h): acc = x +
  // residual not finite (an infinity or NaN in x, or a sum that overflowed)
  // sends infinity in every element, and the residual starts afresh; no
  // sync with the host.
  at::Tensor acc = errorFeedback ? st.residual.add_(x) : x;
  const at::Tensor notFinite = at::isfinite(acc).all().logical_not();
  x.masked_fill_(notFinite, std::numeric_limits<float>::infinity());
  if (errorFeedback) acc.masked_fill_(notFinite, std::numeric_limits<float>::infinity());
  const Codec* codec = site.codec();
  const CodecSpec& spec = site.spec();
  if (codec == nullptr) {
    powerSgdTensor(acc, errorFeedback, x, spec.rank, layout, st, comms);
  } else {
    const TensorCodec& tc = tensorCodec(spec);
    const int64_t n = x.numel();
    const at::Tensor payload = tc.encode(acc, errorFeedback, spec, step, comms.rank);
    const int64_t b = payload.numel();
    if (b != codec->payloadBytes(n)) {
      fail(ErrorKind::Internal, "scalecomm codec ", spec.str(), ": its torch form made ", b, " payload bytes for ", n,
           " values, its wire format ", codec->payloadBytes(n));
    }
    at::Tensor out = x;
    if (const auto type = codec->sumType()) {
      comms.allreduce(payload.data_ptr(), b / static_cast<int64_t>(elementSize(*type)), *type, ReduceOp::Sum);
      out.zero_();
      tc.decodeAdd(out, payload, spec, step);
    } else {
      at::Tensor all = bytesOn(comms.size * b, payload);
      all.narrow(0, comms.rank * b, b).copy_(payload);
      comms.allgatherBytes(all.data_ptr<uint8_t>(), b);
      out.zero_();
      for (int q = 0; q < comms.size; ++q) tc.decodeAdd(out, sliceForViews(all, q * b, b), spec, step);
    }
  }
  // Afresh, too, where the residual itself came out not finite (acc above
  // a 2-byte type's range, as fp16's 65504: the payload showed it).
  if (errorFeedback) st.residual.masked_fill_(at::isfinite(st.residual).all().logical_not(), 0.f);
  state.steps += 1;
}

std::pair<at::Tensor, at::Tensor> encodeTensor(const at::Tensor& x, at::Tensor* residual, const CodecSpec& spec,
                                               uint64_t seed, int rank) {
  const TensorCodec& tc = tensorCodec(spec);
  at::Tensor acc = residual ? residual->add_(x) : x;
  at::Tensor payload = tc.encode(acc, residual != nullptr, spec, seed, rank);
  at::Tensor decoded = at::zeros_like(x);
  tc.decodeAdd(decoded, payload, spec, seed);
  return {payload, decoded};
}

}  // namespace scalecomm
