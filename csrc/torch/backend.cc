#include "torch/backend.h"

#include <c10/util/Exception.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "algo/registry.h"
#include "compress/codec.h"
#include "core/logging.h"
#include "cuda/nvtx_ranges.h"
#include "torch/gil.h"
#include "torch/store_adapter.h"
#include "torch/validate.h"

namespace scalecomm {

namespace {

// The group's worker thread needs a core besides the caller's; a launcher that
// binds each rank to one core (mpirun's default for 2 ranks) halves speed.
void warnIfBoundToOneCore(int rank) {
  static std::once_flag once;
  std::call_once(once, [rank] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1) {
      SC_LOG(Warn, "rank ", rank, ": this process may run on one CPU core only, which its scalecomm worker thread ",
             "shares with the training loop; give each rank two or more cores (mpirun --bind-to none, or ",
             "--map-by slot:PE=2; srun --cpus-per-task=2)");
    }
  });
}

// Interpreter exit. shutdownAllAtExit() aborts what is still in flight; a
// Python thread that then came back from its call would re-enter Python while
// it finalizes, and CPython ends such a thread with a forced unwind, which the
// noexcept destructors of the GIL guards in torch's and pybind11's bindings
// turn into std::terminate (SIGABRT, a failed job). So from then on a thread
// other than the exiting one never returns from a failed call: it stays
// where it is, as a thread still blocked in its call would, until the
// process ends; and a Work failed by the exit is never completed, so its
// waiters stay blocked too.
std::atomic<bool> exiting{false};
std::atomic<std::thread::id> exitingThread{};

bool stayForExit() { return exiting.load() && std::this_thread::get_id() != exitingThread.load(); }

[[noreturn]] void parkForExit() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// scalecomm errors as the exceptions torch users catch.
[[noreturn]] void rethrow(const Error& e) {
  if (stayForExit()) parkForExit();
  if (e.kind() == ErrorKind::InvalidArgument) TORCH_CHECK_VALUE(false, e.what());
  C10_THROW_ERROR(DistBackendError, e.what());
}

// An NVTX range from each call's start to its end (CUDA builds with
// SCALECOMM_NVTX=1), named "scalecomm:<call> seq <n> <bytes> B".
class NvtxWatcher final : public CallWatcher {
 public:
  void queued(uint64_t id, const WatchedCall& call, Clock::time_point, const std::string* running) override {
    std::lock_guard<std::mutex> g(mu_);
    Range& r = ranges_[id];
    r.text = strCat("scalecomm:", call.name, " seq ", call.number, " ", call.bytes, " B");
    if (running) r.id = nvtxBegin(r.text);
  }
  void started(uint64_t id, const std::string&, Clock::time_point) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = ranges_.find(id);
    if (it != ranges_.end() && it->second.id == 0) it->second.id = nvtxBegin(it->second.text);
  }
  void ended(uint64_t id, const std::string&, Clock::time_point) override {
    std::lock_guard<std::mutex> g(mu_);
    auto it = ranges_.find(id);
    if (it == ranges_.end()) return;
    nvtxEnd(it->second.id);
    ranges_.erase(it);
  }

 private:
  struct Range {
    std::string text;
    uint64_t id = 0;  // 0: not started
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, Range> ranges_;  // the calls queued and not ended
};

uint64_t totalBytes(const std::vector<at::Tensor>& ts) {
  uint64_t b = 0;
  for (const auto& t : ts) b += t.nbytes();
  return b;
}

}  // namespace

ScalecommBackend::ScalecommBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   BackendConfig config)
    : c10d::Backend(rank, size), store_(store) {
  warnIfBoundToOneCore(rank);
  if (config.compression == "none") config.compression.clear();
  try {
    if (!config.compression.empty() && config.compression != "auto")
      CodecSpec::parse(config.compression);  // a bad spec fails here
    group_ = Group::create(std::make_shared<C10dStoreAdapter>(store), rank, size, config);
  } catch (const Error& e) {
    rethrow(e);
  }
  compression_ = std::make_unique<CompressionStore>(group_->compressionStates());
  if (nvtxEnabled()) group_->addWatcher(std::make_shared<NvtxWatcher>());
  nccl_ = std::make_shared<NcclGroups>(store, "scalecomm/" + config.groupName, rank, size);
  group_->state()->onAbort([nccl = nccl_] { nccl->abort(); });
  group_->setDeviceChannels([nccl = nccl_](int device, const Deadline& deadline) -> QueuedChannel& {
    return nccl->channel(device, deadline);
  });
}

