// scalecomm torch adapter: the rooted and scattering collectives: reduce,
// reduce_scatter, gather, scatter and all-to-all (see backend.h for the
// contract every collective follows: validate, build a Call, return a Work).
#include <c10/util/Exception.h>

#include <algorithm>

#include "torch/backend.h"
#include "torch/validate.h"

namespace scalecomm {

namespace {

std::vector<int64_t> equalSplits(int64_t rows, int n, const char* coll, int rank, const char* what) {
  TORCH_CHECK_VALUE(rows % n == 0, "scalecomm ", coll, " (rank ", rank, "): ", what, " has ", rows,
                    " rows, not divisible by the world size ", n, "; pass split sizes");
  return std::vector<int64_t>(n, rows / n);
}

// Split sizes of all_to_all_single: n entries, each in [0, rows], summing
// to rows. The running sum never exceeds rows, so it cannot overflow.
void checkSplits(const std::vector<int64_t>& splits, int64_t rows, int n, int rank, const char* which) {
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == n, "scalecomm all_to_all_single (rank ", rank, "): ", which,
                    "_split_sizes has ", splits.size(), " entries but the group has ", n,
                    " ranks; pass one split size per rank");
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    const int64_t s = splits[q];
    TORCH_CHECK_VALUE(s >= 0 && s <= rows - total, "scalecomm all_to_all_single (rank ", rank, "): ", which,
                      "_split_sizes[", q, "] = ", s, (s < 0 ? " is negative" : " runs past the tensor"), "; the ",
                      which, " has ", rows, " rows along dim 0 and its split sizes must be >= 0 and sum to ", rows);
    total += s;
  }
  TORCH_CHECK_VALUE(total == rows, "scalecomm all_to_all_single (rank ", rank, "): ", which, "_split_sizes sum to ",
                    total, " but the ", which, " has ", rows, " rows along dim 0; they must sum to ", rows);
}

// The root's list of one tensor per rank (validated against `ref`); empty on
// other ranks, which must pass none.
std::vector<at::Tensor> rootList(const char* coll, int rank, int root, int size,
                                 const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& ref,
                                 const char* what) {
  if (rank != root) {
    TORCH_CHECK_VALUE(lists.empty() || lists[0].empty(), "scalecomm ", coll, " (rank ", rank, "): only the root (rank ",
                      root, ") takes ", what, " tensors");
    return {};
  }
  TORCH_CHECK_VALUE(lists.size() == 1 && static_cast<int>(lists[0].size()) == size, "scalecomm ", coll, " (rank ", rank,
                    "): the root needs one ", what, " list of ", size, " tensors");
  for (const auto& t : lists[0]) checkSameAs(coll, rank, t, ref, what);
  return lists[0];
}

// Block pointers for a direct rooted collective: all of the root's list at
// the root, only this rank's own tensor elsewhere.
std::vector<void*> rootedBlocks(const std::vector<at::Tensor>& list, const at::Tensor& own, int rank, int root,
                                int size) {
  std::vector<void*> blocks(size, nullptr);
  if (rank == root) {
    for (int q = 0; q < size; ++q) blocks[q] = list[q].data_ptr();
  } else {
    blocks[rank] = own.data_ptr();
  }
  return blocks;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  const at::Tensor& t = singleTensor("reduce", getRank(), tensors);
  ReductionArgs r = reductionArgs("reduce", getRank(), t, opts.reduceOp);
  checkRoot("reduce", getRank(), getSize(), opts.rootRank);
  checkRootTensor("reduce", getRank(), opts.rootTensor);
  const int root = static_cast<int>(opts.rootRank), rank = getRank();
  auto stage = stageFor("reduce", {t}, reducesOnDevice());
  Call call = preparedCall(CallKind::Reduce, "reduce", static_cast<int64_t>(t.nbytes()), opts);
  call.count = t.numel();
  call.dtype = r.dtype;
  call.op = r.op.op;
  call.premulFactor = r.op.premulFactor;
  call.root = root;
  // Staged in chunks, a non-root rank reduces in the host buffers and copies nothing back.
  call.stager = stage->chunked(t, /*down=*/true, /*up=*/rank == root, config().stageChunkBytes);
  if (call.stager) {
    call.data = t.data_ptr();
    return run(c10d::OpType::REDUCE, {t}, std::move(call), stage);
  }
  at::Tensor tensor = rank == root ? stage->inout(t) : stage->input(t);
  if (rank == root) {
    call.data = tensor.data_ptr();
  } else {  // non-root ranks reduce in scratch, so their input stays intact
    at::Tensor scratch = at::empty_like(tensor);
    call.data = scratch.data_ptr();
    call.before = [scratch, tensor] { scratch.copy_(tensor); };
  }
  return run(c10d::OpType::REDUCE, {t}, std::move(call), stage);
}

