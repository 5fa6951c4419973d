#include "transport/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>

#include "core/error.h"
#include "core/hmac.h"
#include "core/logging.h"

namespace scalecomm {

namespace {

constexpr uint64_t kShmMagic = 0x53434f4d4d53484dULL;  // "SCOMMSHM"
constexpr const char* kPrefix = "scalecomm-";

struct alignas(64) SegmentHeader {
  uint64_t magic;
  int32_t ownerRank;
  int32_t ownerPid;  // in the owner's PID namespace
  int32_t worldSize;
  int32_t pad;
  uint64_t ringBytes;
  uint64_t windowBytes;
  uint64_t pidNamespace;            // the owner's (pidNamespaceId())
  std::atomic<uint64_t> heartbeat;  // the owner's beat count (ShmSegment::beat)
  std::atomic<uint32_t> doorbell;   // moves on every ring() that found a sleeper (a futex word)
  std::atomic<uint32_t> sleepers;   // the owner's threads armed on it
  // The owner's proof that it holds the group's key (ShmSegment::proveKey):
  // an HMAC of the segment's identity, valid once `proved` is 1 (release).
  std::atomic<uint32_t> proved;
  uint32_t pad2;
  uint8_t proof[32];
  uint8_t pad3[24];
};
static_assert(sizeof(SegmentHeader) == 128);

struct alignas(64) WindowControl {
  std::atomic<uint64_t> posted;
};

size_t slotBytes(uint64_t ringBytes) { return sizeof(RingControl) + ringBytes; }

size_t windowOffset(int worldSize, uint64_t ringBytes) {
  return sizeof(SegmentHeader) + static_cast<size_t>(worldSize) * slotBytes(ringBytes);
}

// The window: its control line, two call headers, then the log.
size_t windowLogOffset() { return sizeof(WindowControl) + 2 * kWindowHeaderBytes; }

size_t segmentBytes(int worldSize, uint64_t ringBytes, uint64_t windowBytes) {
  return windowOffset(worldSize, ringBytes) +
         (windowBytes > 0 ? windowLogOffset() + kWindowLogWindows * windowBytes : 0);
}

uint64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint64_t pidNamespaceId() {
  static const uint64_t id = [] {
    struct stat st{};
    return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : uint64_t{0};
  }();
  return id;
}

bool processAlive(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return false;
  std::string line;
  std::getline(f, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

int ShmSegment::removeStaleSegments() {
  int removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  const uint64_t ours = pidNamespaceId();
  while (dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) != 0) continue;
    // scalecomm-<pid>-<pid namespace, hex>-<nonce>: a pid means something only
    // in its own namespace, so segments of other namespaces are left alone.
    char* end = nullptr;
    const long pid = std::strtol(n.c_str() + std::strlen(kPrefix), &end, 10);
    if (end == nullptr || *end != '-') continue;
    char* nsEnd = nullptr;
    const uint64_t ns = std::strtoull(end + 1, &nsEnd, 16);
    if (nsEnd == nullptr || *nsEnd != '-' || ns != ours || ours == 0) continue;
    if (pid > 0 && !processAlive(static_cast<int>(pid))) {
      if (shm_unlink(("/" + n).c_str()) == 0) {
        ++removed;
        SC_LOG(Info, "removed stale shared-memory segment /dev/shm/", n, " of dead process ", pid);
      }
    }
  }
  closedir(dir);
  return removed;
}

uint64_t ShmSegment::bytesFor(int worldSize, uint64_t ringBytes, uint64_t windowBytes) {
  return segmentBytes(worldSize, ringBytes, windowBytes);
}

std::shared_ptr<ShmSegment> ShmSegment::create(int ownerRank, int worldSize, uint64_t ringBytes, uint64_t windowBytes) {
  SC_CHECK(ringBytes % 64 == 0 && ringBytes > 0 && windowBytes % 64 == 0);
  removeStaleSegments();
  std::random_device rd;
  std::string name =
      strCat("/", kPrefix, getpid(), "-", std::hex, pidNamespaceId(), "-", (static_cast<uint64_t>(rd()) << 32) ^ rd());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail(ErrorKind::Io, "scalecomm shm: cannot create ", name, ": ", std::strerror(errno));
  size_t bytes = segmentBytes(worldSize, ringBytes, windowBytes);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    ::close(fd);
    shm_unlink(name.c_str());
    fail(ErrorKind::Io, "scalecomm shm: cannot size ", name, " to ", bytes, " bytes: ", std::strerror(err),
         "; is /dev/shm large enough? Lower SCALECOMM_SHM_RING_BYTES or use SCALECOMM_TRANSPORT=tcp.");
  }
  // Reserve the pages now: a full /dev/shm (Docker's default is 64 MiB) must
  // fail here with a message, not with SIGBUS at the first write to a ring.
  // Filesystems that cannot preallocate (EOPNOTSUPP, EINVAL) keep the sparse file.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserved != 0 && reserved != EOPNOTSUPP && reserved != EINVAL) {
    ::close(fd);
    shm_unlink(name.c_str());
    fail(ErrorKind::Io, "scalecomm shm (rank ", ownerRank, "): cannot reserve ", bytes, " bytes in /dev/shm for ",
         worldSize, " rings of SCALECOMM_SHM_RING_BYTES=", ringBytes, ": ", std::strerror(reserved),
         ". Free or enlarge /dev/shm (docker run --shm-size), lower SCALECOMM_SHM_RING_BYTES, or use "
         "SCALECOMM_TRANSPORT=tcp.");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    fail(ErrorKind::Io, "scalecomm shm: cannot map ", name, ": ", std::strerror(errno));
  }
  std::shared_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  seg->base_ = base;
  seg->bytes_ = bytes;
  seg->owner_ = true;
  auto* hdr = static_cast<SegmentHeader*>(base);
  hdr->ownerRank = ownerRank;
  hdr->ownerPid = getpid();
  hdr->pidNamespace = pidNamespaceId();
  new (&hdr->heartbeat) std::atomic<uint64_t>(1);
  new (&hdr->doorbell) std::atomic<uint32_t>(0);
  new (&hdr->sleepers) std::atomic<uint32_t>(0);
  new (&hdr->proved) std::atomic<uint32_t>(0);
  hdr->worldSize = worldSize;
  hdr->ringBytes = ringBytes;
  hdr->windowBytes = windowBytes;
  if (windowBytes > 0) new (static_cast<uint8_t*>(base) + windowOffset(worldSize, ringBytes)) WindowControl{{0}};
  for (int s = 0; s < worldSize; ++s) {
    auto* ctl = reinterpret_cast<RingControl*>(static_cast<uint8_t*>(base) + sizeof(SegmentHeader) +
                                               static_cast<size_t>(s) * slotBytes(ringBytes));
    SpscRing::initialize(ctl);
  }
  std::atomic_thread_fence(std::memory_order_release);
  hdr->magic = kShmMagic;
  return seg;
}

