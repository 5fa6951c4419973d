#include "comm/communicator.h"

#include "comm/stream_channel.h"

#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "comm/mpi_channel.h"
#include "comm/transports.h"
#include "comm/wire.h"
#include "core/error.h"
#include "core/hmac.h"
#include "core/logging.h"
#include "core/params.h"
#include "core/spin.h"

namespace scalecomm {

namespace {
thread_local int callerWaits = 0;  // CallerWaits alive on this thread
}  // namespace

CallerWaits::CallerWaits() { ++callerWaits; }
CallerWaits::~CallerWaits() { --callerWaits; }
bool CallerWaits::active() { return callerWaits > 0; }

Communicator::Communicator(int rank, int size, std::vector<std::unique_ptr<Link>> links, int64_t spinMicros)
    : rank_(rank),
      size_(size),
      links_(std::move(links)),
      spinMicros_(spinMicros),
      callerSpinLong_(spinMicros),
      callerSpin_(spinMicros, spinMicros),
      hostOf_(size, 0),
      machineOf_(size, 0) {
  SC_CHECK(static_cast<int>(links_.size()) == size_);
  for (int p = 0; p < size_; ++p)
    if (links_[p] && links_[p]->needsProgress()) progressed_.push_back(links_[p].get());
  setCrowded(false);
  channel_ = std::make_unique<StreamChannel>(*this);
}

void Communicator::setCrowded(bool crowded) {
  pollMicros_.assign(size_, Link::kDefaultPollMicros);
  bool any = false;
  for (int p = 0; p < size_; ++p) {
    if (!links_[p]) continue;
    pollMicros_[p] = crowded && links_[p]->waitFd() >= 0 ? 0 : links_[p]->pollMicros();
    shortestPollMicros_ = any ? std::min(shortestPollMicros_, pollMicros_[p]) : pollMicros_[p];
    longestPollMicros_ = any ? std::max(longestPollMicros_, pollMicros_[p]) : pollMicros_[p];
    any = true;
  }
}

void Communicator::setMachineOf(std::vector<int> machineOf) {
  SC_CHECK(static_cast<int>(machineOf.size()) == size_, "machineOf has ", machineOf.size(), " entries for ", size_,
           " ranks");
  machineOf_ = std::move(machineOf);
}

void Communicator::setHostOf(std::vector<int> hostOf) {
  SC_CHECK(static_cast<int>(hostOf.size()) == size_, "hostOf has ", hostOf.size(), " entries for ", size_, " ranks");
  hostOf_ = std::move(hostOf);
}

Communicator::~Communicator() {
  mpiChannel_.reset();
  closeLinks();
}

Channel& Communicator::collectiveChannel() {
  if (mpiChannel_) return *mpiChannel_;
  return *channel_;
}

void Communicator::closeLinks() {
  for (auto& l : links_)
    if (l) l->close();
}

void Communicator::leave(std::chrono::milliseconds bound) {
  const WireHeader notice = leaveHeader();
  const auto* bytes = reinterpret_cast<const uint8_t*>(&notice);
  std::vector<size_t> sent(size_, sizeof(notice));
  for (int p = 0; p < size_; ++p)
    if (links_[p]) sent[p] = 0;
  const auto until = Clock::now() + bound;
  for (bool pending = true; pending;) {
    pending = false;
    for (int p = 0; p < size_; ++p) {
      if (sent[p] == sizeof(notice)) continue;
      try {
        sent[p] += links_[p]->trySend(bytes + sent[p], sizeof(notice) - sent[p]);
        if (sent[p] < sizeof(notice)) {
          links_[p]->checkPeer();
          pending = true;
        }
      } catch (const Error&) {
        sent[p] = sizeof(notice);  // the peer is gone: it needs no notice
      }
    }
    for (Link* l : progressed_) l->progress();
    if (pending && Clock::now() >= until) break;
    if (pending) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  closeLinks();
}

void Communicator::abort() {
  aborted_.store(true, std::memory_order_release);
  closeLinks();
}

void Communicator::idle(const std::vector<int>& peers, Clock::time_point idleSince,
                        const std::function<bool()>& ready) {
  if (aborted()) fail(ErrorKind::Aborted, "the group was aborted");
  for (Link* l : progressed_) l->progress();  // mpi links move their sends only inside MPI calls
  auto idleUs = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - idleSince).count();
  // Phase 1: spin (lowest latency). Phase 2, up to pollMicros: yield, so compute
  // threads on this core run while the caller keeps polling its links without
  // blocking (a blocking poll() wakeup costs ~60 us on loopback TCP, measured).
  // Phase 3: block in poll() on tcp sockets, or sleep briefly for shm.
  // idleSince is the last progress of any kind, so a transfer trickling in from
  // a slow link keeps the worker spinning/yielding between arrivals (0.5 cores
  // on 1 Gbit/s against gloo's 0.2). Counting from the last whole message
  // instead (block sooner) was measured (2026-11-23, docs/performance.md): CPU
  // as gloo's, but DDP training that overlaps backward with communication got
  // 5-10 % slower (a blocked worker waits for the scheduler on busy cores).
  if (idleUs < (CallerWaits::active() ? callerSpin_.budget() : spinMicros_)) {
    for (int i = 0; i < 32; ++i) SC_CPU_RELAX();
    return;
  }
  // The peers' longest poll time; scanned only where the links' poll times differ.
  bool polling = idleUs < shortestPollMicros_;
  if (!polling && idleUs < longestPollMicros_) {
    for (int p : peers) polling = polling || idleUs < pollMicros_[p];
  }
  if (polling) {
    sched_yield();
    return;
  }
  ++idleBlocked_;
  // Every peer behind one doorbell (shm): sleep on it until a peer moves bytes.
  Doorbell* bell = nullptr;
  for (int p : peers) {
    Doorbell* b = links_[p] ? links_[p]->doorbell() : nullptr;
    if (b == nullptr || (bell != nullptr && b != bell)) {
      bell = nullptr;
      break;
    }
    bell = b;
  }
  if (bell != nullptr) {
    const uint32_t key = bell->key();
    bell->arm();
    const bool now =
        ready ? ready() : std::any_of(peers.begin(), peers.end(), [&](int p) { return links_[p]->ready(); });
    if (!now && bell->sleep(key, 1000)) ++idleRung_;  // 1 ms cap keeps abort, deadlines and liveness checks prompt
    bell->disarm();
    return;
  }
  pollfd fds[64];
  nfds_t n = 0;
  bool other = false;
  for (int p : peers) {
    const int fd = links_[p] ? links_[p]->waitFd() : -1;
    if (fd >= 0 && n + 2 <= 64) {
      fds[n++] = pollfd{fd, POLLIN, 0};
      // A link whose socket was full also wakes when it takes data again, so a
      // blocked send does not leave the wire idle until the 1 ms cap.
      if (links_[p]->sendBlocked()) {
        const int sfd = links_[p]->sendWaitFd();
        if (sfd == fd) {
          fds[n - 1].events |= POLLOUT;
        } else {
          fds[n++] = pollfd{sfd, POLLOUT, 0};
        }
      }
    } else {
      other = true;
    }
  }
  if (n > 0 && !other) {
    poll(fds, n, 1);  // 1 ms cap keeps abort and deadlines prompt
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(idleUs < 100000 ? 20 : 200));
}

std::string hostIdentity() {
  const char* forced = std::getenv("SCALECOMM_HOSTNAME");
  if (forced != nullptr && forced[0] != '\0') return forced;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  struct stat st{};
  std::string ipc = stat("/proc/self/ns/ipc", &st) == 0 ? std::to_string(st.st_ino) : "?";
  struct stat shm{};
  std::string dev = stat("/dev/shm", &shm) == 0 ? std::to_string(shm.st_dev) + ":" + std::to_string(shm.st_ino) : "?";
  return strCat(host, "/ipc:", ipc, "/shm:", dev);
}

namespace {

// One per kernel, whatever the namespaces: the ranks that share its cores.
std::string machineIdentity() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f >> id && !id.empty()) return id;
  return hostIdentity();
}

