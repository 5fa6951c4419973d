#include "group/group.h"

#include "comm/stream_channel.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "algo/probe.h"
#include "algo/registry.h"
#include "algo/schedule.h"
#include "algo/shared.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/timeline.h"
#include "core/version.h"
#include "group/call_checks.h"
#include "group/health_watch.h"
#include "transport/mpi_runtime.h"

namespace scalecomm {

namespace {

// Bumped in every child of fork(): a group made in another generation belongs
// to the parent. One relaxed load per call instead of a getpid() syscall.
std::atomic<int> forkGeneration{0};
const bool forkHookInstalled = [] {
  pthread_atfork(nullptr, nullptr, [] { forkGeneration.fetch_add(1, std::memory_order_relaxed); });
  return true;
}();

// Segments of 256 KiB pipeline reductions with shared-memory transfers and
// with MPI messages (the mpi channel: one MPI message per segment). A group
// spanning hosts over tcp takes 1 MiB segments and paces each ring/rhd step
// to one segment ahead of the peer (algo/plan.h; docs/architecture.md,
// "Pacing"). Every rank sees the same hosts and channel, so all agree.
int64_t automaticSegmentBytes(const std::vector<int>& hostOf, bool onMpi) {
  return spansHosts(hostOf) && !onMpi ? int64_t{1} << 20 : int64_t{256} << 10;
}

int64_t automaticSendAheadBytes(const std::vector<int>& hostOf) { return spansHosts(hostOf) ? int64_t{1} << 20 : 0; }

// This machine (one kernel: its emulated hosts and containers count
// together) runs more of the group's ranks than it has cores.
bool crowded(const Communicator& comm) {
  const std::vector<int>& machineOf = comm.machineOf();
  return std::count(machineOf.begin(), machineOf.end(), machineOf[comm.rank()]) > hostCores();
}

// How a waiting rank waits, once the machines are known. It spins 50 us
// before it yields, unless the machine is crowded: a spinning rank would
// hold the core that the rank it waits for needs (measured: 4 ranks on 2
// cores, an 8-byte shared allreduce 89 us with spinning, 23 us without;
// docs/algorithms.md). On a crowded machine it also skips the yielding on
// sockets (Communicator::setCrowded): DDP on 4 emulated hosts at 1 Gbit/s
// with 2 cores used 0.36 cores per rank against gloo's 0.21 and ran at 0.97x
// its speed; blocking at once, 0.26 and 0.99x. Where each rank has a core,
// yielding stays (blocking made DDP with overlapped backward 2% slower,
// 2 ranks at 1 Gbit/s). A blocking call waiting on its caller's own thread
// spins through the links' poll window instead of yielding (nothing of the
// caller's runs meanwhile; beside processes that never block, a yield waited
// a time slice for the core: 8 B, 4 KiB and 1 MiB calls 1.7-2.7x slower
// than with the longer spin) unless its calls measure the worker's spin
// faster (comm/caller_spin.h: another job's ranks need the core the waiter
// holds), while the worker, whose waits overlap the caller's
// compute, keeps yielding after 50 us (spinning 200 us there made DDP steps
// 4-6 % slower; docs/journal/2026-12-01-caller-waits.md). A set spin is
// already the communicator's, for both.
void resolveWaits(GroupConfig& config, Communicator& comm) {
  const bool busy = crowded(comm);
  comm.setCrowded(busy);
  if (config.spinMicros >= 0) return;
  config.spinMicros = busy ? 0 : 50;
  comm.setSpinMicros(config.spinMicros);
  comm.setCallerSpinMicros(busy ? 0 : Link::kDefaultPollMicros);
}

// A configured allreduce algorithm must serve this group's size.
void checkServes(const AlgorithmSelection& selection, int rank, int size) {
  const Algorithm* a = findAllreduceAlgorithm(selection.allreduce);
  if (a != nullptr && a->maxWorld != 0 && size > a->maxWorld) {
    fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank, "): allreduce algorithm ", a->name,
         " serves groups of at most ", a->maxWorld, " ranks; this group has ", size);
  }
}

}  // namespace

