// The Group's side of auto's online allreduce choice (algo/tuner.h): the
// tuning cache (its key, path, loading at creation, writing as the tuner
// decides), resolving a call's algorithm on the executing thread, and the
// agreement between ranks.
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

std::vector<std::string> Group::autoCandidates(int64_t bytes) const {
  return autoAllreduceCandidates(size_, bytes, algoParams());
}

void Group::startTuner() {
  explorePercent_ = static_cast<int>(config_.autoExplorePercent);
  if (selection_.allreduce != "auto" || config_.autotune != "online" || size_ <= 1) return;
  auto ranker = [this](int64_t bytes) {
    const AlgoParams params = algoParams();
    const std::vector<std::string> names = autoAllreduceCandidates(size_, bytes, params);
    const std::string favourite = scalecomm::chooseAllreduce(size_, bytes, costs_, params, names);
    std::vector<std::pair<std::string, double>> out;
    for (const std::string& a : names) {
      const double t = predictAllreduceSeconds(a, size_, bytes, costs_, params);
      if (a == favourite)
        out.insert(out.begin(), {a, t});
      else
        out.emplace_back(a, t);
    }
    std::stable_sort(out.begin() + 1, out.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    return out;
  };
  auto serves = [this](const std::string& a, int64_t bytes) { return allreduceServes(a, size_, bytes, algoParams()); };
  TunerSettings settings;
  settings.blockBytes = config_.autoBlockBytes;
  settings.explorePercent = explorePercent_.load();
  tuner_ = std::make_unique<OnlineTuner>(ranker, serves, settings);
  tuner_->load(tuning_.allreduce);
}

int Group::setAutoExplorePercent(int percent) {
  if (percent < 1 || percent > 100)
    fail(ErrorKind::InvalidArgument, "scalecomm set_auto_explore_percent (rank ", rank_, "): ", percent,
         " is outside 1..100 (the share of a bucket's time auto's explorations may add; 100: unpaced)");
  const int previous = explorePercent_.exchange(percent);
  if (!tuner_) return previous;
  // Ordered with the calls before it: inline where none is queued or running,
  // else as a job behind them on the worker.
  std::unique_lock<std::mutex> exec(execMu_, std::defer_lock);
  if (isShutDown() || (worker_->idle() && exec.try_lock())) {
    tuner_->setExplorePercent(percent);
    return previous;
  }
  worker_->post([self = shared_from_this(), percent] {
    self->finishPointToPoint();  // the worker is idle only with no message in flight
    std::lock_guard<std::mutex> g(self->execMu_);
    self->tuner_->setExplorePercent(percent);
  });
  return previous;
}

std::vector<OnlineTuner::BucketReport> Group::tuning() const {
  return tuner_ ? tuner_->report() : std::vector<OnlineTuner::BucketReport>{};
}

OnlineTuner::Pick Group::resolveTuned(Call& call) {
  OnlineTuner::Pick pick;
  const int64_t bytes = call.count * static_cast<int64_t>(elementSize(call.dtype));
  Label picked;
  if (call.deviceIndex >= 0 || call.stager) {
    picked = tuner_->modelPick(bytes);  // the host's time of a device call is not the device's
  } else {
    pick = tuner_->pick(bytes);
    picked = pick.algorithm;
    if (pick.fresh) SC_LOG(Info, "rank ", rank_, ": ", tuner_->describe(OnlineTuner::bucketOf(bytes)));
  }
  auto it = tuned_.find(picked.key());
  if (it == tuned_.end()) {
    const Tuned t{AlgorithmRef(picked), {Label("allreduce:" + picked), Label("allreduce:" + picked + " (trial)")}};
    it = tuned_.emplace(picked.key(), t).first;
  }
  call.algorithm = it->second.algorithm;
  if (call.name == SC_LABEL("allreduce")) call.name = it->second.titles[pick.candidate >= 0 ? 1 : 0];
  return pick;
}

void Group::recordTuned(const OnlineTuner::Pick& pick, double seconds, const CollectiveOptions& o) {
  if (tunerSkew_) seconds = tunerSkew_(pick.algorithm.str(), seconds);
  std::vector<double> values = tuner_->record(pick, seconds);
  if (values.empty()) return;
  // The slowest rank's times: one small allreduce, the same on every rank,
  // under the call's seq as its agreement part (a peer still in the call, or
  // a rank checking its peers' windows, tells the two apart: comm/wire.h).
  const Clock::time_point started = Clock::now();
  CollectiveOptions agree = o;
  agree.algorithm = ringAlgorithm();
  agree.part = CallPart::Agreement;
  agree.trace = nullptr;
  allreduce(comm_->collectiveChannel(), values.data(), static_cast<int64_t>(values.size()), DataType::Float64,
            ReduceOp::Max, 1.0, agree);
  const std::string what = tuner_->agreed(pick, values, std::chrono::duration<double>(Clock::now() - started).count());
  if (what.empty()) return;
  SC_LOG(Info, "rank ", rank_, ": ", what);
  if (rank_ == 0) saveTuning();
}

void Group::saveTuning() {
  if (tuningPath_.empty()) return;
  TuningTable t;
  t.key = tuningKey_;
  t.world = size_;
  t.hasCosts = costs_.alpha > 0 && costs_.beta > 0;
  t.costs = costs_;
  t.hasLayout = true;
  t.layout = algoParams();
  t.allreduce = tuner_->decided();
  std::string why;
  if (!t.save(tuningPath_, &why)) {
    if (!tuningSaveFailed_) {
      SC_LOG(Warn, "rank 0: cannot write the tuning cache ", tuningPath_, " (", why,
             "; SCALECOMM_TUNING_FILE names another, none turns it off); auto keeps measuring in memory");
    }
    tuningSaveFailed_ = true;
  }
}

}  // namespace scalecomm
