// scalecomm group: one process group's policy and life, torch-free.
//
// Contract:
// - A Group owns its Communicator, its worker thread, the sequence numbers
//   (one per collective for the whole group; one per ordered pair of ranks
//   for point-to-point), the poison state, its Selector (select/selector.h:
//   which algorithm each call runs, auto's choice included), the cache of
//   compiled plans and the whole lifecycle (create, shutdown, abort, exit).
// - submit(call) is the one entry: it numbers the call, resolves its
//   algorithm, and runs it in issue order, either at once on the caller's
//   thread or on the worker. It runs on the caller's thread only when the
//   caller waits for it right away (Call::blocking), no device work is
//   involved, and nothing is queued or running on the worker; otherwise it
//   is handed to the worker (docs/architecture.md, "Where a call runs").
//   On the worker, host sends and receives progress together (in flight,
//   group/point_to_point.cc) and may complete out of issue order; per peer
//   and direction they keep it, and any other call runs only once every
//   earlier one has completed.
//   Either way call.done runs exactly once on the executing thread, after
//   call.after and outside the group's execution lock (it may submit
//   more); a failure (peer died, mismatch, timeout) poisons the group and
//   every later call fails with the first reason until the group is
//   destroyed. submit() itself throws, before anything is numbered,
//   Error(InvalidArgument) for a call the group cannot take (bad peer, a
//   message above its algorithm's limit, a collective inside a coalescing
//   block) and Error(Aborted) once the group is poisoned or shut down.
// - abort() from any thread poisons, closes every link and wakes every
//   waiter. shutdown() (idempotent; a second caller waits for the first)
//   runs what is queued (or, with a grace period, aborts what has not
//   finished by then) and closes the links, with the leave notice when no
//   call failed (Communicator::leave, bounded by the shutdown grace).
//   shutdownAllAtExit() does that with a 2 s grace for every live group of
//   the process.
// - Work queued on the worker holds the Group by shared ownership, so a
//   Group outlives every call it accepted, whichever thread drops the last
//   reference.
// - Every call is reported to the group's watchers (group/call_watcher.h)
//   under its record id: the flight recorder with its watchdog and desync
//   report (group/health_watch.h) always, others added by addWatcher().
// Thread safety: submit() from one thread at a time (c10d's contract);
// abort(), poisoned(), stats() and the counters from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/plan_cache.h"
#include "comm/communicator.h"
#include "comm/queued_channel.h"
#include "comm/worker.h"
#include "compress/compression_states.h"
#include "core/label.h"
#include "core/store.h"
#include "group/call_watcher.h"
#include "group/config.h"
#include "group/group_state.h"
#include "group/health_watch.h"
#include "group/monitored_barrier.h"
#include "group/timeline_record.h"
#include "select/selector.h"