int hostCores() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long period = 0;
  if (f >> quota >> period && quota != "max" && period > 0) {
    const long limited = (std::atol(quota.c_str()) + period - 1) / period;
    if (limited > 0) cores = std::min(cores, limited);
  }
  return static_cast<int>(std::max(cores, 1L));
}

Group::Group(std::unique_ptr<Communicator> comm, GroupConfig config)
    : rank_(comm->rank()),
      size_(comm->size()),
      config_(std::move(config)),
      comm_(std::move(comm)),
      creatorPid_(static_cast<int>(getpid())),
      creatorFork_(forkGeneration.load(std::memory_order_relaxed)) {}

std::shared_ptr<Group> Group::create(std::shared_ptr<Store> store, int rank, int size, GroupConfig config) {
  checkConfig(config, size);
  AlgorithmSelection selection = AlgorithmSelection::parse(config.algorithm);
  if (config.deterministic != 0) selection.requireRankOrder(rank);
  checkServes(selection, rank, size);
  static std::once_flag versionLine;
  std::call_once(versionLine, [] {
    SC_LOG(Info, "scalecomm ", kVersion, " (built ", __DATE__, ", MPI transport ",
           mpiCompiledIn() ? "compiled in" : "not compiled in", ")");
  });
  SC_LOG(Info, "rank ", rank, "/", size, " group '", config.groupName, "': ", describe(config), "; algorithms ",
         selection.str());
  MeshOptions mesh;
  mesh.transport = config.transport;
  mesh.useMpi = config.mpiAllowed() || selection.usesMpi();
  mesh.shmRingBytes = static_cast<uint64_t>(config.shmRingBytes);
  mesh.shmWindowBytes = static_cast<uint64_t>(config.shmWindowBytes);
  mesh.mpiChunkBytes = static_cast<uint64_t>(config.mpiChunkBytes);
  mesh.tcpStreams = static_cast<int>(config.socketsPerPeer);
  mesh.mpiZeroCopy = config.mpiZeroCopy != 0;
  mesh.spinMicros = std::max<int64_t>(config.spinMicros, 0);  // automatic: 0 until the hosts are known
  std::unique_ptr<Communicator> comm;
  try {
    comm = Communicator::connectMesh(*store, config.groupName, rank, size, mesh,
                                     Deadline::after(std::chrono::milliseconds(config.timeoutMs)));
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("scalecomm", 0) == 0) throw;
    fail(e.kind(), "scalecomm rendezvous (rank ", rank, " of ", size, ", group '", config.groupName, "'): ", e.what());
  }
  resolveWaits(config, *comm);  // before the probe, which waits like any call
  if (selection.usesMpi() && size > 1 && !comm->mpiGroup()) {
    fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank, "): algorithm mpi (", selection.str(),
         ") needs every rank started by one mpirun/mpiexec (or srun with MPI) and a build with MPI (",
         mpiCompiledIn() ? "this build has it" : "this build has none: install libopenmpi-dev, rebuild", ")");
  }
  const std::string prefix = comm->storePrefix();
  Choices choices;
  if (selection.allreduce == "auto")
    choices.tuning = loadTuning(*store, prefix, config, *comm, choices.tuningPath, choices.tuningKey);
  const bool anyAuto = selection.allreduce == "auto" || selection.broadcast == "auto" || selection.reduce == "auto";
  if (choices.tuning.hasCosts) {
    choices.costs = choices.tuning.costs;
  } else if (anyAuto && size > 1) {
    try {
      choices.costs = probeCostParams(*comm, Deadline::after(std::chrono::milliseconds(config.timeoutMs)));
    } catch (const Error& e) {
      fail(e.kind(), "scalecomm (rank ", rank, "): cost-model probe failed: ", e.what());
    }
  }
  choices.selection = std::move(selection);
  std::shared_ptr<Group> g(new Group(std::move(comm), std::move(config)));
  g->start(std::move(choices), std::move(store), prefix);
  if (anyAuto) SC_LOG(Info, "rank ", rank, ": ", g->selector_->describe());
  return g;
}

