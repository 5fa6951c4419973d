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
// - A ShmLink detects a dead peer by its pid (gone or zombie) and a closed
//   peer by the ring's closed flag; both raise Error(Io) naming the peer.
// Thread safety: as Link.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/link.h"
#include "transport/spsc_ring.h"

namespace scalecomm {

class ShmSegment {
 public:
  // Creates and maps a fresh inbox for `worldSize` senders; the caller's rank owns it.
  static std::shared_ptr<ShmSegment> create(int ownerRank, int worldSize, uint64_t ringBytes);
  // Maps a peer's inbox by name; validates its header.
  static std::shared_ptr<ShmSegment> open(const std::string& name, int expectOwner, int worldSize);
  ~ShmSegment();

  const std::string& name() const { return name_; }
  void unlinkName();  // idempotent
  SpscRing ring(int sender);
  int ownerPid() const;
  int ownerRank() const;

  // Removes /dev/shm/scalecomm-<pid>-* names whose process no longer exists.
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

class ShmLink : public Link {
 public:
  ShmLink(int self, int peer, std::shared_ptr<ShmSegment> myInbox, std::shared_ptr<ShmSegment> peerInbox);
  ~ShmLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  size_t peek(void* out, size_t n) override;
  void checkPeer() override;
  void close() override;
  const char* kind() const override { return "shm"; }

 private:
  void throwClosed(const SpscRing& ring);
  int self_;
  int peerPid_;
  std::shared_ptr<ShmSegment> myInbox_, peerInbox_;
  SpscRing in_, out_;
  uint64_t lastAliveCheckNs_ = 0;
};

}  // namespace scalecomm
