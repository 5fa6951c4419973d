// The end of a Group's life (group/group.h): abort, shutdown with its grace
// period, the watchdog that aborts a call stuck past its timeout, the
// flight recorder's dump, and the registry of live groups that
// shutdownAllAtExit() closes.
#include <algorithm>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "group/group.h"

namespace scalecomm {

namespace {

// Live groups, for shutdownAllAtExit.
std::mutex& liveMu() {
  static std::mutex mu;
  return mu;
}
std::vector<std::weak_ptr<Group>>& live() {
  static std::vector<std::weak_ptr<Group>> groups;
  return groups;
}

}  // namespace

void Group::addLive(std::weak_ptr<Group> group) {
  std::lock_guard<std::mutex> g(liveMu());
  auto& groups = live();
  groups.erase(std::remove_if(groups.begin(), groups.end(), [](const auto& w) { return w.expired(); }), groups.end());
  groups.push_back(std::move(group));
}

void Group::abort(const std::string& why) {
  // A forked child must not close the links it shares with its parent.
  state_->poison(ErrorKind::Aborted, why, /*abortComm=*/!forked());
}

void Group::shutdown(std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> once(shutdownMu_);     // a second caller waits for the first
  if (shutDown_.exchange(true) || !worker_) return;  // (no worker: creation failed before start())
  if (forked()) {
    // A forked child: the worker and watchdog threads do not exist here and
    // the links belong to the parent. Leak them rather than join or close them.
    (void)worker_.release();
    (void)watchdog_.release();
    (void)desync_.release();  // its store thread does not exist here either
    (void)comm_.release();
    return;
  }
  if (grace.count() >= 0) {
    const auto until = std::chrono::steady_clock::now() + grace;
    while (!worker_->idle() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!worker_->idle()) {
      state_->poison(ErrorKind::Aborted,
                     strCat("scalecomm (rank ", rank_, "): the group was destroyed (destroy_process_group or exit) ",
                            "with this collective in flight; aborted after the grace period of ", grace.count(),
                            " ms (SCALECOMM_SHUTDOWN_GRACE_MS)"),
                     /*abortComm=*/true);
    }
  }
  worker_->stop();  // queued calls run (or fail at once when poisoned), each bounded by its deadline
  if (paramString("SCALECOMM_SUMMARY") == "1") {
    const std::vector<OpBucketStats> rows = state_->bucketStats();
    if (!rows.empty()) {
      logLine(LogLevel::Info, strCat("rank ", rank_, "/", size_, " group '", config_.groupName,
                                     "': operations by size bucket (SCALECOMM_SUMMARY=1)\n", statsTable(rows, size_)));
    }
  }
  {
    std::lock_guard<std::mutex> g(watchdogMu_);
    watchdogStop_ = true;
  }
  watchdogCv_.notify_all();
  if (watchdog_ && watchdog_->joinable()) watchdog_->join();
  state_->detach();
  // The leave notice only at a message boundary on every link: no call
  // failed, and none runs inline on another thread now.
  std::unique_lock<std::mutex> exec(execMu_, std::try_to_lock);
  if (exec.owns_lock() && !state_->poisoned()) {
    comm_->leave(std::chrono::milliseconds(config_.shutdownGraceMs));
  } else {
    comm_->closeLinks();
  }
}

// A call still running this long past its timeout is stuck where its own
// deadline checks cannot see it (a hook, a blocking library call).
constexpr auto kWatchdogGrace = std::chrono::seconds(5);

void Group::watchdogLoop() {
  auto nextStoreCheck = Clock::now();
  std::unique_lock<std::mutex> lk(watchdogMu_);
  while (!watchdogStop_) {
    watchdogCv_.wait_for(lk, std::chrono::milliseconds(100));
    if (watchdogStop_) break;
    lk.unlock();
    comm_->heartbeat();  // peers that cannot see this process (another PID namespace) watch this
    const std::string late = recorder_.overdue(kWatchdogGrace);
    if (!late.empty() && !state_->poisoned()) {
      const std::string why = strCat("scalecomm watchdog (rank ", rank_, "): ", late, "; aborting the group");
      SC_LOG(Error, why);
      dumpFlightRecorder(why);
      state_->poison(ErrorKind::Timeout, why, /*abortComm=*/true);
    }
    // The store only through the desync protocol's own thread: a store that
    // does not answer never holds the watchdog (which aborts stuck calls).
    if (desync_ && !desync_->broken()) {
      if (const uint64_t near = recorder_.nearTimeout(&DesyncProtocol::leadFor)) desync_->askEarly(near);
      if (Clock::now() >= nextStoreCheck) {
        const int64_t answered = desync_->poll(recorder_.position(rank_));
        if (answered > 0) dumpFlightRecorder("another rank asked where every rank is (its call nears its timeout)");
        nextStoreCheck = Clock::now() + DesyncProtocol::kPollInterval;
      }
    }
    lk.lock();
  }
}

void Group::dumpFlightRecorder(const std::string& why) {
  if (config_.traceBuffer == 0) return;
  std::lock_guard<std::mutex> g(dumpMu_);
  const std::string dir = paramString("SCALECOMM_TRACE_DIR");
  if (dir.empty()) {
    const RankPosition where = recorder_.position(rank_);
    SC_LOG(Warn, "rank ", rank_, " flight recorder (group '", config_.groupName, "'): ", where.describe(),
           "; set SCALECOMM_TRACE_DIR for the last ", config_.traceBuffer, " calls of every rank");
    return;
  }
  std::string name = config_.groupName;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  const std::string path = strCat(dir, "/scalecomm-trace-", name, "-rank", rank_, ".json");
  std::string body = recorder_.json(rank_, size_, config_.groupName, why);
  std::ofstream out(path);
  if (!out) {
    SC_LOG(Warn, "rank ", rank_, ": cannot write the flight recorder to ", path);
    return;
  }
  out << body;
  SC_LOG(Warn, "rank ", rank_, ": flight recorder written to ", path, " (", why.substr(0, 200), ")");
}

void Group::shutdownAllAtExit() {
  std::vector<std::shared_ptr<Group>> groups;
  {
    std::lock_guard<std::mutex> g(liveMu());
    for (auto& w : live())
      if (auto s = w.lock()) groups.push_back(std::move(s));
    live().clear();
  }
  // Calls in flight get a short grace period (peers may be about to join
  // them); then they are aborted rather than waited for until their timeout.
  for (auto& g : groups) g->shutdown(std::chrono::milliseconds(g->config().shutdownGraceMs));
}

}  // namespace scalecomm
