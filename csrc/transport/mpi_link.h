// scalecomm transport: a Link over MPI point-to-point messages.
//
// Contract:
// - The byte stream to one peer is cut into messages of at most chunkBytes,
//   sent with MPI_Isend from `depth` staging buffers (trySend copies into a free
//   one and returns; a full set of buffers in flight is back-pressure) and
//   received into `depth` pre-posted MPI_Irecv buffers, consumed in order (MPI
//   keeps messages between two ranks on one communicator and tag in order).
// - A consumer that needs bytes beyond the end of one message (a header or an
//   element split across two) is offered a small contiguous carry buffer,
//   filled from the next message a byte at a time, so every span it sees is
//   contiguous and no consumer ever needs more than the carry's cap.
// - Every message travels on `streamTag`, which the group's ranks agree on per
//   creation (derived from the rendezvous nonce), so a message of an earlier
//   group whose communicator id MPI recycled does not match this one's receives.
// - close() (any thread, once) marks the link closed and sends the peer a
//   close notice: an empty message on the stream tag (data messages are never
//   empty). MPI keeps messages of one tag in order, so the notice arrives
//   after every byte sent before it: the peer fails with "rank X closed its
//   link" only when it waits for bytes that will never come (in tryRecv, or
//   in trySend/checkPeer while its sends are stuck), at once instead of at
//   its timeout. MPI reports no peer death: a peer that dies without closing
//   (SIGKILL) is seen at the caller's deadline.
// - progress() tests the sends in flight: over MPI's tcp transport a send
//   accepted by trySend moves (and its connection is made) only while the
//   sender is inside MPI, also while it waits for other peers' links.
// - The destructor cancels pre-posted receives and abandons unfinished sends
//   (their buffers are leaked on purpose: MPI may still read them).
// Thread safety: as Link; every MPI call holds MpiCallGuard.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/link.h"
#include "transport/mpi_runtime.h"

namespace scalecomm {

class MpiLink : public Link {
 public:
  MpiLink(std::shared_ptr<MpiGroup> group, int self, int peer, int streamTag, size_t chunkBytes = 1 << 20,
          int depth = 4);
  // The stream tag of a group whose rendezvous nonce is `nonce` (1..32000; MPI allows up to 32767 everywhere).
  static int streamTagFor(const std::string& nonce);
  ~MpiLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  size_t peek(void* out, size_t n) override;
  void checkPeer() override;
  bool needsProgress() const override { return true; }
  void progress() override;
  // A sleep between two MPI calls stalls the transfer for the sleep (between
  // two hosts at 10 Gbit/s: a 16 MiB ring 1.5x slower, 2-4 MiB 1.2x).
  int64_t pollMicros() const override { return 100000; }
  void close() override;
  const char* kind() const override { return "mpi"; }

  struct State;  // MPI requests and buffers (mpi_link.cc)

 private:
  void checkOpen() const;
  [[noreturn]] void failPeerClosed() const;
  void scanForCloseNotice();  // fails if the peer's close notice has arrived
  std::shared_ptr<MpiGroup> group_;
  int self_;
  std::unique_ptr<State> s_;
  std::atomic<bool> closed_{false};
};

}  // namespace scalecomm
