#include "torch/backend.h"

#include <c10/util/Exception.h>
#include <sched.h>

#include <mutex>
#include <set>

#include "algo/probe.h"
#include "algo/schedule.h"
#include "core/logging.h"
#include "core/params.h"
#include "cuda/nvtx_ranges.h"
#include "torch/gil.h"
#include "torch/store_adapter.h"
#include "torch/timeline_record.h"
#include "torch/validate.h"

namespace scalecomm {

BackendConfig configFromEnvironment() {
  BackendConfig c;
  c.algorithm = paramString("SCALECOMM_ALGO");
  c.psServers = paramInt("SCALECOMM_PS_SERVERS");
  c.tuningFile = paramString("SCALECOMM_TUNING_FILE");
  c.transport = paramString("SCALECOMM_TRANSPORT");
  c.useMpi = paramString("SCALECOMM_MPI") != "0";
  c.segmentBytes = paramInt("SCALECOMM_SEGMENT_BYTES");
  c.sendAheadBytes = paramInt("SCALECOMM_SEND_AHEAD_BYTES");
  c.shmRingBytes = paramInt("SCALECOMM_SHM_RING_BYTES");
  c.mpiChunkBytes = paramInt("SCALECOMM_MPI_CHUNK_BYTES");
  c.spinMicros = paramInt("SCALECOMM_SPIN_US");
  c.cudaTransport = paramString("SCALECOMM_CUDA_TRANSPORT");
  c.compression = paramString("SCALECOMM_COMPRESSION");
  int64_t t = paramInt("SCALECOMM_TIMEOUT_MS");
  if (t > 0) c.timeoutMs = t;
  return c;
}

// Segments of 256 KiB pipeline reductions with shared-memory transfers. A
// group spanning hosts takes 1 MiB segments and paces each ring/rhd step to
// one segment ahead of the peer (algo/plan.h): unpaced, ranks that entered a
// collective a few ms apart stayed apart (the early one flooded its link, the
// next call started skewed the other way) and steps alternated fast/slow on a
// bottleneck link. Measured on the emulated cluster, 1 Gbit/s, same jobs as
// gloo (docs/performance.md, "Pacing"): 16.9 MB allreduce with 16 ms of
// compute between calls, 2 hosts, per-round means: unpaced 4 MiB segments
// 167-175 ms, paced 1 MiB 155-163, gloo 155-156; DDP of a 16.6 MiB MLP,
// 2 ranks, 4 paired repeats: 1.03x gloo [1.01-1.04] (unpaced: 0.98x). Larger
// segments pace too coarsely (4 MiB ahead: no gain); 512 KiB segments did as
// well in the pattern but with a wider spread under DDP. Every rank sees the
// same hosts, so all agree.
static int64_t automaticSegmentBytes(const std::vector<int>& hostOf) {
  return spansHosts(hostOf) ? int64_t{1} << 20 : int64_t{256} << 10;
}

static int64_t automaticSendAheadBytes(const std::vector<int>& hostOf) {
  return spansHosts(hostOf) ? int64_t{1} << 20 : 0;
}

static void checkConfig(const BackendConfig& c, int size) {
  TORCH_CHECK_VALUE(c.psServers >= 1 && c.psServers <= size,
                    "scalecomm: ps_servers (SCALECOMM_PS_SERVERS) must lie in [1, ", size, "] for this group of ", size,
                    " ranks, got ", c.psServers);
  TORCH_CHECK_VALUE(c.transport == "auto" || c.transport == "shm" || c.transport == "tcp" || c.transport == "mpi",
                    "scalecomm: unknown transport '", c.transport, "'; choose auto, shm, tcp or mpi");
  TORCH_CHECK_VALUE(c.cudaTransport == "auto" || c.cudaTransport == "host",
                    "scalecomm: unknown SCALECOMM_CUDA_TRANSPORT '", c.cudaTransport, "'; choose auto or host");
  TORCH_CHECK_VALUE(c.segmentBytes >= 0, "scalecomm: segment_bytes must be positive (or 0: automatic), got ",
                    c.segmentBytes);
  TORCH_CHECK_VALUE(c.sendAheadBytes >= -1,
                    "scalecomm: send_ahead_bytes (SCALECOMM_SEND_AHEAD_BYTES) must be -1 (automatic), 0 (unpaced) or a "
                    "byte count, got ",
                    c.sendAheadBytes);
  TORCH_CHECK_VALUE(c.shmRingBytes >= 4096 && c.shmRingBytes % 64 == 0,
                    "scalecomm: shm ring bytes must be a multiple of 64 and at least 4096, got ", c.shmRingBytes);
  TORCH_CHECK_VALUE(c.mpiChunkBytes >= 64 && c.mpiChunkBytes <= (1 << 30),
                    "scalecomm: SCALECOMM_MPI_CHUNK_BYTES must lie in [64, 2^30], got ", c.mpiChunkBytes);
  TORCH_CHECK_VALUE(c.timeoutMs > 0, "scalecomm: timeout must be positive, got ", c.timeoutMs, " ms");
}

// The group's worker thread needs a core besides the caller's; a launcher that
// binds each rank to one core (mpirun's default for 2 ranks) halves speed.
static void warnIfBoundToOneCore(int rank) {
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

// Live groups, for shutdownAllAtExit. Recursive: shutdown() unregisters while
// shutdownAllAtExit holds the lock.
static std::recursive_mutex& liveMu() {
  static std::recursive_mutex mu;
  return mu;
}
static std::set<ScalecommBackend*>& live() {
  static std::set<ScalecommBackend*> s;
  return s;
}

ScalecommBackend::ScalecommBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   BackendConfig config)
    : c10d::Backend(rank, size), config_(std::move(config)) {
  checkConfig(config_, size);
  warnIfBoundToOneCore(rank);
  try {
    if (config_.compression == "none") config_.compression.clear();
    if (!config_.compression.empty()) CodecSpec::parse(config_.compression);  // a bad spec fails here
    selection_ = AlgorithmSelection::parse(config_.algorithm);
    if (!config_.tuningFile.empty()) tuning_ = TuningTable::load(config_.tuningFile);
  } catch (const Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  if (tuning_.world != 0 && tuning_.world != size) {
    SC_LOG(Warn, "rank ", rank, ": tuning file ", config_.tuningFile, " was measured at world size ", tuning_.world,
           ", this group has ", size, " ranks: using its alpha/beta only");
    tuning_.allreduce.clear();
  }
  SC_LOG(Info, "rank ", rank, "/", size, " group '", config_.groupName, "': algorithm=", selection_.str(),
         " transport=", config_.transport, " segment_bytes=", config_.segmentBytes,
         " send_ahead_bytes=", config_.sendAheadBytes, " shm_ring_bytes=", config_.shmRingBytes,
         " timeout_ms=", config_.timeoutMs, " spin_us=", config_.spinMicros);
  // One scalecomm algorithm each: "auto" is it (after the log, which shows what was asked).
  if (selection_.allgather == "auto") selection_.allgather = "ring";
  if (selection_.reduceScatter == "auto") selection_.reduceScatter = "ring";
  if (selection_.barrier == "auto") selection_.barrier = "dissemination";
  C10dStoreAdapter adapter(store);
  MeshOptions mesh;
  mesh.transport = config_.transport;
  mesh.useMpi = config_.useMpi || selection_.usesMpi();
  mesh.shmRingBytes = static_cast<uint64_t>(config_.shmRingBytes);
  mesh.mpiChunkBytes = static_cast<uint64_t>(config_.mpiChunkBytes);
  mesh.spinMicros = config_.spinMicros;
  try {
    comm_ = Communicator::connectMesh(adapter, config_.groupName, rank, size, mesh,
                                      Deadline::after(std::chrono::milliseconds(config_.timeoutMs)));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::InvalidArgument) TORCH_CHECK_VALUE(false, e.what());
    C10_THROW_ERROR(DistBackendError, e.what());
  }
  if (config_.segmentBytes == 0) config_.segmentBytes = automaticSegmentBytes(comm_->hostOf());
  if (config_.sendAheadBytes < 0) config_.sendAheadBytes = automaticSendAheadBytes(comm_->hostOf());
  if (selection_.usesMpi() && size > 1 && !comm_->mpiGroup()) {
    TORCH_CHECK_VALUE(false, "scalecomm (rank ", rank, "): algorithm mpi (", selection_.str(),
                      ") needs every rank started by one mpirun/mpiexec (or srun with MPI) and a build with MPI (",
                      mpiCompiledIn() ? "this build has it" : "this build has none: install libopenmpi-dev, rebuild",
                      ")");
  }
  const bool anyAuto = selection_.allreduce == "auto" || selection_.broadcast == "auto" || selection_.reduce == "auto";
  if (tuning_.hasCosts) {
    costs_ = tuning_.costs;
  } else if (anyAuto && size > 1) {
    try {
      costs_ = probeCostParams(*comm_, Deadline::after(std::chrono::milliseconds(config_.timeoutMs)));
    } catch (const Error& e) {
      C10_THROW_ERROR(DistBackendError, strCat("scalecomm (rank ", rank, "): cost-model probe failed: ", e.what()));
    }
  }
  costs_.segmentBytes = config_.segmentBytes;
  if (anyAuto) {
    SC_LOG(Info, "rank ", rank, ": auto: alpha=", costs_.alpha * 1e6, " us, bandwidth=", 1e-9 / costs_.beta, " GB/s (",
           tuning_.hasCosts ? "tuning file" : "probe", "), ", tuning_.allreduce.size(), " tuned allreduce sizes");
  }
  sentTo_.assign(size, 0);
  receivedFrom_.assign(size, 0);
  received_ = std::make_shared<WorkerReceives>();
  received_->count.assign(size, 0);
  state_ = std::make_shared<GroupState>(rank, comm_.get());
  nccl_ = std::make_shared<NcclGroups>(store, "scalecomm/" + config_.groupName, rank, size);
  state_->onAbort([nccl = nccl_] { nccl->abort(); });
  if (Timeline* timeline = Timeline::get(rank)) {
    static std::atomic<int> groupsWithRows{0};
    const char* envRank = std::getenv("RANK");
    timelineRow_ = std::make_shared<const TimelineRow>(
        TimelineRow{timeline, envRank && envRank[0] ? std::atoi(envRank) : rank, groupsWithRows++, config_.groupName});
  }
  worker_ = std::make_unique<Worker>(config_.spinMicros);
  std::lock_guard<std::recursive_mutex> g(liveMu());
  live().insert(this);
}

ScalecommBackend::~ScalecommBackend() { shutdown(); }

void ScalecommBackend::shutdownAllAtExit() {
  std::lock_guard<std::recursive_mutex> g(liveMu());
  const std::set<ScalecommBackend*> groups = live();
  ReleaseGilIfHeld noGil;  // finishing jobs may need it
  // Collectives in flight get a short grace period (peers may be about to
  // join them); then they are aborted rather than waited for until their timeout.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (ScalecommBackend* b : groups) {
    while (!b->worker_->idle() && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!b->worker_->idle()) {
      b->state_->poison(
          strCat("scalecomm (rank ", b->getRank(), "): the process is exiting with this collective in flight"),
          /*abortComm=*/true);
    }
    b->shutdown();
  }
}