// Completes `call` (kind, title and algorithm set) as a reduce-scatter of
// world size x out.numel() elements of this rank, copied into a scratch work
// buffer by `fill` when the call runs; this rank's reduced block is copied
// into `out`.
static Call reduceScatterCall(Call call, const ReductionArgs& r, const at::Tensor& out, int rank, int size,
                              std::function<void(at::Tensor&)> fill) {
  const int64_t per = out.numel();
  at::Tensor work = at::empty({per * size}, out.options());  // where the staged output is
  call.data = work.data_ptr();
  call.count = per;
  call.dtype = r.dtype;
  call.op = r.op.op;
  call.premulFactor = r.op.premulFactor;
  call.before = [work, fill = std::move(fill)]() mutable { fill(work); };
  call.after = [work, out, per, rank] { out.view({-1}).copy_(work.narrow(0, rank * per, per)); };
  return call;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  ReductionArgs r = reductionArgs("reduce_scatter_tensor", getRank(), input, opts.reduceOp);
  checkDense("reduce_scatter_tensor", getRank(), output);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(),
                    "scalecomm reduce_scatter_tensor (rank ", getRank(), "): input has ", input.numel(),
                    " elements of ", input.scalar_type(), " but must have world size (", getSize(), ") x output (",
                    output.numel(), " elements of ", output.scalar_type(), ")");
  auto stage = stageFor("reduce_scatter_tensor", {input, output}, reducesOnDevice());
  at::Tensor in = stage->input(input), out = stage->output(output);
  Call call = reduceScatterCall(preparedCall(CallKind::ReduceScatter, "reduce_scatter_tensor", 0, opts), r, out,
                                getRank(), getSize(), [in](at::Tensor& work) { work.copy_(in.reshape({-1})); });
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = singleTensor("reduce_scatter", getRank(), outputs);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "scalecomm reduce_scatter (rank ", getRank(), "): pass one input list of ", getSize(),
                    " tensors (one per rank)");
  ReductionArgs r = reductionArgs("reduce_scatter", getRank(), out, opts.reduceOp);
  for (const auto& t : inputs[0]) checkSameAs("reduce_scatter", getRank(), t, out, "an input tensor");
  std::vector<at::Tensor> all = inputs[0];
  all.push_back(out);
  auto stage = stageFor("reduce_scatter", all, reducesOnDevice());
  std::vector<at::Tensor> ins = stage->inputs(inputs[0]);
  at::Tensor output = stage->output(out);
  Call call = reduceScatterCall(preparedCall(CallKind::ReduceScatter, "reduce_scatter", 0, opts), r, output, getRank(),
                                getSize(), [ins](at::Tensor& work) { at::cat_out(work, flattenAll(ins)); });
  return run(c10d::OpType::REDUCE_SCATTER, {out}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "scalecomm reduce_scatter_tensor_coalesced (rank ", getRank(),
                    "): ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  if (!last) return barrier(c10d::BarrierOptions());
  return last;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  const at::Tensor& in = singleTensor("gather", getRank(), inputs);
  checkDense("gather", getRank(), in);
  checkRoot("gather", getRank(), getSize(), opts.rootRank);
  const int root = static_cast<int>(opts.rootRank), rank = getRank(), size = getSize();
  std::vector<at::Tensor> userOuts = rootList("gather", rank, root, size, outputs, in, "output");
  WireShape shape = wireShape(in);
  std::vector<at::Tensor> all = userOuts;
  all.push_back(in);
  auto stage = stageFor("gather", all);
  at::Tensor input = stage->input(in);
  std::vector<at::Tensor> outs = stage->outputs(userOuts);
  Call call = callFor(CallKind::Gather, SC_LABEL("gather"), opts);
  call.blocks = rootedBlocks(outs, input, rank, root, size);
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.root = root;
  if (rank == root) call.before = [own = outs[root], input] { own.copy_(input); };
  return run(c10d::OpType::GATHER, userOuts, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  const at::Tensor& out = singleTensor("scatter", getRank(), outputs);
  checkDense("scatter", getRank(), out);
  checkRoot("scatter", getRank(), getSize(), opts.rootRank);
  const int root = static_cast<int>(opts.rootRank), rank = getRank(), size = getSize();
  std::vector<at::Tensor> ins = rootList("scatter", rank, root, size, inputs, out, "input");
  WireShape shape = wireShape(out);
  std::vector<at::Tensor> all = ins;
  all.push_back(out);
  auto stage = stageFor("scatter", all);
  ins = stage->inputs(ins);
  at::Tensor output = stage->output(out);
  Call call = callFor(CallKind::Scatter, SC_LABEL("scatter"), opts);
  call.blocks = rootedBlocks(ins, output, rank, root, size);
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.root = root;
  if (rank == root) call.before = [output, own = ins[root]] { output.copy_(own); };
  return run(c10d::OpType::SCATTER, {out}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplitSizes,
                                                               std::vector<int64_t>& inputSplitSizes,
                                                               const c10d::AllToAllOptions& opts) {
  checkDense("all_to_all_single", getRank(), input);
  checkDense("all_to_all_single", getRank(), output);
  const int rank = getRank(), n = getSize();
  TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(), "scalecomm all_to_all_single (rank ", rank,
                    "): input dtype ", input.scalar_type(), " differs from output dtype ", output.scalar_type());
  const int64_t inRows = input.dim() > 0 ? input.size(0) : 1, outRows = output.dim() > 0 ? output.size(0) : 1;
  std::vector<int64_t> inSplits =
      inputSplitSizes.empty() ? equalSplits(inRows, n, "all_to_all_single", rank, "the input") : inputSplitSizes;
  std::vector<int64_t> outSplits =
      outputSplitSizes.empty() ? equalSplits(outRows, n, "all_to_all_single", rank, "the output") : outputSplitSizes;
  checkSplits(inSplits, inRows, n, rank, "input");
  checkSplits(outSplits, outRows, n, rank, "output");
  TORCH_CHECK_VALUE(inSplits[rank] == outSplits[rank], "scalecomm all_to_all_single (rank ", rank,
                    "): this rank sends itself ", inSplits[rank], " rows but expects ", outSplits[rank]);
  const int64_t rowIn = inRows > 0 ? input.numel() / inRows : 0, rowOut = outRows > 0 ? output.numel() / outRows : 0;
  TORCH_CHECK_VALUE(inRows == 0 || outRows == 0 || rowIn == rowOut, "scalecomm all_to_all_single (rank ", rank,
                    "): input and output rows differ in size (", rowIn, " vs ", rowOut, " elements)");
  // Wire units per row: elements when we know the dtype (peers' dtypes are then
  // checked), bytes otherwise.
  const DataType dtype = arithmeticType(input.scalar_type()).value_or(DataType::Opaque);
  const int64_t rowElems = std::max(rowIn, rowOut);
  const int64_t rowUnits = dtype == DataType::Opaque ? rowElems * input.element_size() : rowElems;
  const size_t unitBytes = elementSize(dtype);
  auto stage = stageFor("all_to_all_single", {input, output});
  at::Tensor in = stage->input(input), out = stage->output(output);
  Call call = callFor(CallKind::Alltoall, SC_LABEL("all_to_all_single"), opts);
  call.dtype = dtype;
  call.blocks.resize(2 * n);
  call.sendCounts.resize(n);
  call.recvCounts.resize(n);
  auto* inBase = static_cast<uint8_t*>(in.data_ptr());
  auto* outBase = static_cast<uint8_t*>(out.data_ptr());
  int64_t inOff = 0, outOff = 0;
  for (int q = 0; q < n; ++q) {
    call.blocks[q] = inBase + inOff * rowUnits * unitBytes;
    call.blocks[n + q] = outBase + outOff * rowUnits * unitBytes;
    call.sendCounts[q] = inSplits[q] * rowUnits;
    call.recvCounts[q] = outSplits[q] * rowUnits;
    inOff += inSplits[q];
    outOff += outSplits[q];
  }
  // The self block is a tensor copy: on the device path it is queued on the
  // channel's stream (the current stream while the call runs), never a host memcpy.
  int64_t inSelf = 0, outSelf = 0;
  for (int q = 0; q < rank; ++q) {
    inSelf += inSplits[q];
    outSelf += outSplits[q];
  }
  call.before = [in, out, inAt = inSelf * rowElems, outAt = outSelf * rowElems, elems = inSplits[rank] * rowElems] {
    if (elems > 0) out.view({-1}).narrow(0, outAt, elems).copy_(in.view({-1}).narrow(0, inAt, elems));
  };
  call.sendCounts[rank] = call.recvCounts[rank] = 0;  // the self block is copied, not sent
  return run(c10d::OpType::ALLTOALL_BASE, {output}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  const int rank = getRank(), n = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n,
                    "scalecomm all_to_all (rank ", rank, "): pass ", n, " input and ", n, " output tensors");
  for (int q = 0; q < n; ++q) {
    checkDense("all_to_all", rank, inputs[q]);
    checkDense("all_to_all", rank, outputs[q]);
    TORCH_CHECK_VALUE(
        inputs[q].scalar_type() == inputs[0].scalar_type() && outputs[q].scalar_type() == inputs[0].scalar_type(),
        "scalecomm all_to_all (rank ", rank, "): all tensors must have one dtype");
  }
  TORCH_CHECK_VALUE(inputs[rank].numel() == outputs[rank].numel(), "scalecomm all_to_all (rank ", rank, "): input ",
                    rank, " and output ", rank, " (this rank's own block) differ in size");
  const DataType dtype = arithmeticType(inputs[0].scalar_type()).value_or(DataType::Opaque);
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto stage = stageFor("all_to_all", all);
  std::vector<at::Tensor> ins = stage->inputs(inputs), outs = stage->outputs(outputs);
  Call call = callFor(CallKind::Alltoall, SC_LABEL("all_to_all"), opts);
  call.dtype = dtype;
  for (const auto& t : ins) call.blocks.push_back(t.data_ptr());
  for (const auto& t : outs) call.blocks.push_back(t.data_ptr());
  for (int q = 0; q < n; ++q) {
    call.sendCounts.push_back(dtype == DataType::Opaque ? ins[q].nbytes() : ins[q].numel());
    call.recvCounts.push_back(dtype == DataType::Opaque ? outs[q].nbytes() : outs[q].numel());
  }
  call.sendCounts[rank] = call.recvCounts[rank] = 0;
  call.before = [own = outs[rank], in = ins[rank]] { own.copy_(in); };
  return run(c10d::OpType::ALLTOALL, outputs, std::move(call), stage);
}

}  // namespace scalecomm