std::map<std::string, std::string> parseInfo(const std::string& s) {
  std::map<std::string, std::string> out;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ';')) {
    auto eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

[[noreturn]] void failMissing(Store& store, const std::string& prefix, int rank, int size, const char* phase) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!store.check({prefix + std::to_string(r)})) missing.push_back(r);
  }
  std::ostringstream m;
  for (size_t i = 0; i < missing.size(); ++i) m << (i ? ", " : "") << missing[i];
  fail(ErrorKind::Timeout, "scalecomm rendezvous (rank ", rank, "): timed out during ", phase, ": ",
       size - static_cast<int>(missing.size()), " of ", size, " ranks arrived, missing ranks: [", m.str(),
       "]. Check that every rank creates the group with the same world size, and that they started.");
}

std::string waitKey(Store& store, const std::string& prefix, int r, int self, int size, const Deadline& deadline,
                    const char* phase) {
  try {
    return store.get(prefix + std::to_string(r), deadline);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Timeout) throw;
    failMissing(store, prefix, self, size, phase);
  }
}

// A communicator over the group when every rank is in the same MPI job: the
// same world size everywhere and distinct world ranks (separate singleton MPI
// worlds, e.g. mpi4py imported under torchrun, all say "0/1").
std::shared_ptr<MpiGroup> mpiGroupOf(const Rendezvous& rv, bool withMpi) {
  if (!withMpi) return nullptr;
  const std::string& self = rv.infos[rv.rank].at("mpi");
  const std::string worldSize = self.substr(self.find('/'));  // "/<n>"
  std::vector<int> worldRanks(rv.size, -1);
  std::set<int> seen;
  for (int r = 0; r < rv.size; ++r) {
    const std::string m = rv.field(r, "mpi");
    const auto slash = m.find('/');
    if (slash == std::string::npos || m.substr(slash) != worldSize) return nullptr;
    worldRanks[r] = std::stoi(m.substr(0, slash));
    if (!seen.insert(worldRanks[r]).second) return nullptr;
  }
  SC_LOG(Info, "rank ", rv.rank, ": MPI communicator over the group (MPI world ranks of the group's ranks known)");
  return MpiGroup::create(worldRanks, rv.rank, static_cast<int>(std::hash<std::string>{}(rv.prefix) % 32749));
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connectMesh(Store& store, const std::string& groupKey, int rank, int size,
                                                        const MeshOptions& opts, const Deadline& deadline) {
  const auto& registry = transportRegistry();
  bool known = opts.transport == "auto";
  for (const auto& t : registry) known = known || opts.transport == t.name;
  if (!known) {
    fail(ErrorKind::InvalidArgument, "scalecomm: unknown transport '", opts.transport, "'; choose auto, ",
         transportNames(), " (SCALECOMM_TRANSPORT or Options.transport)");
  }
  // Each creation of a group with this key is one generation; keys never collide
  // with an earlier, destroyed group that used the same store and name.
  const std::string base = "scalecomm/" + groupKey + "/";
  int64_t joined = store.add(base + "join", 1);
  Rendezvous rv{
      store,  base + "g" + std::to_string((joined - 1) / size) + "/", rank, size, opts, deadline, {}, {}, {}, nullptr,
      nullptr};
  rv.infos.resize(size);
  // The generation's key: rank 0's nonce, published before its address, so
  // every rank can read it once the addresses are exchanged.
  const std::string nonce = rank == 0 ? toHex(randomBytes(32).data(), 32) : std::string();
  if (rank == 0) store.set(rv.prefix + "nonce", nonce);

  const bool withMpi = (opts.useMpi || opts.transport == "mpi") && size > 1 && mpiEnsureInitialized();
  if (opts.transport == "mpi" && !withMpi) {
    fail(ErrorKind::InvalidArgument, "scalecomm: transport mpi needs ",
         mpiCompiledIn() ? "the ranks to be started by mpirun/mpiexec (or srun with MPI)"
                         : "a build with MPI (install libopenmpi-dev and rebuild)",
         "; rank ", rank, " has no MPI");
  }
  // The transports this rank offers: the forced one, or every one.
  std::vector<std::unique_ptr<Transport>> offered(registry.size());
  auto& mine = rv.infos[rank];
  mine["host"] = opts.hostIdentity.empty() ? hostIdentity() : opts.hostIdentity;
  mine["machine"] = machineIdentity();
  mine["transport"] = opts.transport;
  mine["pid"] = std::to_string(getpid());
  mine["mpi"] = withMpi ? strCat(mpiWorldRank(), "/", mpiWorldSize()) : "";
  for (size_t i = 0; i < registry.size() && size > 1; ++i) {
    if (opts.transport != "auto" && opts.transport != registry[i].name) continue;
    offered[i] = registry[i].make();
    offered[i]->publish(rv, mine);
  }
  std::string published;
  for (const auto& [k, v] : mine) published += k + "=" + v + ";";
  store.set(rv.prefix + "info/" + std::to_string(rank), published);
  for (int r = 0; r < size; ++r) {
    if (r != rank)
      rv.infos[r] = parseInfo(waitKey(store, rv.prefix + "info/", r, rank, size, deadline, "address exchange"));
  }
  rv.mpiGroup = mpiGroupOf(rv, withMpi);
  rv.nonce = rank == 0 ? nonce : store.get(rv.prefix + "nonce", deadline);
  rv.key = rv.nonce + paramString("SCALECOMM_SECRET");

  std::vector<std::unique_ptr<Link>> links(size);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::string theirs = rv.field(r, "transport");
    if (opts.transport != "auto" && theirs != "auto" && theirs != opts.transport) {
      fail(ErrorKind::InvalidArgument, "scalecomm: rank ", rank, " forces transport ", opts.transport, " but rank ", r,
           " forces ", theirs, "; set the same SCALECOMM_TRANSPORT on every rank (or auto)");
    }
    const std::string forced = opts.transport != "auto" ? opts.transport : theirs;
    std::string reasons;
    for (size_t i = 0; i < registry.size() && !links[r]; ++i) {
      if (!offered[i] || (forced != "auto" && forced != registry[i].name)) continue;
      const std::string why = offered[i]->whyNot(rv, r);
      if (why.empty()) {
        links[r] = offered[i]->connect(rv, r);
      } else {
        reasons += strCat(reasons.empty() ? "" : "; ", registry[i].name, ": ", why);
      }
    }
    if (!links[r]) {
      fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank, "): no transport connects rank ", rank, " with rank ",
           r, forced != "auto" ? strCat(" (transport ", forced, " is forced)") : std::string(), ": ", reasons,
           ". Use SCALECOMM_TRANSPORT=auto or a transport both ranks can use.");
    }
    SC_LOG(Info, "rank ", rank, ": peer rank ", r, " via ", links[r]->kind());
  }
  // Everyone has made every link it needs: let the transports clean up (shm
  // removes its names now, so nothing in /dev/shm outlives the group even if a
  // rank is killed later).
  // "m": every link of this rank is mpi and it asks for the mpi channel. The
  // channel exists only when every rank says so (its communicator is made
  // collectively, and both ends of a pair must send on the same channel).
  bool allMpi = rv.mpiGroup != nullptr && opts.mpiZeroCopy && size > 1;
  for (int r = 0; r < size; ++r) allMpi = allMpi && (r == rank || std::string(links[r]->kind()) == "mpi");
  store.set(rv.prefix + "ready/" + std::to_string(rank), allMpi ? "m" : "1");
  bool everyMpi = allMpi;
  for (int r = 0; r < size; ++r) {
    if (r != rank)
      everyMpi = waitKey(store, rv.prefix + "ready/", r, rank, size, deadline, "connection setup") == "m" && everyMpi;
  }
  for (auto& t : offered) {
    if (t) t->finish(rv);
  }
  std::map<std::string, int> hostIndex, machineIndex;
  std::vector<int> hostOf(size), machineOf(size);
  for (int r = 0; r < size; ++r) {
    hostOf[r] = hostIndex.emplace(rv.field(r, "host"), static_cast<int>(hostIndex.size())).first->second;
    machineOf[r] = machineIndex.emplace(rv.field(r, "machine"), static_cast<int>(machineIndex.size())).first->second;
  }
  auto comm = std::make_unique<Communicator>(rank, size, std::move(links), opts.spinMicros);
  comm->setHostOf(std::move(hostOf));
  comm->setMachineOf(std::move(machineOf));
  if (everyMpi) {
    comm->setCollectiveChannel(makeMpiChannel(*comm, rv.mpiGroup->duplicate()));
    SC_LOG(Info, "rank ", rank, ": collectives move straight between tensors over MPI (mpi channel)");
  }
  comm->setMpiGroup(std::move(rv.mpiGroup));
  comm->setWindows(std::move(rv.windows));
  comm->setStorePrefix(rv.prefix);
  return comm;
}

}  // namespace scalecomm
