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
// - MPI reports no peer death: checkPeer() only sees close(); the caller's
//   deadline bounds every wait. close() marks the link closed (any thread);
//   the destructor cancels pre-posted receives and abandons unfinished sends
//   (their buffers are leaked on purpose: MPI may still read them).
// Thread safety: as Link; every MPI call holds MpiCallGuard.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "transport/link.h"
#include "transport/mpi_runtime.h"

namespace scalecomm {

class MpiLink : public Link {
 public:
  MpiLink(std::shared_ptr<MpiGroup> group, int self, int peer, size_t chunkBytes = 1 << 20, int depth = 4);
  ~MpiLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  size_t peek(void* out, size_t n) override;
  void checkPeer() override;
  void close() override;
  const char* kind() const override { return "mpi"; }

  struct State;  // MPI requests and buffers (mpi_link.cc)

 private:
  void checkOpen() const;
  std::shared_ptr<MpiGroup> group_;
  int self_;
  std::unique_ptr<State> s_;
  std::atomic<bool> closed_{false};
};

}  // namespace scalecomm