ScalecommBackend::~ScalecommBackend() { shutdown(); }

void ScalecommBackend::shutdownAllAtExit() {
  exitingThread = std::this_thread::get_id();
  exiting = true;
  ReleaseGilIfHeld noGil;  // finishing calls may need it
  Group::shutdownAllAtExit();
}

void ScalecommBackend::shutdown() {
  ReleaseGilIfHeld noGil;
  // Calls in flight get the grace period, then are aborted (not awaited until their timeout).
  group_->shutdown(std::chrono::milliseconds(config().shutdownGraceMs));
}

void ScalecommBackend::abort() {
  group_->abort(strCat("scalecomm (rank ", getRank(), "): the group was aborted with abort()"));
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::run(c10d::OpType type, std::vector<at::Tensor> outputs, Call&& call,
                                                     const std::shared_ptr<HostStage>& stage,
                                                     const std::shared_ptr<DeviceCall>& device) {
  if (call.bytes == 0) call.bytes = totalBytes(outputs);
  auto work = c10::make_intrusive<ScalecommWork>(getRank(), type, call.name, 0, std::move(outputs), group_->state());
  if (stage && stage->active()) {
    auto before = std::move(call.before), after = std::move(call.after);
    call.before = [stage, before] {
      stage->toHost();
      if (before) before();
    };
    call.after = [stage, after] {
      if (after) after();
      stage->toDevice();
    };
    call.device = stage->onDevice();
  }
  if (device) call.device = true;
  const std::shared_ptr<DeviceCall> onDevice = stage && stage->direct() ? stage->deviceCall() : device;
  if (stage && stage->direct()) {
    call.deviceIndex = onDevice->device();
    call.deviceSync = onDevice;
  }
  TORCH_CHECK_VALUE(call.deviceIndex >= 0 || !call.algorithm || call.algorithm->memory != AlgorithmMemory::Device,
                    "scalecomm ", call.name, " (rank ", getRank(),
                    "): algorithm nccl takes CUDA tensors (and a build with NCCL, SCALECOMM_CUDA_TRANSPORT=auto); "
                    "choose a scalecomm algorithm such as ring for CPU tensors");
  if (group_->coalescing()) batchParts_.push_back(work);
  call.done = [work, caller = std::this_thread::get_id()](const Error* e) {
    if (e != nullptr && stayForExit()) {
      if (std::this_thread::get_id() == caller) parkForExit();  // ran inline on a Python thread
      return;                                                   // on the worker: the Work stays pending
    }
    try {
      if (e == nullptr) {
        work->finish();
      } else {
        work->finishError(std::make_exception_ptr(
            c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, e->what())));
      }
    } catch (const std::exception& ex) {  // a completion callback threw: the Work is complete regardless
      SC_LOG(Warn, "scalecomm: a completion callback of ", work->collective(), " threw: ", ex.what());
    }
  };
  const bool blocking = call.blocking;
  uint64_t seq = 0;
  try {
    seq = group_->submit(std::move(call));
  } catch (const Error& e) {
    if (!group_->coalescing()) batchParts_.clear();  // the group abandoned the batch
    if (!batchParts_.empty() && batchParts_.back() == work) batchParts_.pop_back();
    rethrow(e);
  }
  work->setSequence(seq);
  if (onDevice) work->setDeviceCall(onDevice);
  if (blocking && !onDevice) work->holdOutputsWeaklyIfSucceeded();
  return work;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = singleTensor("allreduce", getRank(), tensors);
  ReductionArgs r = reductionArgs("allreduce", getRank(), t, opts.reduceOp);
  const std::string& codec = config().compression;
  if (defaultCodecApplies(r.dtype, r.op.op, static_cast<int64_t>(t.nbytes()))) {
    if (!compressionAnnounced_.load(std::memory_order_relaxed) && !compressionAnnounced_.exchange(true)) {
      SC_LOG(Warn, "rank ", getRank(), ": the group's default codec ", codec,
             " compresses every floating SUM/AVG allreduce of at least ", config().compressionMinBytes,
             " bytes (lossy; SCALECOMM_COMPRESSION_MIN_BYTES); smaller ones run exact");
    }
    // The group's default codec; state per tensor memory (a DDP bucket keeps
    // its buffer), which ends with the memory's storage.
    return allreduceCompressed(t, codec, "", -1, r.op.op == ReduceOp::Avg, opts.timeout, {}, !opts.asyncOp);
  }
  auto stage = stageFor("allreduce", {t}, reducesOnDevice());
  Call call = preparedCall(CallKind::Allreduce, "allreduce", static_cast<int64_t>(t.nbytes()), opts);
  call.stager = stage->chunked(t, true, true, config().stageChunkBytes);
  at::Tensor tensor = call.stager ? t : stage->inout(t);
  call.data = tensor.data_ptr();
  call.count = tensor.numel();
  call.dtype = r.dtype;
  call.op = r.op.op;
  call.premulFactor = r.op.premulFactor;
  return run(c10d::OpType::ALLREDUCE, {t}, std::move(call), stage);
}