void ScalecommBackend::shutdown() {
  if (shutDown_.exchange(true)) return;
  {
    std::lock_guard<std::recursive_mutex> g(liveMu());
    live().erase(this);
  }
  if (worker_->onWorkerThread() && worker_->queued() > 0) {
    // Destroyed from one of its own jobs (the last reference went in a future
    // callback): the worker drains the queue after this backend and its
    // communicator are gone, so the queued collectives must fail, not run.
    state_->poison(
        strCat("scalecomm (rank ", getRank(), "): the process group was destroyed while this collective was queued"),
        /*abortComm=*/false);
  }
  {
    ReleaseGilIfHeld noGil;
    worker_->stop();  // queued collectives finish or fail by their deadline (see above when on the worker)
  }
  state_->detach();
  comm_->closeLinks();
}

void ScalecommBackend::abort() {
  state_->poison(strCat("scalecomm (rank ", getRank(), "): the group was aborted with abort()"), /*abortComm=*/true);
}

void ScalecommBackend::checkUsable(const char* collective) {
  if (coalescing_) {
    const std::string name = collective;
    TORCH_CHECK(name == "send" || name == "recv", "scalecomm ", name, " (rank ", getRank(),
                "): only send and recv can be coalesced (batch_isend_irecv); issue ", name,
                " outside the coalescing block");
  }
  if (shutDown_.load()) {
    C10_THROW_ERROR(DistBackendError,
                    strCat("scalecomm ", collective, " (rank ", getRank(), "): the group was shut down"));
  }
  if (state_->poisoned()) {
    C10_THROW_ERROR(DistBackendError, strCat("scalecomm ", collective, " (rank ", getRank(), ", seq ", seq_.load() + 1,
                                             "): the group is unusable after an earlier failure: ", state_->reason(),
                                             " Destroy the group and create a new one."));
  }
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::enqueue(c10d::OpType type, const char* collective,
                                                         std::vector<at::Tensor> outputs,
                                                         std::chrono::milliseconds opTimeout, Body body, Queued q) {
  const uint64_t seq = q.p2pSeq > 0 ? q.p2pSeq : ++seq_;
  uint64_t bytes = 0;  // for stats()
  for (const auto& t : outputs) bytes += t.nbytes();
  auto work = c10::make_intrusive<ScalecommWork>(getRank(), type, collective, seq, std::move(outputs), state_);
  const int64_t timeoutMs = opTimeout > std::chrono::milliseconds(0) ? opTimeout.count() : config_.timeoutMs;
  CollectiveOptions base;
  base.algorithm = std::move(q.algorithm);
  base.psServers = static_cast<int>(config_.psServers);
  base.segmentBytes = config_.segmentBytes;
  base.sendAheadBytes = config_.sendAheadBytes;
  base.timeoutMs = timeoutMs;
  base.seq = seq;
  auto state = state_;
  std::string name = collective;
  q.alsoFinish.push_back(work);
  Communicator* comm = comm_.get();
  worker_->post([works = std::move(q.alsoFinish), state, base, body = std::move(body), name, bytes, row = timelineRow_,
                 comm, stage = std::move(q.stage)]() mutable {
    auto finishError = [&](const std::string& msg) {
      for (auto& w : works) {
        w->finishError(
            std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg)));
      }
    };
    if (state->poisoned()) {
      finishError(strCat("scalecomm ", name, " (rank ", state->rank(), ", seq ", base.seq,
                         "): not run because the group is unusable after an earlier failure: ", state->reason()));
      return;
    }
    base.deadline = Deadline::after(std::chrono::milliseconds(base.timeoutMs));
    const uint64_t range =
        nvtxEnabled() ? nvtxBegin(strCat("scalecomm:", name, " seq ", base.seq, " ", bytes, " B")) : 0;
    struct EndRange {
      uint64_t id;
      ~EndRange() { nvtxEnd(id); }
    } endRange{range};
    try {
      ExecTrace trace;
      if (row) base.trace = &trace;
      const auto start = Clock::now();
      try {
        if (stage) stage->toHost();
        body(base);
        if (stage) stage->toDevice();
      } catch (...) {
        if (row) recordOperation(*row, name, base.seq, bytes, start, Clock::now(), trace, *comm, true);
        throw;
      }
      const auto end = Clock::now();
      if (row) recordOperation(*row, name, base.seq, bytes, start, end, trace, *comm, false);
      state->record(name, bytes, std::chrono::duration<double>(end - start).count());
      for (auto& w : works) w->finish();
    } catch (const std::exception& e) {
      std::string msg = e.what();
      SC_LOG(Warn, msg);
      state->poison(msg, /*abortComm=*/false);
      finishError(msg);
    }
  });
  return work;
}