std::shared_ptr<Group> Group::create(std::unique_ptr<Communicator> comm, GroupConfig config, CostParams costs,
                                     std::shared_ptr<Store> store) {
  checkConfig(config, comm->size());
  AlgorithmSelection selection = AlgorithmSelection::parse(config.algorithm);
  if (config.deterministic != 0) selection.requireRankOrder(comm->rank());
  checkServes(selection, comm->rank(), comm->size());
  const std::string prefix = "scalecomm/" + config.groupName + "/local/";
  std::shared_ptr<Group> g(new Group(std::move(comm), std::move(config)));
  Choices choices;
  choices.selection = std::move(selection);
  choices.costs = costs;
  g->start(std::move(choices), std::move(store), prefix);
  return g;
}

void Group::start(Choices choices, std::shared_ptr<Store> store, const std::string& storePrefix) {
  resolveWaits(config_, *comm_);
  deviceSegmentBytes_ = config_.segmentBytes > 0 ? config_.segmentBytes : kDeviceSegmentBytes;
  if (config_.segmentBytes == 0)
    config_.segmentBytes = automaticSegmentBytes(comm_->hostOf(), comm_->collectivesOnMpi());
  if (config_.sendAheadBytes < 0) config_.sendAheadBytes = automaticSendAheadBytes(comm_->hostOf());
  choices.costs.segmentBytes = config_.segmentBytes;
  SelectorSettings settings;
  settings.online = config_.autotune == "online";
  settings.autoBlockBytes = config_.autoBlockBytes;
  settings.autoExplorePercent = static_cast<int>(config_.autoExplorePercent);
  settings.tuningPath = std::move(choices.tuningPath);
  settings.tuningKey = std::move(choices.tuningKey);
  AlgoParams layout{comm_->hostOf(), static_cast<int>(config_.psServers), sharedWindowBytes(*comm_)};
  selector_ = std::make_unique<Selector>(rank_, size_, std::move(choices.selection), std::move(layout), choices.costs,
                                         std::move(choices.tuning), std::move(settings));
  sentTo_.assign(size_, 0);
  receivedLabel_.assign(size_, 0);
  received_.assign(size_, 0);
  state_ = std::make_shared<GroupState>(rank_, comm_.get());
  if (Timeline* timeline = Timeline::get(rank_)) {
    static std::atomic<int> groupsWithRows{0};
    const char* envRank = std::getenv("RANK");
    timelineRow_ = std::make_shared<const TimelineRow>(
        TimelineRow{timeline, envRank && envRank[0] ? std::atoi(envRank) : rank_, groupsWithRows++, config_.groupName});
  }
  worker_ = std::make_unique<Worker>(config_.spinMicros);
  HealthWatch::Settings health{rank_, size_, config_.groupName, config_.traceBuffer, std::move(store), storePrefix};
  health_ = std::make_unique<HealthWatch>(std::move(health), state_, [comm = comm_.get()] { comm->heartbeat(); });
  addLive(weak_from_this());
}

Group::~Group() { shutdown(); }

void Group::numberCall(Call& call, uint64_t& number) {
  auto checkPeer = [&](int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank_, "): peer rank ", peer,
           " is out of range or this rank itself (valid: 0..", size_ - 1, " except ", rank_, ")");
    }
  };
  switch (call.kind) {
    case CallKind::Send:
      checkPeer(call.peer);
      number = ++sentTo_[call.peer];
      break;
    case CallKind::Recv:
      checkPeer(call.peer);
      number = ++receivedLabel_[call.peer];  // the label; the executing thread numbers the receive itself
      break;
    case CallKind::RecvAnySource: number = 1; break;
    case CallKind::SendRecvBatch:
      fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank_,
           "): a send/recv batch is built by startCoalescing()/endCoalescing(), not submitted");
    case CallKind::MonitoredBarrier:
      // Per-pair numbers: rank 0 sends to everyone, the others to rank 0.
      call.pairSeqs.assign(size_, 0);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || (rank_ != 0 && r != 0)) continue;
        call.pairSeqs[r] = ++sentTo_[r];
      }
      number = ++seq_;
      break;
    default: number = ++seq_;
  }
}

