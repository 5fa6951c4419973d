// The Group's side of auto's online allreduce choice (select/selector.h):
// the tuning cache's key and loading at creation, the explore share ordered
// with the calls, resolving a call's algorithm on the executing thread, and
// the agreement between ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "algo/registry.h"
#include "core/dtype.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/version.h"
#include "group/group.h"

namespace scalecomm {

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The processor's model as /proc/cpuinfo names it, blanks as '_' ("?"
// where unknown): a cache measured on one processor does not rank the
// algorithms of another (a cloud VM of one name moves between them).
std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::istringstream words(line.substr(colon + 1));
    std::string word, name;
    while (words >> word) name += (name.empty() ? "" : "_") + word;
    return name.empty() ? "?" : name;
  }
  return "?";
}

// What a measurement depends on: the library, the machine (rank 0's host,
// processor and cores), the layout (ranks per host, link kinds, the mpi channel),
// the settings that change how fast an algorithm runs and how a trial times it.
std::string tuningKeyOf(const GroupConfig& c, Communicator& comm) {
  std::ostringstream o;
  o << "scalecomm-" << kVersion << " world=" << comm.size() << " hosts=";
  std::vector<int> perHost;
  for (int h : comm.hostOf()) {
    if (h >= static_cast<int>(perHost.size())) perHost.resize(h + 1, 0);
    ++perHost[h];
  }
  for (size_t i = 0; i < perHost.size(); ++i) o << (i ? "+" : "") << perHost[i];
  std::set<std::string> kinds;
  for (int q = 0; q < comm.size(); ++q)
    if (q != comm.rank()) kinds.insert(comm.link(q).kind());
  o << " links=";
  for (auto it = kinds.begin(); it != kinds.end(); ++it) o << (it == kinds.begin() ? "" : "+") << *it;
  o << (comm.collectivesOnMpi() ? " mpi-channel" : "") << " segment=" << c.segmentBytes
    << " window=" << c.shmWindowBytes << " spin=" << c.spinMicros << " sockets=" << c.socketsPerPeer
    << " trial=" << c.autoBlockBytes << " cores=" << hostCores() << " cpu=" << cpuModel()
    << " machine=" << hostIdentity();
  return o.str();
}

}  // namespace

