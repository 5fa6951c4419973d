// scalecomm torch adapter: the reduction kernels as Python functions, for tests.
//
// Contract: pyscalecomm._C._testing.reduce_into(dst, src, op), scale_(t, factor) and
// divide_(t, divisor) run scalecomm's own element-wise reductions (the ones
// collectives use) on contiguous tensors of one dtype and size: CPU tensors
// through comm/reducer.h, CUDA tensors (CUDA builds) through
// comm/cuda/reduce_kernels.h on the current stream. They let tests compare every
// dtype and op with torch, on CPU and, where a GPU exists, on the GPU.
#include <torch/python.h>

#include <string>

#include "comm/cuda/reduce_kernels.h"
#include "comm/reducer.h"
#include "core/error.h"
#include "torch/bindings.h"
#include "torch/tensor_types.h"

#ifdef SCALECOMM_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace py = pybind11;

namespace scalecomm {

namespace {

ReduceOp opFromName(const std::string& name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product,
                      ReduceOp::PremulSum, ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    if (name == reduceOpName(op)) return op;
  }
  throw py::value_error("unknown reduction '" + name + "'; use sum, avg, min, max, prod, premul_sum, band, bor, bxor");
}

DataType dtypeOf(const at::Tensor& t) {
  auto d = arithmeticType(t.scalar_type());
  if (!d) throw py::type_error(std::string("no scalecomm arithmetic for ") + c10::toString(t.scalar_type()));
  if (!t.is_contiguous()) throw py::value_error("tensors must be contiguous");
  return *d;
}

// Runs host() for a CPU tensor, device(stream) on the current CUDA stream for
// a CUDA tensor (CUDA builds; others refuse CUDA tensors).
template <typename Host, typename Device>
void onTensorsDevice(const at::Tensor& t, Host host, Device device) {
  if (!t.is_cuda()) return host();
#ifdef SCALECOMM_WITH_CUDA
  device(static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream()));
#else
  (void)device;
  throw py::value_error("this scalecomm build has no CUDA kernels (SCALECOMM_CUDA=0?)");
#endif
}

}  // namespace

void bindKernels(py::module& m) {
  m.def(
      "reduce_into",
      [](at::Tensor& dst, const at::Tensor& src, const std::string& opName) {
        const DataType d = dtypeOf(dst);
        const ReduceOp op = opFromName(opName);
        if (src.scalar_type() != dst.scalar_type() || src.numel() != dst.numel() || src.device() != dst.device()) {
          throw py::value_error("dst and src must have one dtype, size and device");
        }
        dtypeOf(src);
        if (!reduceOpSupports(op, d)) throw py::value_error(opName + " is not defined for this dtype");
        onTensorsDevice(
            dst, [&] { reduceInto(dst.data_ptr(), src.data_ptr(), dst.numel(), d, op); },
            [&](void* stream) { cuda::reduceInto(dst.data_ptr(), src.data_ptr(), dst.numel(), d, op, stream); });
      },
      py::arg("dst"), py::arg("src"), py::arg("op"), "dst = op(dst, src) element-wise, with scalecomm's reducer.");
  m.def(
      "scale_",
      [](at::Tensor& t, double factor) {
        const DataType d = dtypeOf(t);
        if (!isFloating(d)) throw py::value_error("scale_ is for floating tensors");
        onTensorsDevice(
            t, [&] { scaleInPlace(t.data_ptr(), t.numel(), d, factor); },
            [&](void* stream) { cuda::scaleInPlace(t.data_ptr(), t.numel(), d, factor, stream); });
      },
      "t *= factor (PREMUL_SUM's pre-multiplication).");
  m.def(
      "divide_",
      [](at::Tensor& t, int64_t divisor) {
        const DataType d = dtypeOf(t);
        onTensorsDevice(
            t, [&] { divideInPlace(t.data_ptr(), t.numel(), d, divisor); },
            [&](void* stream) { cuda::divideInPlace(t.data_ptr(), t.numel(), d, divisor, stream); });
      },
      "t /= divisor (AVG's last step; integers truncate toward zero).");
}

}  // namespace scalecomm