bool Group::forked() const { return forkGeneration.load(std::memory_order_relaxed) != creatorFork_; }

void Group::checkUsable(const std::string& name) const {
  if (forked()) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", name, " (rank ", rank_, "): this group belongs to process ",
         creatorPid_, "; this is a forked child (pid ", getpid(),
         "), which shares its links and must not use them. Create process groups in the child itself (or start "
         "workers with the 'spawn' method).");
  }
  if (shutDown_.load()) fail(ErrorKind::Aborted, "scalecomm ", name, " (rank ", rank_, "): the group was shut down");
  if (state_->poisoned()) {
    fail(ErrorKind::Aborted, "scalecomm ", name, " (rank ", rank_, ", seq ", seq_.load() + 1,
         "): the group is unusable after an earlier failure: ", state_->reason(),
         " Destroy the group and create a new one.");
  }
}

uint64_t Group::submit(Call&& call) {
  checkUsable(call.name);
  try {
    checkCall(call, rank_, size_, sharedWindowBytes(*comm_));
  } catch (const Error& e) {
    if (coalescing_) abandonBatch(e.what());
    throw;
  }
  if (!coalescing_) {
    uint64_t number = 0;
    numberCall(call, number);
    dispatch(std::move(call), number);
    return number;
  }
  if (call.kind != CallKind::Send && call.kind != CallKind::Recv) {
    abandonBatch(strCat("scalecomm ", call.name, " (rank ", rank_,
                        "): only send and recv can be coalesced (batch_isend_irecv); issue ", call.name,
                        " outside the coalescing block"));
  }
  if (!pending_.empty() && call.deviceIndex != pending_.front().first.deviceIndex) {
    const auto where = [](int d) { return d < 0 ? std::string("the host") : strCat("device ", d); };
    abandonBatch(strCat("scalecomm ", call.name, " (rank ", rank_, "): this batch_isend_irecv part is on ",
                        where(call.deviceIndex), " but the first part is on ",
                        where(pending_.front().first.deviceIndex),
                        "; one batch takes tensors on one device (or all on the CPU): issue separate batches"));
  }
  uint64_t number = 0;
  try {
    numberCall(call, number);
  } catch (const Error& e) {
    abandonBatch(e.what());
  }
  pending_.emplace_back(std::move(call), number);
  return number;
}

void Group::dispatch(Call&& call, uint64_t number) {
  if (call.timeoutMs <= 0) call.timeoutMs = config_.timeoutMs;
  const auto now = Clock::now();  // queued and, on this thread, started
  if (call.blocking && !call.device && worker_->idle()) {
    std::unique_lock<std::mutex> exec(execMu_, std::try_to_lock);
    if (exec.owns_lock()) {
      inlineCalls_.fetch_add(1, std::memory_order_relaxed);
      const uint64_t id = watchQueued(call, number, now, &call.algorithm.str());
      std::optional<Error> error;
      {
        const CallerWaits caller;
        error = execute(call, number, id, now, /*recordStart=*/false);
      }
      comm_->callerCallEnded(now);
      exec.unlock();  // completion callbacks may issue further calls
      if (call.done) call.done(error ? &*error : nullptr);
      return;
    }
  }
  const uint64_t id = watchQueued(call, number, now, nullptr);
  workerCalls_.fetch_add(1, std::memory_order_relaxed);
  if (runsInFlight(call)) {
    worker_->post([self = shared_from_this(), call = std::move(call), number, id]() mutable {
      self->runPointToPoint(std::move(call), number, id);
    });
    return;
  }
  worker_->post([self = shared_from_this(), call = std::move(call), number, id]() mutable {
    self->finishPointToPoint();  // the links' streams at a message boundary
    std::optional<Error> error;
    {
      std::lock_guard<std::mutex> exec(self->execMu_);
      error = self->execute(call, number, id, Clock::now(), /*recordStart=*/true);
    }
    if (call.done) call.done(error ? &*error : nullptr);
  });
}