// Rank 0 reads the cache and hands its text and key to every rank through
// the store, so all start from the same table and pick alike.
TuningTable loadTuning(Store& store, const std::string& prefix, const GroupConfig& config, Communicator& comm,
                       std::string& path, std::string& key) {
  const std::string storeKey = prefix + "tuning";
  if (comm.rank() == 0) {
    key = tuningKeyOf(config, comm);
    char name[40];
    std::snprintf(name, sizeof(name), "/tuning-%016llx.txt", static_cast<unsigned long long>(fnv1a(key)));
    // The default cache lives in this user's own cache directory (none
    // without one); a file named by SCALECOMM_TUNING_FILE is the user's choice.
    const bool ours = config.tuningFile.empty();
    const std::string dir = ours ? userCacheDir() : std::string();
    if (ours && dir.empty()) {
      SC_LOG(Info,
             "rank 0: no cache directory (neither XDG_CACHE_HOME, HOME nor a home directory): auto's "
             "tuning cache is off (SCALECOMM_TUNING_FILE names one)");
    }
    path = config.tuningFile == "none" ? "" : ours ? (dir.empty() ? "" : dir + "/scalecomm" + name) : config.tuningFile;
    std::string text, why;
    if (!path.empty() && !readSmallFile(path, kMaxTuningFileBytes, ours, text, why) && !why.empty()) {
      if (!ours) {
        // Every rank fails alike: the reason travels in place of the text.
        store.set(storeKey, strCat("!scalecomm: SCALECOMM_TUNING_FILE '", path, "' is not read: ", why,
                                   "; name a tuning cache written by python -m pyscalecomm.tune, or none"));
      } else {
        SC_LOG(Warn, "rank 0: the tuning cache ", path, " is ignored and will be replaced: ", why);
      }
      text.clear();
    }
    if (ours && !text.empty()) {  // a damaged cache of our own is one we start afresh
      try {
        (void)TuningTable::parse(text, "tuning cache '" + path + "'");
      } catch (const Error& e) {
        SC_LOG(Warn, "rank 0: ", e.what(), "; starting afresh (the cache is rewritten as auto measures)");
        text.clear();
      }
    }
    if (why.empty() || ours) store.set(storeKey, path + "\n" + key + "\n" + text);
  }
  const std::string shared = store.get(storeKey, Deadline::after(std::chrono::milliseconds(config.timeoutMs)));
  if (!shared.empty() && shared[0] == '!') fail(ErrorKind::InvalidArgument, shared.substr(1));
  const size_t a = shared.find('\n'), b = shared.find('\n', a + 1);
  path = shared.substr(0, a);
  key = shared.substr(a + 1, b - a - 1);
  TuningTable t = TuningTable::parse(shared.substr(b + 1), "tuning file '" + path + "'");
  if (!t.key.empty() && t.key != key) {
    SC_LOG(Info, "rank ", comm.rank(), ": tuning file ", path,
           " was measured for another machine, layout or "
           "version (",
           t.key, "); starting afresh (this group: ", key, ")");
    return TuningTable{};
  }
  if (t.world != 0 && t.world != comm.size()) {
    SC_LOG(Warn, "rank ", comm.rank(), ": tuning file ", path, " was measured at world size ", t.world,
           ", this group has ", comm.size(), " ranks: using its alpha/beta only");
    t.allreduce.clear();
  }
  return t;
}

int Group::setAutoExplorePercent(int percent) {
  if (percent < 1 || percent > 100)
    fail(ErrorKind::InvalidArgument, "scalecomm set_auto_explore_percent (rank ", rank_, "): ", percent,
         " is outside 1..100 (the share of a bucket's time auto's explorations may add; 100: unpaced)");
  const int previous = selector_->swapExplorePercent(percent);
  if (!selector_->online()) return previous;
  // Ordered with the calls before it: inline where none is queued or running,
  // else as a job behind them on the worker.
  std::unique_lock<std::mutex> exec(execMu_, std::defer_lock);
  if (isShutDown() || (worker_->idle() && exec.try_lock())) {
    selector_->applyExplorePercent(percent);
    return previous;
  }
  worker_->post([self = shared_from_this(), percent] {
    self->finishPointToPoint();  // the worker is idle only with no message in flight
    std::lock_guard<std::mutex> g(self->execMu_);
    self->selector_->applyExplorePercent(percent);
  });
  return previous;
}

OnlineTuner::Pick Group::resolveTuned(Call& call) {
  const int64_t bytes = call.count * static_cast<int64_t>(elementSize(call.dtype));
  Selector::Resolved r = selector_->resolve(bytes, call.stager != nullptr);
  call.algorithm = r.algorithm;
  if (call.name == SC_LABEL("allreduce")) call.name = r.title;
  return r.pick;
}

void Group::recordTuned(const OnlineTuner::Pick& pick, double seconds, const CollectiveOptions& o) {
  selector_->record(pick, seconds, [&](std::vector<double>& values) {
    // The slowest rank's times: one small allreduce, the same on every rank,
    // under the call's seq as its agreement part (a peer still in the call, or
    // a rank checking its peers' windows, tells the two apart: comm/wire.h).
    CollectiveOptions agree = o;
    agree.algorithm = ringAlgorithm();
    agree.part = CallPart::Agreement;
    agree.trace = nullptr;
    allreduce(comm_->collectiveChannel(), values.data(), static_cast<int64_t>(values.size()), DataType::Float64,
              ReduceOp::Max, 1.0, agree);
  });
}

}  // namespace scalecomm
