// scalecomm torch adapter: the DDP communication hook in C++.
//
// Contract: `register_ddp_hook(reducer, backend, compression, error_feedback)`
// gives DDP's Reducer (`ddp.reducer`) a CommHookInterface that averages each
// gradient bucket through the backend's compressed allreduce, keyed
// "ddp-bucket-<index>" (the error-feedback and auto state of that bucket).
// The Reducer calls runHook from the backward's thread with the bucket's
// flat buffer; the hook queues the call and returns the Work's future (the
// buffer, averaged in place), so no Python runs per bucket and the backward
// never takes the GIL for communication. The bucket's weight shapes (for
// PowerSGD, named or as a candidate of auto) are read from the bucket's
// parameters on each call: DDP may rebuild its buckets after the first step.
// A Reducer takes one hook, once (torch refuses a second).
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "compress/auto_select.h"
#include "torch/backend.h"
#include "torch/bindings.h"

namespace scalecomm {
namespace {

class CompressedDdpHook final : public c10d::CommHookInterface {
 public:
  CompressedDdpHook(c10::intrusive_ptr<ScalecommBackend> backend, std::string spec, int errorFeedback)
      : backend_(std::move(backend)),
        spec_(std::move(spec)),
        errorFeedback_(errorFeedback),
        shaped_(compressionTakesShapes(spec_)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<std::vector<int64_t>> shapes;
    if (shaped_) {
      for (const at::Tensor& p : bucket.getParameters()) shapes.push_back(p.sizes().vec());
    }
    auto work = backend_->allreduceCompressed(bucket.getBufferRef(), spec_, strCat("ddp-bucket-", bucket.getIndex()),
                                              errorFeedback_, /*average=*/true, std::chrono::milliseconds(0), shapes);
    return work->getFuture();
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  const c10::intrusive_ptr<ScalecommBackend> backend_;
  const std::string spec_;
  const int errorFeedback_;
  const bool shaped_;  // the spec factors each weight in its own shape (PowerSGD, or auto with it)
};

}  // namespace

void bindDdpHook(py::module& m) {
  m.def(
      "register_ddp_hook",
      [](py::object reducer, c10::intrusive_ptr<ScalecommBackend> backend, const std::string& spec, int errorFeedback) {
        auto& r = reducer.cast<c10d::Reducer&>();
        r.register_comm_hook(std::make_unique<CompressedDdpHook>(std::move(backend), spec, errorFeedback));
      },
      py::arg("reducer"), py::arg("backend"), py::arg("compression"), py::arg("error_feedback") = -1,
      "Gives a DDP Reducer (ddp.reducer) scalecomm's compressed allreduce as its C++ comm hook "
      "(see pyscalecomm.hooks.register).");
}

}  // namespace scalecomm
