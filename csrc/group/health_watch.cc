#include "group/health_watch.h"

#include <cctype>
#include <fstream>

#include "core/logging.h"
#include "core/params.h"

namespace scalecomm {

namespace {

// A call still running this long past its timeout is stuck where its own
// deadline checks cannot see it (a hook, a blocking library call).
constexpr auto kWatchdogGrace = std::chrono::seconds(5);

}  // namespace

HealthWatch::HealthWatch(Settings settings, std::shared_ptr<GroupState> state, std::function<void()> heartbeat)
    : settings_(std::move(settings)),
      state_(std::move(state)),
      heartbeat_(std::move(heartbeat)),
      recorder_(static_cast<size_t>(settings_.traceBuffer)) {
  if (settings_.store && settings_.traceBuffer > 0 && settings_.size > 1)
    desync_ = std::make_unique<DesyncProtocol>(settings_.store, settings_.storePrefix, settings_.rank, settings_.size);
  thread_ = std::make_unique<std::thread>([this] { loop(); });
}

HealthWatch::~HealthWatch() { stop(); }

void HealthWatch::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_ && thread_->joinable()) thread_->join();
}

void HealthWatch::leak() {
  (void)thread_.release();
  (void)desync_.release();  // its store thread does not exist in a forked child either
}

std::string HealthWatch::explain(uint64_t id, const Error& e) {
  if (e.kind() != ErrorKind::Timeout || !desync_) return {};
  const std::string report = desync_->report(id, recorder_.position(settings_.rank));
  return report.empty() ? report : "\nDesync report: " + report;
}

void HealthWatch::loop() {
  auto nextStoreCheck = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    if (stopping_) break;
    lk.unlock();
    heartbeat_();
    const std::string late = recorder_.overdue(kWatchdogGrace);
    if (!late.empty() && !state_->poisoned()) {
      const std::string why = strCat("scalecomm watchdog (rank ", settings_.rank, "): ", late, "; aborting the group");
      SC_LOG(Error, why);
      dump(why);
      state_->poison(ErrorKind::Timeout, why, /*abortComm=*/true);
    }
    // The store only through the desync protocol's own thread: a store that
    // does not answer never holds the watchdog (which aborts stuck calls).
    if (desync_ && !desync_->broken()) {
      if (const uint64_t near = recorder_.nearTimeout(&DesyncProtocol::leadFor)) desync_->askEarly(near);
      if (Clock::now() >= nextStoreCheck) {
        const int64_t answered = desync_->poll(recorder_.position(settings_.rank));
        if (answered > 0) dump("another rank asked where every rank is (its call nears its timeout)");
        nextStoreCheck = Clock::now() + DesyncProtocol::kPollInterval;
      }
    }
    lk.lock();
  }
}

void HealthWatch::dump(const std::string& why) {
  if (settings_.traceBuffer == 0) return;
  std::lock_guard<std::mutex> g(dumpMu_);
  const int rank = settings_.rank;
  const std::string dir = paramString("SCALECOMM_TRACE_DIR");
  if (dir.empty()) {
    const RankPosition where = recorder_.position(rank);
    SC_LOG(Warn, "rank ", rank, " flight recorder (group '", settings_.groupName, "'): ", where.describe(),
           "; set SCALECOMM_TRACE_DIR for the last ", settings_.traceBuffer, " calls of every rank");
    return;
  }
  std::string name = settings_.groupName;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  const std::string path = strCat(dir, "/scalecomm-trace-", name, "-rank", rank, ".json");
  std::string body = recorder_.json(rank, settings_.size, settings_.groupName, why);
  std::ofstream out(path);
  if (!out) {
    SC_LOG(Warn, "rank ", rank, ": cannot write the flight recorder to ", path);
    return;
  }
  out << body;
  SC_LOG(Warn, "rank ", rank, ": flight recorder written to ", path, " (", why.substr(0, 200), ")");
}

}  // namespace scalecomm