Channel& Group::hostChannel(CallKind kind) {
  switch (kind) {
    case CallKind::Send:
    case CallKind::Recv:
    case CallKind::RecvAnySource:
    case CallKind::SendRecvBatch:
    case CallKind::CompressedAllreduce: return comm_->channel();
    default: return comm_->collectiveChannel();
  }
}

void Group::runBody(Call& call, Channel& ch, CollectiveOptions& o) {
  Communicator& links = *comm_;
  switch (call.kind) {
    case CallKind::Allreduce: return allreduce(ch, call.data, call.count, call.dtype, call.op, call.premulFactor, o);
    case CallKind::Broadcast: return broadcast(ch, call.data, call.count, call.dtype, call.root, o);
    case CallKind::Reduce:
      return reduce(ch, call.data, call.count, call.dtype, call.op, call.premulFactor, call.root, o);
    case CallKind::Allgather: return allgather(ch, call.blocks, call.count, call.dtype, o);
    case CallKind::ReduceScatter:
      return reduceScatter(ch, call.data, call.count, call.dtype, call.op, call.premulFactor, o);
    case CallKind::Gather: return gather(ch, call.blocks, call.count, call.dtype, call.root, o);
    case CallKind::Scatter: return scatter(ch, call.blocks, call.count, call.dtype, call.root, o);
    case CallKind::Alltoall: {
      const std::vector<void*> send(call.blocks.begin(), call.blocks.begin() + size_);
      const std::vector<void*> recv(call.blocks.begin() + size_, call.blocks.end());
      return alltoall(ch, send, call.sendCounts, recv, call.recvCounts, call.dtype, o);
    }
    case CallKind::Barrier: return barrier(ch, o);
    case CallKind::MonitoredBarrier: {
      return monitoredBarrier(links, call.waitAllRanks, received_, call.pairSeqs, o);
    }
    case CallKind::Send: return sendTo(ch, call.data, call.count, call.dtype, call.peer, call.tag, o);
    case CallKind::Recv:
      o.seq = ++received_[call.peer];
      return recvFrom(ch, call.data, call.count, call.dtype, call.peer, call.tag, o);
    case CallKind::RecvAnySource: {
      const int from = recvFromAny(ch, call.data, call.count, call.dtype, call.tag, received_, nextAnySource_, o);
      nextAnySource_ = from + 1;  // round-robin: the next search starts after this peer
      if (call.source) call.source->store(from);
      return;
    }
    case CallKind::SendRecvBatch:
      for (PointToPointOp& op : call.batch) {
        if (!op.send) op.pairSeq = ++received_[op.peer];
      }
      return pointToPointBatch(ch, call.batch, o);
    case CallKind::CompressedAllreduce: return runCompressed(call, ch, o);
  }
}

namespace {

// A call during which an MPI request was abandoned: MPI may write into its
// buffers whenever this process next calls MPI, so the call (its buffers, and
// through `done` the tensors its Work holds) is kept until the process exits.
void keepBuffersOfAbandonedMpiCall(const Call& call) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<Call>>();  // never destroyed: MPI may outlive statics
  std::lock_guard<std::mutex> g(mu);
  kept->push_back(std::make_unique<Call>(call));
}

}  // namespace

