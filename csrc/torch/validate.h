// scalecomm torch adapter: argument checks done before any communication.
//
// Contract: each check raises ValueError (c10::ValueError) with a message that
// names the collective, the rank, the offending argument and what to do; none
// touches the group, so after a failed check the group is still usable.
// Pure functions of their arguments.
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include "core/dtype.h"
#include "torch/tensor_types.h"

namespace scalecomm {

// CPU or CUDA tensors (whether this build can take CUDA ones is
// DeviceCall::begin's check, torch/device_call.h). Non-contiguous CPU tensors
// are staged through a contiguous copy (HostStage); CUDA ones must be
// contiguous.
inline void checkDense(const char* coll, int rank, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), "scalecomm ", coll, " (rank ", rank, "): tensor is undefined");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "scalecomm ", coll, " (rank ", rank, "): ", t.layout(),
                    " tensors are not supported; pass a dense tensor");
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "scalecomm ", coll, " (rank ", rank,
                    "): tensor is on ", t.device(), "; scalecomm takes CPU and CUDA tensors");
  TORCH_CHECK_VALUE(t.is_contiguous() || t.device().is_cpu(), "scalecomm ", coll, " (rank ", rank,
                    "): CUDA tensor is not contiguous (sizes ", t.sizes(), ", strides ", t.strides(),
                    "); pass tensor.contiguous() and copy the result back");
}

inline const at::Tensor& singleTensor(const char* coll, int rank, const std::vector<at::Tensor>& ts) {
  TORCH_CHECK_VALUE(ts.size() == 1, "scalecomm ", coll, " (rank ", rank, "): expected exactly one tensor, got ",
                    ts.size(), "; one tensor per process is supported");
  return ts[0];
}

inline void checkRoot(const char* coll, int rank, int size, int64_t root) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "scalecomm ", coll, " (rank ", rank, "): root/src rank ", root,
                    " is out of range for a group of ", size, " ranks (valid: 0..", size - 1, ")");
}

// c10d's rootTensor indexes the tensor list, which holds one tensor here.
inline void checkRootTensor(const char* coll, int rank, int64_t rootTensor) {
  TORCH_CHECK_VALUE(rootTensor == 0, "scalecomm ", coll, " (rank ", rank, "): root tensor index ", rootTensor,
                    " is out of range: one tensor per process is supported (index 0)");
}

inline void checkSameAs(const char* coll, int rank, const at::Tensor& t, const at::Tensor& ref, const char* what) {
  checkDense(coll, rank, t);
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type() && t.numel() == ref.numel(), "scalecomm ", coll, " (rank ",
                    rank, "): ", what, " has ", t.numel(), " elements of ", t.scalar_type(), " but the input has ",
                    ref.numel(), " elements of ", ref.scalar_type(), "; they must match");
}

// A tensor a result is written into: no two of its elements may share
// memory (an expanded, stride-0 view), or the result is not representable.
inline void checkWritable(const char* coll, int rank, const at::Tensor& t) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, "scalecomm ", coll, " (rank ", rank,
                    "): the output tensor (sizes ", t.sizes(), ", strides ", t.strides(),
                    ") has elements that share memory (an expanded or stride-0 view), so a result cannot be written "
                    "into it; pass a tensor that owns each element (t.clone() or torch.empty(...))");
}

// The bytes [first, last) a tensor's elements span in its storage.
inline std::pair<uintptr_t, uintptr_t> memorySpan(const at::Tensor& t) {
  auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t reach = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {first, first};
    reach += (t.size(d) - 1) * t.stride(d);
  }
  return {first, first + static_cast<uintptr_t>((reach + 1) * t.element_size())};
}

// An input that the collective reads while writing `out`: it may not share
// memory with `out`, except as exactly `out`'s block at byte offset
// `inPlaceOffset` (an in-place all_gather: the input is this rank's block of
// the output; -1: no such form).
inline void checkNoOverlap(const char* coll, int rank, const at::Tensor& in, const at::Tensor& out,
                           int64_t inPlaceOffset = -1) {
  const auto a = memorySpan(in), b = memorySpan(out);
  if (a.first == a.second || b.first == b.second || a.second <= b.first || b.second <= a.first) return;
  if (in.is_contiguous() && out.is_contiguous() && inPlaceOffset >= 0 &&
      a.first == b.first + static_cast<uintptr_t>(inPlaceOffset))
    return;
  TORCH_CHECK_VALUE(false, "scalecomm ", coll, " (rank ", rank, "): the input tensor shares memory with the output",
                    inPlaceOffset >= 0 ? " other than as this rank's own block of it" : "",
                    ", so the input would be overwritten while it is read; pass separate tensors",
                    inPlaceOffset >= 0 ? " (or the input as exactly output[rank * n:(rank + 1) * n])" : "");
}

struct ReductionArgs {
  DataType dtype;
  MappedOp op;
};

inline ReductionArgs reductionArgs(const char* coll, int rank, const at::Tensor& t, const c10d::ReduceOp& rop) {
  checkDense(coll, rank, t);
  auto dt = arithmeticType(t.scalar_type());
  TORCH_CHECK_VALUE(dt.has_value(), "scalecomm ", coll, " (rank ", rank, "): dtype ", t.scalar_type(),
                    " cannot be reduced; supported: float32, float64, float16, bfloat16, int8, int16, int32, "
                    "int64, uint8");
  auto op = toReduceOp(rop);
  TORCH_CHECK_VALUE(op.has_value(), "scalecomm ", coll, " (rank ", rank, "): reduce op ", static_cast<int>(rop.op_),
                    " is not supported (PREMUL_SUM needs a factor)");
  TORCH_CHECK_VALUE(reduceOpSupports(op->op, *dt), "scalecomm ", coll, " (rank ", rank, "): reduce op ",
                    reduceOpName(op->op), " is not defined for ", t.scalar_type(),
                    (isFloating(*dt) ? "; bitwise ops (BAND/BOR/BXOR) need an integer dtype" : ""));
  return {*dt, *op};
}

// How a tensor travels when it is only moved: by element type when we know it
// (so peers' dtypes are checked), else as bytes.
struct WireShape {
  DataType dtype;
  int64_t count;
};

inline WireShape wireShape(const at::Tensor& t) {
  auto dt = arithmeticType(t.scalar_type());
  if (dt) return {*dt, t.numel()};
  return {DataType::Opaque, static_cast<int64_t>(t.nbytes())};
}

inline std::vector<at::Tensor> flattenAll(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.reshape({-1}));
  return out;
}

}  // namespace scalecomm
