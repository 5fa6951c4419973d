// scalecomm transport: shared-memory links between ranks on the same host.
//
// Contract:
// - Each rank creates one inbox segment (POSIX shm, name /scalecomm-<pid>-<nonce>)
//   holding one SpscRing per possible sender. A peer writes into its slot of our
//   inbox; we write into our slot of the peer's inbox.
// - Segment names are unlinked as soon as every peer has mapped them (the
//   mapping lives on until the last process unmaps), so no name survives the
//   group; create() also removes stale names left by processes that died
//   (kill -9) before unlinking. The segment is unmapped when the last owner
//   (ShmSegment, shared by the links) is destroyed.
// - After the rings the segment holds the owner's window: a `posted` counter
//   (the number of the owner's last window call whose data is in place), two
//   call headers used by alternate calls, and a log of kWindowLogWindows x
//   windowBytes that successive calls fill in turn (see ShmWindows).
// - The segment's header holds the owner's doorbell (transport/link.h): the
//   owner's waiting thread sleeps on it (a futex on the shared word) rather
//   than polling, and a peer rings it after it writes into or consumes from a
//   ring the owner uses, after it closes a link and after it posts its window.
// - A ShmLink detects a closed peer by the ring's closed flag, and a dead
//   peer by its pid (gone or zombie) when both share a PID namespace; across
//   PID namespaces (containers sharing the host's IPC) pids mean nothing, so
//   by the peer's heartbeat word, which the owner's group advances every
//   100 ms (ShmLink::heartbeat): unchanged for kShmHeartbeatStaleNs = dead.
//   Both raise Error(Io) naming the peer. Segment names carry the creator's
//   pid and PID namespace; stale-name cleanup looks only at its own namespace.
// Thread safety: as Link; ShmWindows as documented there.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.h"
#include "transport/spsc_ring.h"

namespace scalecomm {

class ShmSegment final : public Doorbell {
 public:
  // Creates and maps a fresh inbox for `worldSize` senders plus a window for
  // calls of up to `windowBytes` (a multiple of 64; 0: no window); the caller's rank owns it.
  static std::shared_ptr<ShmSegment> create(int ownerRank, int worldSize, uint64_t ringBytes, uint64_t windowBytes);
  // The bytes create() reserves in /dev/shm for these arguments.
  static uint64_t bytesFor(int worldSize, uint64_t ringBytes, uint64_t windowBytes);
  // Maps a peer's inbox by name: only a segment owned by this process's
  // effective uid with mode 0600 (else Error(Io) naming the owner); validates its header.
  static std::shared_ptr<ShmSegment> open(const std::string& name, int expectOwner, int worldSize);
  // The owner writes its proof that it holds the group's key (an HMAC of the
  // segment's name, rank, pid and world size); a peer that mapped the segment
  // checks it (false: not written yet, or made with another key).
  void proveKey(const std::string& key);
  bool provesKey(const std::string& key) const;
  ~ShmSegment();

  uint32_t key() const override;
  void arm() override;
  void disarm() override;
  bool sleep(uint32_t key, int64_t timeoutUs) override;
  void ring() override;

  const std::string& name() const { return name_; }
  void unlinkName();  // idempotent
  SpscRing ring(int sender);
  int ownerPid() const;
  uint64_t ownerPidNamespace() const;
  void beat();  // the owner advances its heartbeat word
  uint64_t heartbeat() const;
  int ownerRank() const;
  uint64_t windowBytes() const;
  // The window's call counter, its call header k (0 or 1, kWindowHeaderBytes)
  // and its log (kWindowLogWindows x windowBytes, 64-byte aligned).
  std::atomic<uint64_t>& windowPosted();
  uint8_t* windowHeader(int k);
  uint8_t* windowLog();

  // Removes /dev/shm/scalecomm-<pid>-<pid namespace>-* names of this PID
  // namespace whose process no longer exists.
  static int removeStaleSegments();