std::shared_ptr<ShmSegment> ShmSegment::open(const std::string& name, int expectOwner, int worldSize) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    fail(ErrorKind::Io, "scalecomm shm: cannot open rank ", expectOwner, "'s segment ", name, ": ",
         std::strerror(errno),
         ". Ranks that look like the same host must share /dev/shm; set "
         "SCALECOMM_TRANSPORT=tcp (or SCALECOMM_HOSTNAME per host) if they do not.");
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
    const int err = errno;
    ::close(fd);
    fail(ErrorKind::Io, "scalecomm shm: rank ", expectOwner, "'s segment ", name, " is refused: ",
         st.st_uid != geteuid()
             ? strCat("it is owned by uid ", st.st_uid, ", not by this process's user (uid ", geteuid(), ")")
         : (st.st_mode & 07777) != 0600 ? strCat("its mode is 0", std::oct, (st.st_mode & 07777), ", not 0600")
                                        : strCat("fstat failed: ", std::strerror(err)),
         ". scalecomm maps only its own user's private segments: another user's process may be posing as rank ",
         expectOwner,
         " through the store, or the ranks run as different users (then use SCALECOMM_TRANSPORT=tcp with "
         "SCALECOMM_SECRET).");
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* base =
      bytes >= sizeof(SegmentHeader) ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (base == MAP_FAILED) fail(ErrorKind::Io, "scalecomm shm: cannot map rank ", expectOwner, "'s segment ", name);
  std::shared_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = name;
  seg->base_ = base;
  seg->bytes_ = bytes;
  auto* hdr = static_cast<SegmentHeader*>(base);
  if (hdr->magic != kShmMagic || hdr->ownerRank != expectOwner || hdr->worldSize != worldSize ||
      bytes != segmentBytes(worldSize, hdr->ringBytes, hdr->windowBytes)) {
    fail(ErrorKind::Io, "scalecomm shm: segment ", name, " does not belong to rank ", expectOwner, " of a group of ",
         worldSize, " (stale or foreign segment)");
  }
  return seg;
}

namespace {

Digest segmentProof(const std::string& key, const std::string& name, const SegmentHeader& h) {
  const std::string what =
      strCat("scalecomm-shm-owner ", name, " rank ", h.ownerRank, " pid ", h.ownerPid, " of ", h.worldSize);
  return hmacSha256(key, what.data(), what.size());
}

}  // namespace

void ShmSegment::proveKey(const std::string& key) {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  SC_CHECK(owner_);
  const Digest d = segmentProof(key, name_, *hdr);
  std::memcpy(hdr->proof, d.data(), d.size());
  hdr->proved.store(1, std::memory_order_release);
}