bool ScalecommBackend::allreduceHost(void* data, int64_t count, DataType dtype, ReduceOp op) {
  TORCH_CHECK_VALUE(reduceOpSupports(op, dtype), "scalecomm allreduce (rank ", getRank(), "): reduce op ",
                    reduceOpName(op), " is not defined for ", dataTypeName(dtype),
                    (isFloating(dtype) ? "; bitwise ops (BAND/BOR/BXOR) need an integer dtype" : ""));
  const auto bytes = static_cast<int64_t>(count * elementSize(dtype));
  if (defaultCodecApplies(dtype, op, bytes)) return false;
  const Group::Prepared& site = group_->prepare(CallKind::Allreduce, "allreduce", bytes);
  Call call;
  call.kind = CallKind::Allreduce;
  call.name = site.title;
  call.algorithm = site.algorithm;
  call.blocking = true;
  call.data = data;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.bytes = static_cast<uint64_t>(bytes);
  // Runs inline (done before submit returns) unless the worker has calls
  // queued; then this thread waits for done, which the group calls exactly
  // once, on success, failure, timeout or abort.
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<Error> error;
  } outcome;
  call.done = [&outcome](const Error* e) {
    std::lock_guard<std::mutex> g(outcome.mu);
    if (e != nullptr) outcome.error = *e;
    outcome.done = true;
    outcome.cv.notify_one();
  };
  try {
    group_->submit(std::move(call));
  } catch (const Error& e) {
    rethrow(e);
  }
  std::unique_lock<std::mutex> lock(outcome.mu);
  outcome.cv.wait(lock, [&] { return outcome.done; });
  if (outcome.error) rethrow(*outcome.error);
  return true;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "scalecomm allreduce_coalesced (rank ", getRank(), "): no tensors given");
  ReductionArgs r = reductionArgs("allreduce_coalesced", getRank(), tensors[0], opts.reduceOp);
  for (const auto& t : tensors) {
    checkDense("allreduce_coalesced", getRank(), t);
    TORCH_CHECK_VALUE(t.scalar_type() == tensors[0].scalar_type(), "scalecomm allreduce_coalesced (rank ", getRank(),
                      "): all tensors must have the same dtype; got ", t.scalar_type(), " and ",
                      tensors[0].scalar_type());
  }
  auto stage = stageFor("allreduce_coalesced", tensors, reducesOnDevice());
  std::vector<at::Tensor> ts = stage->inouts(tensors);
  int64_t count = 0;
  for (const auto& t : ts) count += t.numel();
  at::Tensor flat = at::empty({count}, ts[0].options());  // where the staged tensors are
  Call call = callFor(CallKind::Allreduce, SC_LABEL("allreduce_coalesced"), opts);
  call.algorithm = group_->prepare(CallKind::Allreduce, "allreduce", static_cast<int64_t>(flat.nbytes())).algorithm;
  call.data = flat.data_ptr();
  call.count = count;
  call.dtype = r.dtype;
  call.op = r.op.op;
  call.premulFactor = r.op.premulFactor;
  call.before = [flat, ts] {
    at::Tensor out = flat;
    at::cat_out(out, flattenAll(ts));
  };
  call.after = [flat, ts] {
    int64_t off = 0;
    for (const auto& t : ts) {
      t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
      off += t.numel();
    }
  };
  return run(c10d::OpType::ALLREDUCE_COALESCED, tensors, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = singleTensor("broadcast", getRank(), tensors);
  checkDense("broadcast", getRank(), t);
  checkRoot("broadcast", getRank(), getSize(), opts.rootRank);
  checkRootTensor("broadcast", getRank(), opts.rootTensor);
  WireShape shape = wireShape(t);
  auto stage = stageFor("broadcast", {t});
  Call call = preparedCall(CallKind::Broadcast, "broadcast", static_cast<int64_t>(t.nbytes()), opts);
  const bool root = opts.rootRank == getRank();
  call.stager = stage->chunked(t, /*down=*/root, /*up=*/!root, config().stageChunkBytes);
  at::Tensor tensor = call.stager ? t : stage->inout(t);
  call.data = tensor.data_ptr();
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.root = static_cast<int>(opts.rootRank);
  return run(c10d::OpType::BROADCAST, {t}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = singleTensor("allgather", getRank(), inputs);
  checkDense("allgather", getRank(), in);
  TORCH_CHECK_VALUE(outputs.size() == 1, "scalecomm allgather (rank ", getRank(), "): expected one output list, got ",
                    outputs.size());
  const auto& outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == getSize(), "scalecomm allgather (rank ", getRank(),
                    "): the output list has ", outs.size(), " tensors but the group has ", getSize(),
                    " ranks; pass one output tensor per rank");
  for (int q = 0; q < getSize(); ++q) {
    checkSameAs("allgather", getRank(), outs[q], in, "output tensor");
    checkNoOverlap("allgather", getRank(), in, outs[q], q == getRank() ? 0 : -1);
  }
  WireShape shape = wireShape(in);
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  auto stage = stageFor("allgather", all);
  at::Tensor input = stage->input(in);
  std::vector<at::Tensor> outList = stage->outputs(outs);
  Call call = preparedCall(CallKind::Allgather, "allgather", 0, opts);
  for (const auto& t : outList) call.blocks.push_back(t.data_ptr());
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.before = [own = outList[getRank()], input] { own.copy_(input); };
  return run(c10d::OpType::ALLGATHER, outs, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  checkDense("all_gather_into_tensor", getRank(), input);
  checkDense("all_gather_into_tensor", getRank(), output);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "scalecomm all_gather_into_tensor (rank ", getRank(),
                    "): output dtype ", output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "scalecomm all_gather_into_tensor (rank ", getRank(),
                    "): output has ", output.numel(), " elements but must have world size (", getSize(), ") x input (",
                    input.numel(), ") = ", input.numel() * getSize());
  checkNoOverlap("all_gather_into_tensor", getRank(), input, output, static_cast<int64_t>(getRank() * input.nbytes()));
  WireShape shape = wireShape(input);
  auto stage = stageFor("all_gather_into_tensor", {input, output});
  at::Tensor in = stage->input(input), out = stage->output(output);
  Call call = preparedCall(CallKind::Allgather, "all_gather_into_tensor", 0, opts);
  auto* first = static_cast<uint8_t*>(out.data_ptr());
  for (int r = 0; r < getSize(); ++r) call.blocks.push_back(first + r * in.nbytes());
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.before = [in, out, rank = getRank()] {
    out.view({-1}).narrow(0, rank * in.numel(), in.numel()).copy_(in.reshape({-1}));
  };
  return run(c10d::OpType::_ALLGATHER_BASE, {output}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  // torch's layout: outputs[r][i] receives rank r's inputs[i] (one list per rank).
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), "scalecomm allgather_coalesced (rank ", getRank(),
                    "): ", outputs.size(), " output lists but the group has ", getSize(),
                    " ranks; pass one list per rank, each with one tensor per input (output_tensor_lists[rank][i])");
  for (int r = 0; r < getSize(); ++r) {  // every pair is checked before any is issued
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "scalecomm allgather_coalesced (rank ", getRank(),
                      "): output list ", r, " has ", outputs[r].size(), " tensors for ", inputs.size(),
                      " inputs; each rank's list holds one tensor per input");
    for (size_t i = 0; i < inputs.size(); ++i)
      checkSameAs("allgather_coalesced", getRank(), outputs[r][i], inputs[i], "output tensor");
  }
  for (const auto& in : inputs) checkDense("allgather_coalesced", getRank(), in);
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < getSize(); ++r) outs[0].push_back(outputs[r][i]);
    std::vector<at::Tensor> in = {inputs[i]};
    last = allgather(outs, in, opts);
  }
  if (!last) return barrier(c10d::BarrierOptions());
  return last;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "scalecomm allgather_into_tensor_coalesced (rank ", getRank(),
                    "): ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  // Each pair is its own collective in issue order; the returned Work completes last.
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  if (!last) return barrier(c10d::BarrierOptions());
  return last;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::barrier(const c10d::BarrierOptions& opts) {
  Call call = preparedCall(CallKind::Barrier, "barrier", 0, opts);
  return run(c10d::OpType::BARRIER, {}, std::move(call));
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::pointToPoint(bool sending, std::vector<at::Tensor>& tensors, int peer,
                                                              int tag) {
  const char* what = sending ? "send" : "recv";
  const at::Tensor& t = singleTensor(what, getRank(), tensors);
  checkDense(what, getRank(), t);
  WireShape shape = wireShape(t);
  auto stage = stageFor(what, {t});
  at::Tensor tensor = sending ? stage->input(t) : stage->output(t);
  Call call;
  call.kind = sending ? CallKind::Send : CallKind::Recv;
  call.name = sending ? SC_LABEL("send") : SC_LABEL("recv");
  call.data = tensor.data_ptr();
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.peer = peer;
  call.tag = tag;
  return run(sending ? c10d::OpType::SEND : c10d::OpType::RECV, {t}, std::move(call), stage);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint(true, tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint(false, tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* what = "recv from any source";
  TORCH_CHECK_VALUE(!group_->coalescing(), "scalecomm ", what, " (rank ", getRank(),
                    "): not supported inside batch_isend_irecv");
  const at::Tensor& t = singleTensor(what, getRank(), tensors);
  checkDense(what, getRank(), t);
  TORCH_CHECK_VALUE(t.numel() > 0, "scalecomm ", what, " (rank ", getRank(),
                    "): the tensor is empty; an empty message is never sent, so there is nothing to wait for");
  WireShape shape = wireShape(t);
  auto stage = stageFor(what, {t}, /*onDevice=*/false);  // a receive from any source looks at host links
  at::Tensor tensor = stage->output(t);
  auto source = std::make_shared<std::atomic<int>>(-1);
  Call call;
  call.kind = CallKind::RecvAnySource;
  call.name = SC_LABEL("recv_anysource");
  call.data = tensor.data_ptr();
  call.count = shape.count;
  call.dtype = shape.dtype;
  call.tag = tag;
  call.source = source;
  auto work = run(c10d::OpType::RECVANYSOURCE, {t}, std::move(call), stage);
  // The group sets the source before it completes the Work.
  c10::static_intrusive_pointer_cast<ScalecommWork>(work)->setSourceProvider(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce_sparse(std::vector<at::Tensor>&,
                                                                  const c10d::AllreduceOptions&) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "scalecomm does not implement sparse allreduce yet; pass a dense tensor ",
                              "(tensor.to_dense())");
  return {};
}

}  // namespace scalecomm