 private:
  ShmSegment() = default;
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool unlinked_ = false;
  bool owner_ = false;  // created by this process: unlink the name on destruction
};

bool processAlive(int pid);
// This process's PID namespace (inode of /proc/self/ns/pid; 0 if unknown).
uint64_t pidNamespaceId();
// A peer in another PID namespace whose heartbeat has not moved this long is dead.
constexpr uint64_t kShmHeartbeatStaleNs = 4'000'000'000;

// A window call's header (the caller defines it; 64-byte aligned).
constexpr size_t kWindowHeaderBytes = 64;
// A window's log holds this many calls of windowBytes.
constexpr int64_t kWindowLogWindows = 4;
static_assert(kWindowLogWindows >= 3, "a wrapped call must end before the previous one begins");

// Every rank's window, when all ranks of the group share this host's memory.
// A window call (numbered 1, 2, ... per group, the same on every rank: ranks
// make the same window calls, of the same sizes, in the same order) writes
// header (call % 2) of its own window and its data, up to windowBytes, at
// the call's place in its log; then publishes `posted = call` (release); a
// rank reads a peer's header and data only after seeing its posted >= call
// (acquire). A call's data goes right after the previous call's (64-byte
// aligned) or, where it does not fit, at the log's start; every rank places
// the same sizes alike, so a call's data sits at the same offset in every
// rank's log. No trailing barrier is needed: a rank that starts call c has
// seen every peer post c-1, so none still reads call c-2 or earlier, and
// call c's data never overlaps call c-1's (the log holds at least three
// windows: a call that wraps to the start ends before the previous one
// begins). Why a log and not two alternating cells: a rank's writes into
// lines that a peer's core still caches cost about four times as much as
// into lines it has dropped (docs/algorithms.md, "Shared windows"); a log several
// times a core's private cache makes a line's next write come after the
// peer's core has evicted it, at every message size.
// Thread safety: one thread at a time (the group's executing thread).
class ShmWindows {
 public:
  ShmWindows(int rank, std::vector<std::shared_ptr<ShmSegment>> segments);
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(segments_.size()); }
  // The largest message one call carries.
  int64_t windowBytes() const { return windowBytes_; }
  // Publishes this rank's call (release) and rings every peer's doorbell.
  void post(uint64_t call);
  // Numbers the next call, which carries `bytes` (at most windowBytes), and places its data.
  uint64_t nextCall(int64_t bytes);
  std::atomic<uint64_t>& posted(int r) { return segments_[r]->windowPosted(); }
  uint8_t* header(int r, uint64_t call) const { return headers_[r][call % 2]; }
  // The current call's data in rank r's window.
  uint8_t* data(int r) const { return logs_[r] + at_; }
  // Where the next call will place `bytes` in rank r's window (free to write
  // once every peer has posted the current call).
  uint8_t* nextData(int r, int64_t bytes) const { return logs_[r] + place(bytes); }

 private:
  int64_t place(int64_t bytes) const;  // the log offset of a call of `bytes` after the current one

  int rank_;
  std::vector<std::shared_ptr<ShmSegment>> segments_;  // by rank, ours included
  std::vector<std::array<uint8_t*, 2>> headers_;       // by rank
  std::vector<uint8_t*> logs_;                         // by rank
  int64_t windowBytes_;
  uint64_t calls_ = 0;
  int64_t at_ = 0, end_ = 0;  // the current call's data: log bytes [at_, end_)
};

class ShmLink : public Link {
 public:
  ShmLink(int self, int peer, std::shared_ptr<ShmSegment> myInbox, std::shared_ptr<ShmSegment> peerInbox);
  ~ShmLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  size_t peek(void* out, size_t n) override;
  void checkPeer() override;
  void heartbeat() override;
  void close() override;
  Doorbell* doorbell() override { return myInbox_.get(); }
  bool ready() const override;
  const char* kind() const override { return "shm"; }

 private:
  void throwClosed(const SpscRing& ring);
  int self_;
  int peerPid_;
  bool peerSeesPid_;  // same PID namespace: liveness by pid, else by heartbeat
  uint64_t lastBeat_ = 0, lastBeatChangeNs_ = 0;
  std::shared_ptr<ShmSegment> myInbox_, peerInbox_;
  SpscRing in_, out_;
  uint64_t lastAliveCheckNs_ = 0;
  uint64_t sendNeed_ = 0;  // room the last trySend waited for (0: it moved bytes, or none was tried)
};

}  // namespace scalecomm