bool ShmSegment::provesKey(const std::string& key) const {
  const auto* hdr = static_cast<const SegmentHeader*>(base_);
  if (hdr->proved.load(std::memory_order_acquire) != 1) return false;
  Digest got;
  std::memcpy(got.data(), hdr->proof, got.size());
  return macEqual(got, segmentProof(key, name_, *hdr));
}

ShmSegment::~ShmSegment() {
  if (owner_) unlinkName();
  if (base_ != nullptr) munmap(base_, bytes_);
}

void ShmSegment::unlinkName() {
  if (!unlinked_) {
    shm_unlink(name_.c_str());  // ENOENT is fine: a peer or the owner got there first
    unlinked_ = true;
  }
}

SpscRing ShmSegment::ring(int sender) {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  SC_CHECK(sender >= 0 && sender < hdr->worldSize);
  auto* slot =
      static_cast<uint8_t*>(base_) + sizeof(SegmentHeader) + static_cast<size_t>(sender) * slotBytes(hdr->ringBytes);
  return SpscRing(reinterpret_cast<RingControl*>(slot), slot + sizeof(RingControl), hdr->ringBytes);
}

// The doorbell. The futex is process-shared (no FUTEX_PRIVATE_FLAG): the
// word lives in a MAP_SHARED segment that the peers map at other addresses.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

uint32_t ShmSegment::key() const {
  return static_cast<SegmentHeader*>(base_)->doorbell.load(std::memory_order_acquire);
}

void ShmSegment::arm() { static_cast<SegmentHeader*>(base_)->sleepers.fetch_add(1, std::memory_order_seq_cst); }

void ShmSegment::disarm() { static_cast<SegmentHeader*>(base_)->sleepers.fetch_sub(1, std::memory_order_relaxed); }

bool ShmSegment::sleep(uint32_t key, int64_t timeoutUs) {
  auto* word = &static_cast<SegmentHeader*>(base_)->doorbell;
  timespec ts{static_cast<time_t>(timeoutUs / 1000000), static_cast<long>((timeoutUs % 1000000) * 1000)};
  const long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, key, &ts, nullptr, 0);
  return r == 0 || errno == EAGAIN;  // woken, or the word had moved already; else timed out or interrupted
}

void ShmSegment::ring() {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with arm(): publish, then look for sleepers
  if (hdr->sleepers.load(std::memory_order_relaxed) == 0) return;
  hdr->doorbell.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&hdr->doorbell), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

int ShmSegment::ownerPid() const { return static_cast<SegmentHeader*>(base_)->ownerPid; }
uint64_t ShmSegment::ownerPidNamespace() const { return static_cast<SegmentHeader*>(base_)->pidNamespace; }
void ShmSegment::beat() { static_cast<SegmentHeader*>(base_)->heartbeat.fetch_add(1, std::memory_order_relaxed); }
uint64_t ShmSegment::heartbeat() const {
  return static_cast<SegmentHeader*>(base_)->heartbeat.load(std::memory_order_relaxed);
}
int ShmSegment::ownerRank() const { return static_cast<SegmentHeader*>(base_)->ownerRank; }
uint64_t ShmSegment::windowBytes() const { return static_cast<SegmentHeader*>(base_)->windowBytes; }

std::atomic<uint64_t>& ShmSegment::windowPosted() {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  SC_CHECK(hdr->windowBytes > 0);
  return reinterpret_cast<WindowControl*>(static_cast<uint8_t*>(base_) + windowOffset(hdr->worldSize, hdr->ringBytes))
      ->posted;
}

uint8_t* ShmSegment::windowHeader(int k) {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  SC_CHECK(hdr->windowBytes > 0 && (k == 0 || k == 1));
  return static_cast<uint8_t*>(base_) + windowOffset(hdr->worldSize, hdr->ringBytes) + sizeof(WindowControl) +
         static_cast<size_t>(k) * kWindowHeaderBytes;
}

uint8_t* ShmSegment::windowLog() {
  auto* hdr = static_cast<SegmentHeader*>(base_);
  SC_CHECK(hdr->windowBytes > 0);
  return static_cast<uint8_t*>(base_) + windowOffset(hdr->worldSize, hdr->ringBytes) + windowLogOffset();
}

ShmWindows::ShmWindows(int rank, std::vector<std::shared_ptr<ShmSegment>> segments)
    : rank_(rank), segments_(std::move(segments)), windowBytes_(0) {
  SC_CHECK(rank_ >= 0 && rank_ < size());
  windowBytes_ = static_cast<int64_t>(segments_[rank_]->windowBytes());
  for (const auto& s : segments_) {
    SC_CHECK(s && static_cast<int64_t>(s->windowBytes()) == windowBytes_ && windowBytes_ > 0);
    headers_.push_back({s->windowHeader(0), s->windowHeader(1)});
    logs_.push_back(s->windowLog());
  }
}

