#include "compress/compressed_allreduce.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace scalecomm {

namespace {

CompressResult powerSgd(at::Tensor& c, int r, CompressState& state, const CompressComms& comms, at::Tensor* local) {
  const int64_t n = c.numel();
  const int64_t rows = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t cols = (n + rows - 1) / rows;
  CompressResult res;
  if ((rows + cols) * r >= n || r >= std::min(rows, cols)) {  // no gain: dense
    at::Tensor dense = c.clone();
    comms.allreduceSum(dense);
    *local = c.clone();
    res.wireBytes = 4 * n;
    res.compressed = false;
    c.copy_(dense);
    return res;
  }
  at::Tensor m = at::constant_pad_nd(c, {0, rows * cols - n}).view({rows, cols});
  if (!state.q.defined() || state.q.size(0) != cols || state.q.size(1) != r) {
    auto gen = at::detail::createCPUGenerator(0x5ca1ec033ULL);  // equal on every rank
    state.q = at::randn({cols, r}, gen, at::TensorOptions().dtype(at::kFloat)).to(c.device());
  }
  at::Tensor p = at::matmul(m, state.q);
  comms.allreduceSum(p);
  p = std::get<0>(at::linalg_qr(p, "reduced"));
  at::Tensor qLocal = at::matmul(m.t(), p).contiguous();
  *local = at::matmul(p, qLocal.t()).reshape({-1}).narrow(0, 0, n);
  at::Tensor q = qLocal.clone();
  comms.allreduceSum(q);
  state.q = q;
  c.copy_(at::matmul(p, q.t()).reshape({-1}).narrow(0, 0, n));
  res.wireBytes = 4 * (rows + cols) * r;
  return res;
}

}  // namespace

CompressResult compressedAllreduce(at::Tensor& x, const CodecSpec& spec, bool errorFeedback, CompressState& state,
                                   const CompressComms& comms, uint64_t step) {
  at::Tensor c = x.reshape({-1}).to(at::kFloat).clone();
  if (errorFeedback && state.residual.defined()) c.add_(state.residual);
  at::Tensor local;  // this rank's decoded contribution, for the residual
  CompressResult res;
  at::Tensor sum;
  if (spec.name == "powersgd") {
    res = powerSgd(c, spec.rank, state, comms, &local);
    sum = c;
  } else {
    auto codec = makeCodec(spec);
    at::Tensor payload = codec->encode(c, step, comms.rank);
    res.wireBytes = codec->wireBytes(c.numel());
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
      at::Tensor all = comms.allgatherBytes(at::Tensor(payload).contiguous());
      const int64_t b = payload.numel();
      for (int q = 0; q < comms.size; ++q) {
        at::Tensor one = all.narrow(0, q * b, b);
        if (one.storage_offset() % 8 != 0) one = one.clone();  // float fields need 4-byte alignment
        codec->decodeAdd(sum, one, step);
      }
    }
  }
  if (errorFeedback) {
    at::Tensor mine = x.reshape({-1}).to(at::kFloat);
    if (state.residual.defined()) mine = mine + state.residual;
    state.residual = mine - local;
  }
  state.steps += 1;
  x.view({-1}).copy_(sum);
  return res;
}

}  // namespace scalecomm
