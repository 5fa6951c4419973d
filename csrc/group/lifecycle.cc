// The end of a Group's life (group/group.h): abort, shutdown with its grace
// period, and the registry of live groups that shutdownAllAtExit() closes.
#include <algorithm>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "group/group.h"
#include "group/health_watch.h"

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
    health_->leak();
    for (const auto& w : watchers_) w->leak();
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
  health_->stop();
  for (const auto& w : watchers_) w->stop();
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