std::string ScalecommBackend::allreduceAlgorithmFor(int64_t bytes) {
  if (selection_.allreduce != "auto") return selection_.allreduce;
  std::lock_guard<std::mutex> g(chooseMu_);
  auto it = chosen_.find(bytes);
  if (it != chosen_.end()) return it->second;
  std::string algo = tuning_.lookup(bytes);
  const char* why = "tuning file";
  if (algo.empty()) {
    // ps is a baseline, never faster than direct (its S = n case); hier only
    // differs from a central reduce when the group spans several hosts.
    std::vector<std::string> candidates = {"ring", "rhd", "tree", "direct"};
    const auto& hosts = comm_->hostOf();
    if (spansHosts(hosts)) candidates.push_back("hier");
    AlgoParams params{hosts, static_cast<int>(config_.psServers)};
    algo = chooseAllreduce(getSize(), bytes, costs_, params, candidates);
    why = "cost model";
  }
  SC_LOG(Info, "rank ", getRank(), ": auto picks ", algo, " for allreduce of ", bytes, " bytes (", why, ")");
  return chosen_.emplace(bytes, algo).first->second;
}

std::string ScalecommBackend::rootedAlgorithmFor(const std::string& configured, int64_t bytes) {
  return configured != "auto" ? configured : chooseRooted(getSize(), bytes, costs_);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  checkUsable("allreduce");
  const at::Tensor& t = singleTensor("allreduce", getRank(), tensors);
  ReductionArgs r = reductionArgs("allreduce", getRank(), t, opts.reduceOp);
  if (!config_.compression.empty() && isFloating(r.dtype) && (r.op.op == ReduceOp::Sum || r.op.op == ReduceOp::Avg)) {
    // The group's default codec; state per tensor memory (a DDP bucket keeps its buffer).
    const std::string key = strCat("ptr:", reinterpret_cast<uintptr_t>(t.data_ptr()), ":", t.numel());
    return allreduceCompressed(t, config_.compression, key, -1, r.op.op == ReduceOp::Avg, opts.timeout);
  }
  Communicator* comm = comm_.get();
  auto call = DeviceCall::begin({t}, "allreduce", getRank());
  if (ncclAllreduce(call)) return allreduceOnNccl(t, r, call, opts);
  TORCH_CHECK_VALUE(selection_.allreduce != "nccl", "scalecomm allreduce (rank ", getRank(),
                    "): algorithm nccl takes CUDA tensors (and a build with NCCL, SCALECOMM_CUDA_TRANSPORT=auto); ",
                    "this tensor is on ", t.device(), ": choose a scalecomm algorithm such as ring");
  auto stage = HostStage::forCall(call);
  at::Tensor tensor = stage->inout(t);
  const std::string algo = allreduceAlgorithmFor(static_cast<int64_t>(t.nbytes()));
  return enqueue(c10d::OpType::ALLREDUCE, ("allreduce:" + algo).c_str(), {t}, opts.timeout,
                 [comm, tensor, r](const CollectiveOptions& o) {
                   scalecomm::allreduce(*comm, tensor.data_ptr(), tensor.numel(), r.dtype, r.op.op, r.op.premulFactor,
                                        o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduceOnNccl(const at::Tensor& t, const ReductionArgs& r,
                                                                 const std::shared_ptr<DeviceCall>& call,
                                                                 const c10d::AllreduceOptions& opts) {
  // auto: our ring (bandwidth-optimal; the CPU cost model does not describe GPUs).
  const std::string algo =
      selection_.allreduce == "auto" || selection_.allreduce == "mpi" ? "ring" : selection_.allreduce;
  AlgoParams params{comm_->hostOf(), static_cast<int>(config_.psServers)};
  auto nccl = nccl_;
  at::Tensor tensor = t;
  auto work = enqueue(c10d::OpType::ALLREDUCE, ("allreduce:" + algo + ":cuda").c_str(), {t}, opts.timeout,
                      [nccl, call, tensor, r, params](const CollectiveOptions& o) {
                        nccl->allreduce(*call, tensor.data_ptr(), tensor.numel(), r.dtype, r.op.op, r.op.premulFactor,
                                        o.algorithm, params, o.deadline);
                      },
                      {.algorithm = algo});
  c10::static_intrusive_pointer_cast<ScalecommWork>(work)->setDeviceCall(call);
  return work;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  checkUsable("allreduce_coalesced");
  TORCH_CHECK_VALUE(!tensors.empty(), "scalecomm allreduce_coalesced (rank ", getRank(), "): no tensors given");
  ReductionArgs r = reductionArgs("allreduce_coalesced", getRank(), tensors[0], opts.reduceOp);
  for (const auto& t : tensors) {
    checkDense("allreduce_coalesced", getRank(), t);
    TORCH_CHECK_VALUE(t.scalar_type() == tensors[0].scalar_type(), "scalecomm allreduce_coalesced (rank ", getRank(),
                      "): all tensors must have the same dtype; got ", t.scalar_type(), " and ",
                      tensors[0].scalar_type());
  }
  Communicator* comm = comm_.get();
  auto stage = stageFor("allreduce_coalesced", tensors);
  std::vector<at::Tensor> ts = stage->inouts(tensors);
  int64_t total = 0;
  for (const auto& t : tensors) total += static_cast<int64_t>(t.nbytes());
  const std::string algo = allreduceAlgorithmFor(total);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, opts.timeout,
                 [comm, ts, r](const CollectiveOptions& o) {
                   at::Tensor flat = at::cat(flattenAll(ts));
                   scalecomm::allreduce(*comm, flat.data_ptr(), flat.numel(), r.dtype, r.op.op, r.op.premulFactor, o);
                   int64_t off = 0;
                   for (const auto& t : ts) {
                     t.copy_(flat.narrow(0, off, t.numel()).view_as(t));
                     off += t.numel();
                   }
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  checkUsable("broadcast");
  const at::Tensor& t = singleTensor("broadcast", getRank(), tensors);
  checkDense("broadcast", getRank(), t);
  checkRoot("broadcast", getRank(), getSize(), opts.rootRank);
  WireShape shape = wireShape(t);
  Communicator* comm = comm_.get();
  auto stage = stageFor("broadcast", {t});
  at::Tensor tensor = stage->inout(t);
  int root = static_cast<int>(opts.rootRank);
  const std::string algo = rootedAlgorithmFor(selection_.broadcast, static_cast<int64_t>(t.nbytes()));
  return enqueue(c10d::OpType::BROADCAST, ("broadcast:" + algo).c_str(), {t}, opts.timeout,
                 [comm, tensor, shape, root](const CollectiveOptions& o) {
                   scalecomm::broadcast(*comm, tensor.data_ptr(), shape.count, shape.dtype, root, o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  checkUsable("allgather");
  const at::Tensor& in = singleTensor("allgather", getRank(), inputs);
  checkDense("allgather", getRank(), in);
  TORCH_CHECK_VALUE(outputs.size() == 1, "scalecomm allgather (rank ", getRank(), "): expected one output list, got ",
                    outputs.size());
  const auto& outs = outputs[0];
  TORCH_CHECK_VALUE(static_cast<int>(outs.size()) == getSize(), "scalecomm allgather (rank ", getRank(),
                    "): the output list has ", outs.size(), " tensors but the group has ", getSize(),
                    " ranks; pass one output tensor per rank");
  for (const auto& o : outs) checkSameAs("allgather", getRank(), o, in, "output tensor");
  WireShape shape = wireShape(in);
  Communicator* comm = comm_.get();
  std::vector<at::Tensor> all = outs;
  all.push_back(in);
  auto stage = stageFor("allgather", all);
  at::Tensor input = stage->input(in);
  std::vector<at::Tensor> outList = stage->outputs(outs);
  const int rank = getRank();
  const std::string& algo = selection_.allgather;
  return enqueue(c10d::OpType::ALLGATHER, titled("allgather", algo).c_str(), outs, opts.timeout,
                 [comm, input, outList, shape, rank](const CollectiveOptions& o) {
                   outList[rank].copy_(input);
                   std::vector<void*> ptrs;
                   for (const auto& t : outList) ptrs.push_back(t.data_ptr());
                   scalecomm::allgather(*comm, ptrs, shape.count, shape.dtype, o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  checkUsable("all_gather_into_tensor");
  checkDense("all_gather_into_tensor", getRank(), input);
  checkDense("all_gather_into_tensor", getRank(), output);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "scalecomm all_gather_into_tensor (rank ", getRank(),
                    "): output dtype ", output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "scalecomm all_gather_into_tensor (rank ", getRank(),
                    "): output has ", output.numel(), " elements but must have world size (", getSize(), ") x input (",
                    input.numel(), ") = ", input.numel() * getSize());
  WireShape shape = wireShape(input);
  Communicator* comm = comm_.get();
  auto stage = stageFor("all_gather_into_tensor", {input, output});
  at::Tensor in = stage->input(input), out = stage->output(output);
  const int rank = getRank(), size = getSize();
  const std::string& algo = selection_.allgather;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, titled("all_gather_into_tensor", algo).c_str(), {output}, opts.timeout,
                 [comm, in, out, shape, rank, size](const CollectiveOptions& o) {
                   auto flatOut = out.view({-1});
                   flatOut.narrow(0, rank * in.numel(), in.numel()).copy_(in.reshape({-1}));
                   std::vector<void*> ptrs;
                   auto* first = static_cast<uint8_t*>(out.data_ptr());
                   for (int r = 0; r < size; ++r) ptrs.push_back(first + r * in.nbytes());
                   scalecomm::allgather(*comm, ptrs, shape.count, shape.dtype, o);
                 },
                 {.algorithm = algo, .stage = stage});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  checkUsable("allgather_into_tensor_coalesced");
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "scalecomm allgather_into_tensor_coalesced (rank ", getRank(),
                    "): ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  // Each pair is its own collective in issue order; the returned Work completes last.
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  if (!last)
    return enqueue(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", {}, opts.timeout,
                   [](const CollectiveOptions&) {});
  return last;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::barrier(const c10d::BarrierOptions& opts) {
  checkUsable("barrier");
  Communicator* comm = comm_.get();
  const std::string& algo = selection_.barrier;
  return enqueue(c10d::OpType::BARRIER, titled("barrier", algo).c_str(), {}, opts.timeout,
                 [comm](const CollectiveOptions& o) { scalecomm::barrier(*comm, o); }, {.algorithm = algo});
}

static void notImplemented(const char* what, const char* instead) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "scalecomm does not implement ", what, " yet; ", instead);
}

static void checkPeerRank(const char* what, int rank, int size, int peer) {
  TORCH_CHECK_VALUE(peer >= 0 && peer < size && peer != rank, "scalecomm ", what, " (rank ", rank, "): peer rank ",
                    peer, " is out of range or this rank itself (valid: 0..", size - 1, " except ", rank, ")");
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::pointToPoint(bool sending, std::vector<at::Tensor>& tensors, int peer,
                                                              int tag) {
  const char* what = sending ? "send" : "recv";
  checkUsable(what);
  const at::Tensor& t = singleTensor(what, getRank(), tensors);
  checkDense(what, getRank(), t);
  checkPeerRank(what, getRank(), getSize(), peer);
  WireShape shape = wireShape(t);
  Communicator* comm = comm_.get();
  auto stage = stageFor(what, {t});
  TORCH_CHECK_VALUE(!(coalescing_ && stage->active()), "scalecomm ", what, " (rank ", getRank(),
                    "): CUDA tensors cannot be batched (batch_isend_irecv) yet; issue isend/irecv one by one");
  at::Tensor tensor = sending ? stage->input(t) : stage->output(t);
  const uint64_t pairSeq = sending ? ++sentTo_[peer] : ++receivedFrom_[peer];
  if (coalescing_) {
    auto work = c10::make_intrusive<ScalecommWork>(getRank(), sending ? c10d::OpType::SEND : c10d::OpType::RECV, what,
                                                   pairSeq, std::vector<at::Tensor>{tensor}, state_);
    pending_.push_back({{sending, tensor.data_ptr(), shape.count, shape.dtype, peer, tag, pairSeq}, tensor, work});
    return work;
  }
  auto received = received_;
  return enqueue(sending ? c10d::OpType::SEND : c10d::OpType::RECV, what, {t}, std::chrono::milliseconds(0),
                 [comm, tensor, shape, peer, tag, sending, received](const CollectiveOptions& o) {
                   if (sending) {
                     scalecomm::sendTo(*comm, tensor.data_ptr(), shape.count, shape.dtype, peer, tag, o);
                   } else {
                     CollectiveOptions numbered = o;
                     numbered.seq = ++received->count[peer];
                     scalecomm::recvFrom(*comm, tensor.data_ptr(), shape.count, shape.dtype, peer, tag, numbered);
                   }
                 },
                 {.stage = stage, .p2pSeq = pairSeq});
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint(true, tensors, dstRank, tag);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint(false, tensors, srcRank, tag);
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* what = "recv from any source";
  checkUsable("recv");
  TORCH_CHECK_VALUE(!coalescing_, "scalecomm ", what, " (rank ", getRank(),
                    "): not supported inside batch_isend_irecv");
  const at::Tensor& t = singleTensor(what, getRank(), tensors);
  checkDense(what, getRank(), t);
  TORCH_CHECK_VALUE(t.numel() > 0, "scalecomm ", what, " (rank ", getRank(),
                    "): the tensor is empty; an empty message is never sent, so there is nothing to wait for");
  WireShape shape = wireShape(t);
  Communicator* comm = comm_.get();
  auto stage = stageFor(what, {t});
  at::Tensor tensor = stage->output(t);
  auto received = received_;
  auto source = std::make_shared<std::atomic<int>>(-1);
  auto work = enqueue(c10d::OpType::RECVANYSOURCE, "recv_anysource", {t}, std::chrono::milliseconds(0),
                      [comm, tensor, shape, tag, received, source](const CollectiveOptions& o) {
                        const int from = recvFromAny(*comm, tensor.data_ptr(), shape.count, shape.dtype, tag,
                                                     received->count, received->nextAnySource, o);
                        received->nextAnySource = from + 1;  // round-robin: the next search starts after this peer
                        source->store(from);
                      },
                      {.stage = stage, .p2pSeq = 1});
  // The worker sets the source before it completes the Work; copy it on completion.
  auto scWork = c10::static_intrusive_pointer_cast<ScalecommWork>(work);
  scWork->setSourceProvider(source);
  return work;
}

c10::intrusive_ptr<c10d::Work> ScalecommBackend::allreduce_sparse(std::vector<at::Tensor>&,
                                                                  const c10d::AllreduceOptions&) {
  notImplemented("sparse allreduce", "pass a dense tensor (tensor.to_dense())");
  return {};
}

}  // namespace scalecomm
