// scalecomm torch adapter: compressed allreduce (compress/compressed_allreduce.h)
// as a collective of the group: validated on the caller, run on the worker
// over the group's own allreduce and allgather, titled
// "scalecomm:allreduce:<algorithm>:<codec>" in profiles. Each spec's site
// (its parse, codec and titles) is prepared on its first call.
#include <c10/util/Exception.h>

#include <optional>

#include "torch/backend.h"

#include "comm/stream_channel.h"
#include "torch/validate.h"

namespace scalecomm {

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduceCompressed(const at::Tensor& t, const std::string& spec,
                                                                     const std::string& key, int errorFeedback,
                                                                     bool average, std::chrono::milliseconds timeout) {
  const char* what = "compressed allreduce";
  checkDense(what, getRank(), t);
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "scalecomm ", what, " (rank ", getRank(), "): dtype ",
                    t.scalar_type(),
                    " is not floating point; compression applies to gradients (float32/64, fp16, bf16)");
  std::shared_ptr<const CompressedSite> site;
  try {
    site = compressedSite(spec);
  } catch (const Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  const bool ef = errorFeedback < 0 ? site->spec().biased() : errorFeedback != 0;
  // No key: the state is the tensor's memory's, and ends with its storage.
  const bool byMemory = key.empty();
  const std::string stateKey =
      byMemory ? strCat("ptr:", reinterpret_cast<uintptr_t>(t.data_ptr()), ":", t.numel()) : key;
  std::optional<CompressionStore::Owner> owner;
  if (byMemory) owner.emplace(t.storage().getWeakStorageImpl());
  auto stage = stageFor(what, {t}, /*onDevice=*/false);  // the codecs run on the CPU
  at::Tensor tensor = stage->inout(t);
  const AlgorithmRef algo = group_->algorithmFor(CallKind::Allreduce, static_cast<int64_t>(t.nbytes()));
  auto store = compression_;
  const int rank = getRank(), size = getSize();
  const int64_t rows = t.dim() >= 2 ? t.size(0) : 0;  // PowerSGD: a weight's own matrix shape
  Call call;
  call.name = site->title(algo);
  call.algorithm = algo;
  call.timeoutMs = timeout.count();
  if (size > 1 && t.numel() > 0) {  // else nothing to send: the sum is the tensor itself (exact; no codec, no residual)
    call.body = [tensor, site, key = stateKey, byMemory, owner, ef, average, store, rank, size, rows](
                    Communicator& comm, const CollectiveOptions& o) {
      const std::string& codecName = site->name();
      CompressComms cc;
      cc.rank = rank;
      cc.size = size;
      // The codec and its parameters travel in every message's settings: a
      // rank with another codec (or ratio, levels, rank) fails naming it.
      CollectiveOptions coded = o;
      coded.codec = site->tag();
      cc.allreduceSum = [&](void* data, int64_t count, DataType type) {
        scalecomm::allreduce(comm.channel(), data, count, type, ReduceOp::Sum, 1.0, coded);
      };
      cc.allgatherBytes = [&](uint8_t* all, int64_t b) {
        std::vector<void*> ptrs;
        for (int q = 0; q < size; ++q) ptrs.push_back(all + q * b);
        CollectiveOptions g = coded;
        g.algorithm = o.algorithm.is(AlgorithmKind::Native) ? o.algorithm : AlgorithmRef(ringAlgorithm());
        scalecomm::allgather(comm.channel(), ptrs, b, DataType::Opaque, g);
      };
      // Errors of the inner allreduce or allgather name the call the user made.
      const auto named = [&](auto&& body) {
        try {
          body();
        } catch (const Error& e) {
          std::string what = e.what();
          for (const char* inner : {"scalecomm allgather (", "scalecomm allreduce ("}) {
            const std::string head(inner);
            if (what.rfind(head, 0) == 0) {
              what = strCat("scalecomm allreduce with codec ", codecName, " (", what.substr(head.size()));
              break;
            }
          }
          throw Error(e.kind(), what);
        }
      };
      // The codecs take float32 host memory: another dtype runs on a float32 copy.
      at::Tensor flat = tensor.view({-1});
      at::Tensor x = flat.scalar_type() == at::kFloat ? flat : flat.to(at::kFloat);
      auto run = [&](CompressState& s) {
        compressedAllreduce(x.data_ptr<float>(), x.numel(), *site, ef, s, cc, s.steps, rows);
      };
      named([&] {
        if (byMemory) {
          store->withOwner(key, *owner, run);
        } else {
          store->with(key, run);
        }
      });
      if (!x.is_same(flat)) flat.copy_(x);
      if (average) tensor.div_(size);
    };
  }
  return run(c10d::OpType::ALLREDUCE, {t}, std::move(call), stage);
}

std::shared_ptr<const CompressedSite> ScalecommBackend::compressedSite(const std::string& spec) {
  std::lock_guard<std::mutex> g(sitesMu_);
  auto it = sites_.find(spec);
  if (it == sites_.end())
    it = sites_.emplace(spec, std::make_shared<const CompressedSite>(CodecSpec::parse(spec))).first;
  return it->second;
}

}  // namespace scalecomm