namespace scalecomm {

// Segment of collectives on device memory when segment_bytes is automatic:
// large, because a queued channel gains no overlap from segments inside a
// step and pays a transport operation for each (NCCL point-to-point); still
// bounded, so that pipelined schedules (tree, chain) keep some pipelining.
constexpr int64_t kDeviceSegmentBytes = int64_t{16} << 20;

enum class CallKind : uint8_t {
  Allreduce,
  Broadcast,
  Reduce,
  Allgather,
  ReduceScatter,
  Gather,
  Scatter,
  Alltoall,
  Barrier,
  MonitoredBarrier,
  Send,
  Recv,
  RecvAnySource,
  SendRecvBatch,
  CompressedAllreduce,
};

// The collective whose algorithm selection a call kind follows; SendRecv for
// the kinds that have no selection of their own.
CollectiveKind selectedAs(CallKind kind);

// One call, described as data. Fields a kind does not use are ignored.
struct Call {
  CallKind kind = CallKind::Barrier;  // every caller sets it
  Label name;  // errors, stats, timeline: "allreduce:ring", "all_gather_into_tensor:ring", "send", ...
  DataType dtype = DataType::Opaque;
  ReduceOp op = ReduceOp::None;
  double premulFactor = 1.0;
  // Elements: of the whole buffer (allreduce, broadcast, reduce), of each
  // rank's block (allgather, reduce_scatter, gather, scatter), of the message
  // (send, recv).
  int64_t count = 0;
  // The buffer of allreduce, broadcast and reduce (in place; reduce: scratch
  // on non-root ranks), send and recv; reduce_scatter: the n blocks of this
  // rank's contributions, overwritten, block `rank` then holds the result.
  void* data = nullptr;
  // allgather: outputs[r] for every r (outputs[rank] already holds this
  // rank's block); gather/scatter: one block per rank (only this rank's
  // own, and all at the root); alltoall: n send blocks then n receive blocks.
  std::vector<void*> blocks;
  std::vector<int64_t> sendCounts, recvCounts;  // alltoall, elements per peer (self: 0)
  int root = -1;                                // broadcast, reduce, gather, scatter
  int peer = -1;                                // send, recv
  int tag = 0;                                  // send, recv, recv from any source
  bool waitAllRanks = false;                    // monitored barrier
  std::vector<uint64_t> pairSeqs;               // monitored barrier: its message number per peer (set by the group)
  std::vector<PointToPointOp> batch;            // send/recv batch (pairSeq filled in by the group)
  AlgorithmRef algorithm;                       // none: the group's selection
  int64_t timeoutMs = 0;                        // <= 0: the group's
  uint64_t bytes = 0;                           // for stats and the timeline
  bool blocking = false;                        // the caller waits right away: may run on its thread
  bool device = false;                          // device work involved: always on the worker
  // >= 0: the buffers are on this device and the call runs on its queued
  // channel (setDeviceChannels); deviceSync orders it with the caller's work.
  int deviceIndex = -1;
  std::shared_ptr<struct DeviceSync> deviceSync;
  // Allreduce, broadcast and reduce of device memory on a host channel:
  // `data` is the device buffer, which the host never touches; the
  // collective runs chunk by chunk on the stager's host slots.
  std::shared_ptr<struct Stager> stager;
  // Run on the executing thread before and after the collective (host
  // staging, copies into and out of the buffers). A throw fails the call.
  std::function<void()> before, after;
  // CompressedAllreduce: `data` holds `count` float32 values (in host memory,
  // or, with the compressed call's own body, the memory it works on: a
  // device's on its queued channel), replaced by their sum over ranks
  // through the site's codec, with the slot's error-feedback state
  // (group/compressed_call.cc).
  std::shared_ptr<const CompressedCall> compressed;
  // Called exactly once on the executing thread: nullptr on success, else the error.
  std::function<void(const Error*)> done;
  // Receive from any source: set to the sender before done runs.
  std::shared_ptr<std::atomic<int>> source;
};

// Orders a device call with the caller's device work (the torch adapter's
// CUDA events). On the executing thread, for a call with deviceIndex >= 0:
// begin(stream) before call.before (the queue waits for the caller's inputs;
// `stream` becomes this thread's current one, so the hooks' device copies
// queue on it), then the body issues its work, then end(stream) after
// call.after returns the event recorded behind all of it, which the group
// waits for (until the deadline) before the call counts as done, unless
// capturing(): the caller's stream is being captured into a graph, so the
// work is recorded, not run (each replay runs it), and the call counts as
// done once issued. A batch of device sends and receives has one DeviceSync
// per part; they begin in order and end in reverse order on one stream.
struct DeviceSync {
  virtual ~DeviceSync() = default;
  virtual void begin(void* stream) = 0;
  virtual void* end(void* stream) = 0;
  virtual bool capturing() const { return false; }
};

// Carries a call's device buffer through host memory in chunks of
// chunkBytes() (a multiple of the element size), through two host slots, so
// that the copies of one chunk overlap the collective on another: the group
// issues the copy of chunk k+1 down before it runs chunk k, and the copy of
// chunk k up right after. Copies run in issue order on one queue, so a copy
// down into a slot runs after the copy up out of it. Which directions a rank
// copies (inputs down, results up) the stager knows; the group asks for both.
struct Stager {
  virtual ~Stager() = default;
  virtual int64_t chunkBytes() const = 0;
  // Queues copying bytes [offset, offset + bytes) of the buffer into `slot` (0 or 1).
  virtual void down(int slot, int64_t offset, int64_t bytes) = 0;
  // Waits for the slot's last copy down; its host memory.
  virtual void* ready(int slot) = 0;
  // Queues copying the slot back to bytes [offset, offset + bytes).
  virtual void up(int slot, int64_t offset, int64_t bytes) = 0;
  // Waits for every queued copy (also after a failed call: the slots outlive their copies).
  virtual void finish() = 0;
};

// Cores this host gives its processes: the online CPUs, capped by a cgroup
// v2 CPU quota (a container limited to 2 CPUs on a large host).
int hostCores();
// The tuning cache for a group being created (group/tuning.cc): rank 0 reads
// it and shares its text, path and key through `store` under `prefix`, so
// every rank starts from the same table. A cache measured for another key
// is not used; a bad file throws Error(InvalidArgument) naming the line.
TuningTable loadTuning(Store& store, const std::string& prefix, const GroupConfig& config, Communicator& comm,
                       std::string& path, std::string& key);

class Group : public std::enable_shared_from_this<Group> {
 public:
  // Rendezvous through `store` (keys under the group name), connects every
  // peer, measures the cost model's parameters when anything is auto. Throws
  // Error(InvalidArgument) for bad settings, Error(Io|Timeout) when peers do
  // not arrive.
  // The group keeps `store` for the desync report (see the watchdog below).
  static std::shared_ptr<Group> create(std::shared_ptr<Store> store, int rank, int size, GroupConfig config);
  // Over links made elsewhere (tests: loopback); no probe (costs as given).
  // With a store, the desync report works as over a mesh.
  static std::shared_ptr<Group> create(std::unique_ptr<Communicator> comm, GroupConfig config, CostParams costs = {},
                                       std::shared_ptr<Store> store = nullptr);
  ~Group();