std::optional<Error> Group::execute(Call& call, uint64_t number, uint64_t recordId, Clock::time_point start,
                                    bool recordStart) {
  if (state_->poisoned()) {
    Error e(ErrorKind::Aborted,
            strCat("scalecomm ", call.name, " (rank ", rank_, ", seq ", number,
                   "): not run because the group is unusable after an earlier failure: ", state_->reason()));
    watchEnded(recordId, e.what());
    return e;
  }
  OnlineTuner::Pick tuned;
  // Auto on a device's channel is the device's choice (group/device_path.cc):
  // the online tuner measures host calls.
  const bool resolve = selector_->online() && call.kind == CallKind::Allreduce &&
                       call.algorithm.is(AlgorithmKind::Auto) && call.deviceIndex < 0;
  if (resolve) tuned = resolveTuned(call);
  if (recordStart || resolve) watchStarted(recordId, call.algorithm.str(), start);
  const uint64_t abandonedBefore = mpiRequestsAbandoned();
  CollectiveOptions o;
  o.algorithm = call.algorithm;
  o.psServers = static_cast<int>(config_.psServers);
  o.segmentBytes = config_.segmentBytes;
  o.sendAheadBytes = config_.sendAheadBytes;
  o.timeoutMs = call.timeoutMs;
  o.seq = number;
  o.deadline = Deadline::after(std::chrono::milliseconds(call.timeoutMs), start);
  o.plans = &plans_;
  ExecTrace trace;
  if (timelineRow_) o.trace = &trace;
  Clock::time_point end;
  try {
    try {
      if (call.deviceIndex >= 0) {
        runOnDevice(call, o);
      } else if (call.stager) {
        if (call.before) call.before();
        runStaged(call, hostChannel(call.kind), o);
        if (call.after) call.after();
      } else {
        if (call.before) call.before();
        runBody(call, hostChannel(call.kind), o);
        if (call.after) call.after();
      }
    } catch (...) {
      if (timelineRow_)
        recordOperation(*timelineRow_, call.name, number, call.bytes, start, Clock::now(), trace, *comm_, true);
      throw;
    }
    end = Clock::now();
    if (timelineRow_) recordOperation(*timelineRow_, call.name, number, call.bytes, start, end, trace, *comm_, false);
    const double seconds = std::chrono::duration<double>(end - start).count();
    state_->record(call.name, call.bytes, seconds);
    if (tuned.measured) recordTuned(tuned, seconds, o);
  } catch (const Error& e) {
    Error err = explained(e, recordId);
    SC_LOG(Warn, err.what());
    watchEnded(recordId, e.what());
    watchFailed(err.what());
    state_->poison(err.kind(), err.what(), /*abortComm=*/false);
    if (mpiRequestsAbandoned() != abandonedBefore) keepBuffersOfAbandonedMpiCall(call);
    return err;
  } catch (const std::exception& e) {
    // Not ours (a throw from before/after, e.g. a device copy): name the call.
    Error err(ErrorKind::Io, strCat("scalecomm ", call.name, " (rank ", rank_, ", seq ", number, "): ", e.what()));
    SC_LOG(Warn, err.what());
    watchEnded(recordId, err.what());
    state_->poison(err.kind(), err.what(), /*abortComm=*/false);
    return err;
  }
  watchEnded(recordId, "", end);
  return std::nullopt;
}

Error Group::explained(const Error& e, uint64_t id) {
  // Already poisoned: this failure is its consequence (e.g. this rank was
  // aborted or destroyed while the call ran): say why. A timeout: the
  // watchers ask every rank where it is, so the message names who lags.
  std::string more = state_->poisoned() ? strCat("; cause: ", state_->reason()) : std::string();
  more += health_->explain(id, e);
  for (const auto& w : watchers_) more += w->explain(id, e);
  return more.empty() ? e : Error(e.kind(), strCat(e.what(), more));
}

void Group::watchFailed(const std::string& why) {
  health_->failed(why);
  for (const auto& w : watchers_) w->failed(why);
}

Group::Counters Group::counters() const { return {inlineCalls_.load(), workerCalls_.load(), plans_.counters()}; }

}  // namespace scalecomm
