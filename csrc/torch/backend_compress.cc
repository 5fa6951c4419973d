// scalecomm torch adapter: compressed allreduce as a collective of the group
// (CallKind::CompressedAllreduce, group/compressed_call.cc): validated on
// the caller, the spec's site and the state's slot found here, run by the
// Group; titled "scalecomm:allreduce:<algorithm>:<codec>" in profiles.
// Where it encodes (codec_kernels): a CUDA tensor on the NCCL channel runs
// the codecs as torch operations on its GPU (torch/tensor_codecs.h, the
// call's own body); otherwise the tensor is staged to host memory and runs
// scalecomm's loops, or (codec_kernels=torch) the torch form there.
#include <c10/util/Exception.h>

#include "torch/backend.h"

#include "torch/tensor_codecs.h"
#include "torch/validate.h"

namespace scalecomm {

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduceCompressed(const at::Tensor& t, const std::string& spec,
                                                                     const std::string& key, int errorFeedback,
                                                                     bool average, std::chrono::milliseconds timeout,
                                                                     const std::vector<std::vector<int64_t>>& shapes,
                                                                     bool blocking) {
  const char* what = "compressed allreduce";
  checkDense(what, getRank(), t);
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "scalecomm ", what, " (rank ", getRank(), "): dtype ",
                    t.scalar_type(),
                    " is not floating point; compression applies to gradients (float32/64, fp16, bf16)");
  auto prepared = std::make_shared<CompressedCall>();
  const bool chosen = spec == "auto";  // compress/auto_select.h: a codec per key, chosen by measurement
  if (chosen) {
    TORCH_CHECK_VALUE(t.is_cpu(), "scalecomm ", what, " (rank ", getRank(),
                      "): compression auto chooses among scalecomm's host codecs and takes CPU tensors; for a ",
                      t.device(), " tensor name a codec (docs/compression.md)");
    TORCH_CHECK_VALUE(config().deterministic == 0, "scalecomm ", what, " (rank ", getRank(),
                      "): compression auto chooses its codec by measured time, so two runs may differ; a "
                      "deterministic group needs a named codec");
    prepared->chooser = group_->autoCompression();
  } else {
    try {
      prepared->site = group_->compressedSite(spec);
    } catch (const Error& e) {
      TORCH_CHECK_VALUE(false, e.what());
    }
  }
  // auto keeps error feedback on (its residual carries over between codecs).
  prepared->errorFeedback = errorFeedback < 0 ? (chosen || prepared->site->spec().biased()) : errorFeedback != 0;
  // PowerSGD: each weight in its own matrix shape (rows x the rest)
  if (shapes.empty()) {
    if (t.dim() >= 2) prepared->layout = {{t.numel(), t.size(0)}};
  } else {
    int64_t total = 0;
    for (const auto& shape : shapes) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      prepared->layout.push_back({count, shape.size() >= 2 ? shape[0] : kPowerSgdDense});
      total += count;
    }
    TORCH_CHECK_VALUE(total == t.numel(), "scalecomm ", what, " (rank ", getRank(), "): the shapes given hold ", total,
                      " values, the tensor ", t.numel(), "; give the shapes of the weights it holds, in order");
  }
  // No key: the state is the tensor's memory's, and ends with its storage.
  prepared->slot =
      key.empty() ? compression_->slotOwnedBy(strCat("ptr:", reinterpret_cast<uintptr_t>(t.data_ptr()), ":", t.numel()),
                                              t.storage().getWeakStorageImpl())
                  : compression_->slot(key);
  const std::string& kernels = config().codecKernels;
  auto stage = stageFor(what, {t}, /*onDevice=*/kernels != "host" && reducesOnDevice());
  TORCH_CHECK(!stage->deviceCall() || !stage->deviceCall()->capturing(), "scalecomm ", what, " (rank ", getRank(),
              "): called during CUDA graph capture; a compressed allreduce checks its payloads on the host between "
              "its rounds, which a graph cannot record; capture the uncompressed allreduce instead");
  // deterministic: neither (config checks); auto: neither (CPU tensors, host codecs)
  const bool torchOps = !chosen && (stage->direct() || kernels == "torch");
  at::Tensor tensor = stage->inout(t);
  const AlgorithmRef algo = group_->algorithmFor(CallKind::CompressedAllreduce, static_cast<int64_t>(t.nbytes()));
  Call call;
  call.kind = CallKind::CompressedAllreduce;
  call.name = chosen ? prepared->chooser->title(algo, -1) : prepared->site->title(algo);
  call.algorithm = algo;
  call.timeoutMs = timeout.count();
  call.blocking = blocking;  // Group::dispatch runs it inline only for host memory on an idle group
  call.dtype = DataType::Float32;
  call.count = t.numel();
  // The codecs take float32: another dtype runs on a float32 copy.
  const at::Tensor flat = tensor.view({-1});
  const at::Tensor x =
      flat.scalar_type() == at::kFloat ? flat : at::empty({t.numel()}, flat.options().dtype(at::kFloat));
  // The host paths average in their own passes (auto's none: in its sum);
  // the torch form's result is divided below.
  prepared->average = average && !torchOps;
  if (torchOps) {
    prepared->body = [x, site = prepared->site, feedback = prepared->errorFeedback, layout = prepared->layout](
                         CompressState& state, const CompressComms& comms) {
      compressedAllreduceTensor(x, *site, feedback, state, comms, layout);
    };
  }
  call.compressed = std::move(prepared);
  call.data = x.data_ptr();
  const int size = getSize();
  if (size > 1 && t.numel() > 0) {  // else nothing is sent: the tensor stays exact
    if (!x.is_same(flat)) call.before = [flat, x]() mutable { x.copy_(flat); };
    call.after = [flat, x, divide = average && torchOps, size, tensor]() mutable {
      if (!x.is_same(flat)) flat.copy_(x);
      if (divide) tensor.div_(size);
    };
  }
  return run(c10d::OpType::ALLREDUCE, {t}, std::move(call), stage);
}

}  // namespace scalecomm