  // Numbers and runs `call` (see the contract above); returns its number:
  // the group's sequence number, or for point-to-point the pair's.
  uint64_t submit(Call&& call);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The effective settings (automatic values resolved).
  const GroupConfig& config() const { return config_; }
  // Which algorithm each call runs; its layout (hosts, ps servers, shared
  // windows) is the one schedules see.
  Selector& selector() { return *selector_; }
  const Selector& selector() const { return *selector_; }
  Communicator& communicator() { return *comm_; }
  const std::shared_ptr<GroupState>& state() const { return state_; }
  uint64_t lastSeq() const { return seq_.load(); }
  bool poisoned() const { return state_->poisoned(); }
  bool isShutDown() const { return shutDown_.load(); }

  // The Selector's algorithmFor() and prepare() for a call kind (submit
  // thread): the algorithm a call would run (after auto's choice), and the
  // prepared call site (algorithm and title; Selector::prepare).
  AlgorithmRef algorithmFor(CallKind kind, int64_t bytes, const std::string& override = "");
  using Prepared = Selector::Prepared;
  const Prepared& prepare(CallKind kind, const char* collective, int64_t bytes);

  // Compressed allreduce: the prepared site of a codec spec (parsed, its
  // codec made and its titles interned once per spec; Error(InvalidArgument)
  // naming the choices for a bad one), and the group's compression state per
  // tensor key, which a CompressedCall holds as its slot; compress="auto"'s
  // chooser, one per group (its link fit is the group's). Any thread.
  std::shared_ptr<const CompressedSite> compressedSite(const std::string& spec);
  std::shared_ptr<AutoSelection> autoCompression();
  CompressionStates& compressionStates() { return compression_; }

  // Coalescing (batch_isend_irecv): sends and receives submitted between
  // startCoalescing() and endCoalescing() are numbered at once and run as one
  // batch that progresses all of them together: the parts' before hooks run
  // in order before it, their after hooks after it; parts on a device (all on
  // the same one) run it on that device's queued channel. Any other call in
  // between, or a part the batch cannot take (a device other than the first
  // part's), is refused with Error(InvalidArgument) and abandons the batch
  // (its parts fail, nothing is sent, coalescing ends), since torch does not
  // end a coalescing block that raised. endCoalescing(call) submits the
  // batch under call's name; every part's done runs, then call.done. It
  // returns the first message's number, or 0 for an empty batch (call.done
  // then runs at once). Both from the submitting thread.
  void startCoalescing();
  uint64_t endCoalescing(Call call);
  bool coalescing() const { return coalescing_; }

