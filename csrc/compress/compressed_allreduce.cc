#include "compress/compressed_allreduce.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "compress/topk_cpu.h"

namespace scalecomm {

namespace {

// PowerSGD views n elements as a near-square rows x cols matrix (zero padded).
struct PowerSgdShape {
  int64_t rows, cols;
  bool gains;  // the factors are smaller than the tensor
};

PowerSgdShape powerSgdShape(int64_t n, int r, int64_t matrixRows = 0) {
  const int64_t rows = matrixRows > 0 ? matrixRows : static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t cols = (n + rows - 1) / rows;
  return {rows, cols, (rows + cols) * r < n && r < std::min(rows, cols)};
}

// Returns the sum over ranks; *local is this rank's approximation of c.
at::Tensor powerSgd(const at::Tensor& c, int r, int64_t matrixRows, CompressState& state, const CompressComms& comms,
                    at::Tensor* local) {
  const int64_t n = c.numel();
  const PowerSgdShape shape = powerSgdShape(n, r, matrixRows);
  if (!shape.gains) {  // dense
    at::Tensor dense = c.clone();
    comms.allreduceSum(dense);
    *local = c;
    return dense;
  }
  at::Tensor m = at::constant_pad_nd(c, {0, shape.rows * shape.cols - n}).view({shape.rows, shape.cols});
  if (!state.q.defined() || state.q.size(0) != shape.cols || state.q.size(1) != r) {
    auto gen = at::detail::createCPUGenerator(0x5ca1ec033ULL);  // equal on every rank
    state.q = at::randn({shape.cols, r}, gen, at::TensorOptions().dtype(at::kFloat)).to(c.device());
  }
  at::Tensor p = at::matmul(m, state.q);
  comms.allreduceSum(p);
  p = std::get<0>(at::linalg_qr(p, "reduced"));
  at::Tensor q = at::matmul(m.t(), p).contiguous();
  *local = at::matmul(p, q.t()).reshape({-1}).narrow(0, 0, n);
  comms.allreduceSum(q);
  state.q = q;
  return at::matmul(p, q.t()).reshape({-1}).narrow(0, 0, n);
}

// Top-k and sign on a float32 CPU tensor: one fused pass for acc, residual
// and payload (compress/topk_cpu.h, compress/sign_cpu.h); x is overwritten
// only once the payloads of all ranks are in.
bool fusedOnCpu(const CodecSpec& spec, const at::Tensor& x) {
  return spec.entry->fusedEncode != nullptr && topkCpuApplies(x);
}

void fusedAllreduceCpu(at::Tensor& x, const CodecSpec& spec, bool errorFeedback, CompressState& state,
                       const CompressComms& comms, uint64_t step) {
  at::Tensor* residual = errorFeedback ? &state.residual : nullptr;
  at::Tensor payload = spec.entry->fusedEncode(x, residual, spec, step);
  at::Tensor all = comms.allgatherBytes(payload);
  const int64_t b = payload.numel();
  x.zero_();
  for (int q = 0; q < comms.size; ++q) spec.entry->fusedDecodeAdd(x, all.narrow(0, q * b, b), spec);
  state.steps += 1;
}

}  // namespace

CompressedSite::CompressedSite(CodecSpec spec)
    : spec_(std::move(spec)), name_(spec_.str()), codec_(spec_.entry->make ? makeCodec(spec_) : nullptr) {}

Label CompressedSite::title(AlgorithmRef algorithm) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [key, title] : titles_)
    if (key == algorithm.key()) return title;
  titles_.emplace_back(algorithm.key(), Label("allreduce:" + algorithm + ":" + name_));
  return titles_.back().second;
}

int64_t compressedWireBytes(const CodecSpec& spec, int64_t numel) {
  if (spec.entry->make != nullptr) return makeCodec(spec)->wireBytes(numel);
  const PowerSgdShape shape = powerSgdShape(numel, spec.rank);
  return shape.gains ? 4 * (shape.rows + shape.cols) * spec.rank : 4 * numel;
}

void compressedAllreduce(at::Tensor& x, const CompressedSite& site, bool errorFeedback, CompressState& state,
                         const CompressComms& comms, uint64_t step, int64_t matrixRows) {
  const CodecSpec& spec = site.spec();
  // A key whose tensor changed size (DDP rebuilds its buckets after the first
  // step) starts over: an old residual belongs to other elements.
  if (state.residual.defined() && state.residual.numel() != x.numel()) state.residual = at::Tensor();
  if (fusedOnCpu(spec, x)) {
    fusedAllreduceCpu(x, spec, errorFeedback, state, comms, step);
    return;
  }
  at::Tensor c = x.reshape({-1}).to(at::kFloat).clone();
  if (errorFeedback && state.residual.defined()) c.add_(state.residual);
  at::Tensor local;  // this rank's decoded contribution, for the residual
  at::Tensor sum;
  if (spec.entry->make == nullptr) {  // powersgd: its own two rounds
    sum = powerSgd(c, spec.rank, matrixRows, state, comms, &local);
  } else {
    const Codec* codec = site.codec();
    at::Tensor payload = codec->encode(c, step, comms.rank);
    if (errorFeedback) {
      local = at::zeros_like(c);
      codec->decodeAdd(local, payload, step);
    }
    sum = at::zeros_like(c);
    if (codec->summable()) {
      at::Tensor summed = payload.clone();
      comms.allreduceSum(summed);
      codec->decodeAdd(sum, summed, step);
    } else {
      at::Tensor all = comms.allgatherBytes(payload);
      const int64_t b = payload.numel();
      for (int q = 0; q < comms.size; ++q) {
        at::Tensor one = all.narrow(0, q * b, b);
        if (one.storage_offset() % 8 != 0) one = one.clone();  // float fields need 4-byte alignment
        codec->decodeAdd(sum, one, step);
      }
    }
  }
  if (errorFeedback) state.residual = c - local;
  state.steps += 1;
  x.view({-1}).copy_(sum);
}

}  // namespace scalecomm