namespace {
int64_t cacheLines(int64_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

int64_t ShmWindows::place(int64_t bytes) const {
  SC_CHECK(bytes >= 0 && bytes <= windowBytes_);
  return end_ + cacheLines(bytes) <= kWindowLogWindows * windowBytes_ ? end_ : 0;
}

uint64_t ShmWindows::nextCall(int64_t bytes) {
  at_ = place(bytes);
  end_ = at_ + cacheLines(bytes);
  return ++calls_;
}

void ShmWindows::post(uint64_t call) {
  segments_[rank_]->windowPosted().store(call, std::memory_order_release);
  for (int r = 0; r < size(); ++r)
    if (r != rank_) segments_[r]->ring();
}

ShmLink::ShmLink(int self, int peer, std::shared_ptr<ShmSegment> myInbox, std::shared_ptr<ShmSegment> peerInbox)
    : Link(peer),
      self_(self),
      peerPid_(peerInbox->ownerPid()),
      peerSeesPid_(peerInbox->ownerPidNamespace() == pidNamespaceId() && pidNamespaceId() != 0),
      myInbox_(std::move(myInbox)),
      peerInbox_(std::move(peerInbox)) {
  in_ = myInbox_->ring(peer);
  out_ = peerInbox_->ring(self);
  lastBeat_ = peerInbox_->heartbeat();
  lastBeatChangeNs_ = nowNs();
}

void ShmLink::heartbeat() { myInbox_->beat(); }

ShmLink::~ShmLink() { close(); }

void ShmLink::throwClosed(const SpscRing& ring) {
  fail(ErrorKind::Io, "rank ", ring.closedBy(), " closed its shared-memory link to rank ",
       ring.closedBy() == static_cast<uint32_t>(self_) ? peer_ : self_,
       " (it aborted, hit an error or was destroyed; see that rank's error for the cause)");
}

size_t ShmLink::trySend(const void* data, size_t bytes) {
  if (out_.closed()) throwClosed(out_);
  size_t n = out_.write(data, bytes);
  if (n == 0) {
    sendNeed_ = out_.minChunk(bytes);
    checkPeer();
  } else {
    sendNeed_ = 0;
    peerInbox_->ring();
  }
  return n;
}

size_t ShmLink::tryRecv(RecvConsumer& consumer) {
  auto [ptr, avail] = in_.readable();
  if (avail == 0) {
    checkPeer();
    return 0;
  }
  size_t used = consumer.consume(ptr, avail);
  if (used > 0) {
    in_.consume(used);
    peerInbox_->ring();  // the peer may wait for the room
  }
  return used;
}

bool ShmLink::ready() const {
  // A closed link is not "ready": close() rings the doorbell, and a waiter
  // that does not treat a finished peer as an error (receive from any source)
  // must sleep, not spin, while it waits for the others.
  return !in_.empty() || (sendNeed_ > 0 && out_.space() >= sendNeed_);
}

size_t ShmLink::peek(void* out, size_t n) { return in_.peek(out, n); }

void ShmLink::checkPeer() {
  if (out_.closed()) throwClosed(out_);
  if (in_.closed() && in_.empty()) throwClosed(in_);
  uint64_t now = nowNs();
  if (now - lastAliveCheckNs_ <= 5'000'000) return;  // every 5 ms
  lastAliveCheckNs_ = now;
  myInbox_->beat();  // a waiting rank beats too (the group's watchdog starts after the probe)
  if (peerSeesPid_) {
    if (!processAlive(peerPid_)) {
      fail(ErrorKind::Io, "rank ", peer_, " (pid ", peerPid_, ") died: its process exited or was killed");
    }
    return;
  }
  // Another PID namespace (a container sharing the host's IPC): its pid means
  // nothing here, so the peer's liveness is its heartbeat word.
  const uint64_t beat = peerInbox_->heartbeat();
  if (beat != lastBeat_) {
    lastBeat_ = beat;
    lastBeatChangeNs_ = now;
  } else if (now - lastBeatChangeNs_ > kShmHeartbeatStaleNs) {
    fail(ErrorKind::Io, "rank ", peer_, " (pid ", peerPid_, " in another PID namespace) died: its heartbeat stopped ",
         (now - lastBeatChangeNs_) / 1'000'000, " ms ago (its process exited, was killed or is stopped)");
  }
}

void ShmLink::close() {
  if (!out_.closed()) out_.close(self_);
  if (!in_.closed()) in_.close(self_);
  peerInbox_->ring();
  myInbox_->ring();  // a thread of ours asleep on this link (an abort from another thread)
}

}  // namespace scalecomm