  // Adds a watcher of every later call (before the group's first call).
  void addWatcher(std::shared_ptr<CallWatcher> w) { watchers_.push_back(std::move(w)); }
  // The queued channel of a device (made on first use, collectively: every
  // rank's n-th device call reaches it in the same order), with the call's
  // deadline for its waits. Unset: device calls fail with InvalidArgument.
  using DeviceChannels = std::function<QueuedChannel&(int device, const Deadline& deadline)>;
  void setDeviceChannels(DeviceChannels f) { deviceChannels_ = std::move(f); }
  void abort(const std::string& why);
  // Runs what is queued, then closes the links. With a grace period, work
  // that has not finished within it is aborted instead of awaited.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(-1));
  static void shutdownAllAtExit();

  struct Counters {
    uint64_t inlineCalls = 0;  // run on the caller's thread
    uint64_t workerCalls = 0;  // handed to the worker
    PlanCache::Counters plans;
  };
  Counters counters() const;
  std::map<std::string, GroupState::OpStats> stats() const { return state_->stats(); }
  std::vector<OpBucketStats> bucketStats() const { return state_->bucketStats(); }
  // The share of a bucket's time auto's explorations may add
  // (auto_explore_percent, 1..100), from this rank's next call on: ordered
  // with the calls issued before it, as a collective is. Every rank sets it
  // at the same point of its calls (auto decides alike only then). Returns
  // the share it replaces. Settling a bucket quickly before timing it: 100,
  // the calls, then the share returned.
  int setAutoExplorePercent(int percent);

 private:
  Group(std::unique_ptr<Communicator> comm, GroupConfig config);
  // What create() found for the Selector: the parsed selection, the cost
  // model, and the tuning cache with its path and key.
  struct Choices {
    AlgorithmSelection selection;
    CostParams costs;
    TuningTable tuning;
    std::string tuningPath, tuningKey;
  };
  // After construction: selector, worker, watchers, registry, timeline row.
  // `store` (under `storePrefix`) carries the desync report; null: none.
  void start(Choices choices, std::shared_ptr<Store> store, const std::string& storePrefix);
  static void addLive(std::weak_ptr<Group> group);  // for shutdownAllAtExit (group/lifecycle.cc)
  void checkUsable(const std::string& name) const;
  [[noreturn]] void abandonBatch(const std::string& why);
  void numberCall(Call& call, uint64_t& number);
  void dispatch(Call&& call, uint64_t number);  // moved from only when handed to the worker
  // Runs the call on the executing thread (execMu_ held), starting at `start`
  // (now; recorded as its start unless the recorder has it already); the
  // error, if any. The caller runs call.done after releasing execMu_.
  std::optional<Error> execute(Call& call, uint64_t number, uint64_t recordId, Clock::time_point start,
                               bool recordStart);
  // The watchers' side of a call (group/call_watcher.h), by its record id.
  // Inline: they are on every call's path.
  uint64_t watchQueued(const Call& call, uint64_t number, Clock::time_point at, const std::string* running) {
    const bool collective = call.kind != CallKind::Send && call.kind != CallKind::Recv &&
                            call.kind != CallKind::RecvAnySource && call.kind != CallKind::SendRecvBatch;
    const uint64_t id = ++lastRecord_;
    const WatchedCall watched{call.name, number, collective, call.bytes, call.timeoutMs};
    health_->queued(id, watched, at, running);
    for (const auto& w : watchers_) w->queued(id, watched, at, running);
    return id;
  }
  void watchStarted(uint64_t id, const std::string& algorithm, Clock::time_point at) {
    health_->started(id, algorithm, at);
    for (const auto& w : watchers_) w->started(id, algorithm, at);
  }
  void watchEnded(uint64_t id, const std::string& error, Clock::time_point at = Clock::now()) {
    health_->ended(id, error, at);
    for (const auto& w : watchers_) w->ended(id, error, at);
  }
  // A call's failure `e` as returned: with the poison's cause (the group
  // was already unusable) and what the watchers explain.
  Error explained(const Error& e, uint64_t id);
  void watchFailed(const std::string& why);
  void runBody(Call& call, Channel& ch, CollectiveOptions& o);
  void runCompressed(Call& call, Channel& ch, const CollectiveOptions& o);
  // Sends and receives posted without waiting (group/point_to_point.cc): a
  // host send or receive run by the worker is moved a piece at a time with
  // every other one in flight, so posted operations progress together; any
  // other call finishes them first (worker thread).
  static bool runsInFlight(const Call& call);
  struct InFlight {
    Call call;
    uint64_t number, recordId;
    Clock::time_point start;
    std::unique_ptr<PendingMessage> message;
  };
  struct Finished {
    Call call;
    std::optional<Error> error;
  };
  void runPointToPoint(Call&& call, uint64_t number, uint64_t recordId);
  void finishPointToPoint();
  // Moves the in-flight messages until none is left (or, with untilQueued,
  // until another job waits on the worker); their done callbacks run outside execMu_.
  void progressInFlight(bool untilQueued);
  // The first failure (of the message recorded as `recordId`) fails them all and poisons the group.
  void failInFlight(const Error& first, uint64_t recordId, std::vector<Finished>& finished);
  static void runDone(std::vector<Finished>& finished);
  // Where a host call runs: point-to-point kinds on the links' stream
  // channel, collectives on the communicator's collective channel.
  Channel& hostChannel(CallKind kind);
  void runOnDevice(Call& call, CollectiveOptions& o);
  void runStaged(Call& call, Channel& ch, CollectiveOptions& o);
  // auto's online choice for an allreduce call (executing thread): resolves
  // call.algorithm (and the call's title) before it runs; after it ran,
  // records its time and, where the tuner asks, agrees with the other ranks
  // (an allreduce of the ranks' times under the call's seq).
  OnlineTuner::Pick resolveTuned(Call& call);
  void recordTuned(const OnlineTuner::Pick& pick, double seconds, const CollectiveOptions& o);

