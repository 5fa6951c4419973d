// scalecomm torch adapter: reduce, reduce_scatter, gather, scatter and
// all-to-all (the rest of the CPU collective surface; see backend.h for the
// contract every collective follows: validate, number, queue, return a Work).
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

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

// Reduce-scatters `work` (world size x out.numel() elements: this rank's
// contributions, a scratch copy that is overwritten) and copies this rank's
// reduced block into `out`.
void reduceScatterInto(Communicator& comm, at::Tensor work, const at::Tensor& out, const ReductionArgs& r, int rank,
                       const CollectiveOptions& o) {
  const int64_t per = out.numel();
  scalecomm::reduceScatter(comm, work.data_ptr(), per, r.dtype, r.op.op, r.op.premulFactor, o);
  out.view({-1}).copy_(work.narrow(0, rank * per, per));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  checkUsable("reduce");
  const at::Tensor& t = singleTensor("reduce", getRank(), tensors);
  ReductionArgs r = reductionArgs("reduce", getRank(), t, opts.reduceOp);
  checkRoot("reduce", getRank(), getSize(), opts.rootRank);
  Communicator* comm = comm_.get();
  const int root = static_cast<int>(opts.rootRank), rank = getRank();
  auto stage = stageFor("reduce", {t});
  at::Tensor tensor = rank == root ? stage->inout(t) : stage->input(t);
  const std::string algo = rootedAlgorithmFor(selection_.reduce, static_cast<int64_t>(t.nbytes()));
  return enqueue(c10d::OpType::REDUCE, ("reduce:" + algo).c_str(), {t}, opts.timeout,
                 [comm, tensor, r, root, rank](const CollectiveOptions& o) {
                   // Non-root ranks reduce in scratch, so their input stays intact.
                   at::Tensor work = rank == root ? tensor : tensor.clone();
                   scalecomm::reduce(*comm, work.data_ptr(), work.numel(), r.dtype, r.op.op, r.op.premulFactor, root,
                                     o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  checkUsable("reduce_scatter_tensor");
  ReductionArgs r = reductionArgs("reduce_scatter_tensor", getRank(), input, opts.reduceOp);
  checkDense("reduce_scatter_tensor", getRank(), output);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type() && input.numel() == output.numel() * getSize(),
                    "scalecomm reduce_scatter_tensor (rank ", getRank(), "): input has ", input.numel(),
                    " elements of ", input.scalar_type(), " but must have world size (", getSize(), ") x output (",
                    output.numel(), " elements of ", output.scalar_type(), ")");
  Communicator* comm = comm_.get();
  auto stage = stageFor("reduce_scatter_tensor", {input, output});
  at::Tensor in = stage->input(input), out = stage->output(output);
  const int rank = getRank();
  const std::string& algo = selection_.reduceScatter;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, titled("reduce_scatter_tensor", algo).c_str(), {output},
                 opts.timeout,
                 [comm, in, out, r, rank](const CollectiveOptions& o) {
                   reduceScatterInto(*comm, in.reshape({-1}).clone(), out, r, rank, o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  checkUsable("reduce_scatter");
  const at::Tensor& out = singleTensor("reduce_scatter", getRank(), outputs);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                    "scalecomm reduce_scatter (rank ", getRank(), "): pass one input list of ", getSize(),
                    " tensors (one per rank)");
  ReductionArgs r = reductionArgs("reduce_scatter", getRank(), out, opts.reduceOp);
  for (const auto& t : inputs[0]) checkSameAs("reduce_scatter", getRank(), t, out, "an input tensor");
  Communicator* comm = comm_.get();
  std::vector<at::Tensor> all = inputs[0];
  all.push_back(out);
  auto stage = stageFor("reduce_scatter", all);
  std::vector<at::Tensor> ins = stage->inputs(inputs[0]);
  at::Tensor output = stage->output(out);
  const int rank = getRank();
  const std::string& algo = selection_.reduceScatter;
  return enqueue(c10d::OpType::REDUCE_SCATTER, titled("reduce_scatter", algo).c_str(), {out}, opts.timeout,
                 [comm, ins, output, r, rank](const CollectiveOptions& o) {
                   reduceScatterInto(*comm, at::cat(flattenAll(ins)), output, r, rank, o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  checkUsable("reduce_scatter_tensor_coalesced");
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
  checkUsable("gather");
  const at::Tensor& in = singleTensor("gather", getRank(), inputs);
  checkDense("gather", getRank(), in);
  checkRoot("gather", getRank(), getSize(), opts.rootRank);
  const int root = static_cast<int>(opts.rootRank), rank = getRank(), size = getSize();
  std::vector<at::Tensor> outs = rootList("gather", rank, root, size, outputs, in, "output");
  WireShape shape = wireShape(in);
  Communicator* comm = comm_.get();
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  auto stage = stageFor("gather", all);
  at::Tensor input = stage->input(in);
  std::vector<at::Tensor> userOuts = outs;
  outs = stage->outputs(outs);
  return enqueue(c10d::OpType::GATHER, "gather", userOuts, opts.timeout,
                 [comm, input, outs, shape, root, rank, size](const CollectiveOptions& o) {
                   if (rank == root) outs[root].copy_(input);
                   scalecomm::gather(*comm, rootedBlocks(outs, input, rank, root, size), shape.count, shape.dtype, root,
                                     o);
                 },
                 {.stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  checkUsable("scatter");
  const at::Tensor& out = singleTensor("scatter", getRank(), outputs);
  checkDense("scatter", getRank(), out);
  checkRoot("scatter", getRank(), getSize(), opts.rootRank);
  const int root = static_cast<int>(opts.rootRank), rank = getRank(), size = getSize();
  std::vector<at::Tensor> ins = rootList("scatter", rank, root, size, inputs, out, "input");
  WireShape shape = wireShape(out);
  Communicator* comm = comm_.get();
  std::vector<at::Tensor> all = ins;
  all.push_back(out);
  auto stage = stageFor("scatter", all);
  ins = stage->inputs(ins);
  at::Tensor output = stage->output(out);
  return enqueue(c10d::OpType::SCATTER, "scatter", {out}, opts.timeout,
                 [comm, ins, output, shape, root, rank, size](const CollectiveOptions& o) {
                   if (rank == root) output.copy_(ins[root]);
                   scalecomm::scatter(*comm, rootedBlocks(ins, output, rank, root, size), shape.count, shape.dtype,
                                      root, o);
                 },
                 {.stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& outputSplitSizes,
                                                               std::vector<int64_t>& inputSplitSizes,
                                                               const c10d::AllToAllOptions& opts) {
  checkUsable("all_to_all_single");
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
  Communicator* comm = comm_.get();
  auto stage = stageFor("all_to_all_single", {input, output});
  at::Tensor in = stage->input(input), out = stage->output(output);
  return enqueue(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {output}, opts.timeout,
                 [comm, in, out, inSplits, outSplits, rowUnits, dtype, rank, n](const CollectiveOptions& o) {
                   const size_t unitBytes = elementSize(dtype);
                   std::vector<void*> send(n), recv(n);
                   std::vector<int64_t> sendCounts(n), recvCounts(n);
                   auto* inBase = static_cast<uint8_t*>(in.data_ptr());
                   auto* outBase = static_cast<uint8_t*>(out.data_ptr());
                   int64_t inOff = 0, outOff = 0;
                   for (int q = 0; q < n; ++q) {
                     send[q] = inBase + inOff * rowUnits * unitBytes;
                     recv[q] = outBase + outOff * rowUnits * unitBytes;
                     sendCounts[q] = inSplits[q] * rowUnits;
                     recvCounts[q] = outSplits[q] * rowUnits;
                     inOff += inSplits[q];
                     outOff += outSplits[q];
                   }
                   std::memcpy(recv[rank], send[rank], sendCounts[rank] * unitBytes);
                   sendCounts[rank] = recvCounts[rank] = 0;  // the self block is copied, not sent
                   scalecomm::alltoall(*comm, send, sendCounts, recv, recvCounts, dtype, o);
                 },
                 {.stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  checkUsable("all_to_all");
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
  Communicator* comm = comm_.get();
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto stage = stageFor("all_to_all", all);
  std::vector<at::Tensor> ins = stage->inputs(inputs), outs = stage->outputs(outputs);
  return enqueue(c10d::OpType::ALLTOALL, "all_to_all", outputs, opts.timeout,
                 [comm, ins, outs, dtype, rank, n](const CollectiveOptions& o) {
                   std::vector<void*> send(n), recv(n);
                   std::vector<int64_t> sendCounts(n), recvCounts(n);
                   for (int q = 0; q < n; ++q) {
                     send[q] = ins[q].data_ptr();
                     recv[q] = outs[q].data_ptr();
                     sendCounts[q] = dtype == DataType::Opaque ? ins[q].nbytes() : ins[q].numel();
                     recvCounts[q] = dtype == DataType::Opaque ? outs[q].nbytes() : outs[q].numel();
                   }
                   outs[rank].copy_(ins[rank]);
                   sendCounts[rank] = recvCounts[rank] = 0;
                   scalecomm::alltoall(*comm, send, sendCounts, recv, recvCounts, dtype, o);
                 },
                 {.stage = stage});
}

}  // namespace scalecomm