  int rank_, size_;
  GroupConfig config_;
  std::unique_ptr<Selector> selector_;
  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<GroupState> state_;
  std::unique_ptr<Worker> worker_;
  PlanCache plans_;
  std::mutex execMu_;  // held by whichever thread runs a call
  std::atomic<uint64_t> seq_{0};
  std::vector<uint64_t> sentTo_, receivedLabel_;  // point-to-point numbers per peer (submit thread)
  std::vector<uint64_t> received_;                // receives executed per peer (executing thread)
  int nextAnySource_ = 0;                         // executing thread
  std::shared_ptr<const TimelineRow> timelineRow_;
  DeviceChannels deviceChannels_;
  // Segment of device calls: the configured segment_bytes, else kDeviceSegmentBytes (device_path.cc).
  int64_t deviceSegmentBytes_ = 0;
  std::atomic<uint64_t> inlineCalls_{0}, workerCalls_{0};
  std::mutex sitesMu_;
  std::unordered_map<std::string, std::shared_ptr<const CompressedSite>> compressedSites_;  // by spec as given
  std::shared_ptr<AutoSelection> autoCompression_;
  CompressionStates compression_;
  std::vector<std::unique_ptr<InFlight>> inFlight_;  // worker thread: empty whenever the worker is idle
  bool coalescing_ = false;                          // submit thread
  std::vector<std::pair<Call, uint64_t>> pending_;   // the batch being coalesced, with pair numbers
  std::mutex shutdownMu_;
  std::atomic<bool> shutDown_{false};
  const int creatorPid_;   // for messages
  const int creatorFork_;  // fork generation at creation: a forked child may not use or close the group
  bool forked() const;
  // The watchers: the health watch first (called directly: it is on every
  // call's path), then those added.
  std::unique_ptr<HealthWatch> health_;
  std::vector<std::shared_ptr<CallWatcher>> watchers_;
  uint64_t lastRecord_ = 0;  // the newest call's record id (submit thread)
};

}  // namespace scalecomm
