#include "transport/mpi_link.h"

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/deadline.h"
#include "core/error.h"

#ifdef SCALECOMM_WITH_MPI
#include "transport/mpi_detail.h"
#endif

namespace scalecomm {

#ifdef SCALECOMM_WITH_MPI

namespace {
constexpr size_t kCarryCap = 1 << 16;  // far above any header or element
}  // namespace

struct MpiLink::State {
  struct SendSlot {
    std::vector<uint8_t> buf;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  struct RecvSlot {
    std::vector<uint8_t> buf;
    MPI_Request req = MPI_REQUEST_NULL;
    bool ready = false;  // arrived; [off, count) not consumed yet
    size_t count = 0, off = 0;
  };
  MPI_Comm comm;
  int peer;
  int tag;
  size_t chunk;
  bool peerClosed = false;      // the peer's close notice is the next message
  std::vector<SendSlot> sends;  // used round-robin, in order
  size_t sendHead = 0, sendsBusy = 0;
  std::vector<RecvSlot> recvs;  // posted in order, consumed in order
  size_t recvHead = 0;
  std::vector<uint8_t> carry;

  void post(RecvSlot& s) {
    s.ready = false;
    s.count = s.off = 0;
    mpiCheck(MPI_Irecv(s.buf.data(), static_cast<int>(chunk), MPI_BYTE, peer, tag, comm, &s.req), "MPI_Irecv");
  }
  // Whether slot s's message has arrived (tests it once if not known yet).
  bool arrived(RecvSlot& s) {
    if (s.ready) return true;
    int done = 0;
    MPI_Status st;
    mpiCheck(MPI_Test(&s.req, &done, &st), "MPI_Test (receive)");
    if (!done) return false;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    s.ready = true;
    s.count = static_cast<size_t>(n);
    return true;
  }
  // The oldest unconsumed message, or null if it has not arrived or is the
  // peer's close notice (then peerClosed is set and the slot stays as it is).
  RecvSlot* head() {
    RecvSlot& s = recvs[recvHead];
    if (!arrived(s)) return nullptr;
    if (s.count == 0) {
      peerClosed = true;
      return nullptr;
    }
    return &s;
  }
  // Looks through the messages that arrived, in order, for the close notice.
  void scan() {
    for (size_t i = 0; i < recvs.size() && !peerClosed; ++i) {
      RecvSlot& s = recvs[(recvHead + i) % recvs.size()];
      if (!arrived(s)) return;  // receives match in posting order: none later has arrived
      if (s.count == 0) peerClosed = true;
    }
  }
  void advanceIfDone(RecvSlot& s) {
    if (s.off < s.count) return;
    post(s);
    recvHead = (recvHead + 1) % recvs.size();
  }
  // Moves up to n bytes of arrived messages into the carry; returns how many.
  size_t pullIntoCarry(size_t n) {
    size_t moved = 0;
    while (moved < n) {
      RecvSlot* s = head();
      if (s == nullptr) break;
      const size_t take = std::min(n - moved, s->count - s->off);
      carry.insert(carry.end(), s->buf.data() + s->off, s->buf.data() + s->off + take);
      s->off += take;
      moved += take;
      advanceIfDone(*s);
    }
    return moved;
  }
  void reapSends() {
    while (sendsBusy > 0) {
      SendSlot& s = sends[(sendHead + sends.size() - sendsBusy) % sends.size()];
      int done = 0;
      mpiCheck(MPI_Test(&s.req, &done, MPI_STATUS_IGNORE), "MPI_Test (send)");
      if (!done) return;
      --sendsBusy;
    }
  }
};

int MpiLink::streamTagFor(const std::string& nonce) {
  return 1 + static_cast<int>(std::hash<std::string>{}(nonce) % 32000);
}

MpiLink::MpiLink(std::shared_ptr<MpiGroup> group, int self, int peer, int streamTag, size_t chunkBytes, int depth)
    : Link(peer), group_(std::move(group)), self_(self), s_(std::make_unique<State>()) {
  SC_CHECK(depth >= 1 && chunkBytes >= 64 && chunkBytes <= (1u << 30) && streamTag > 0 && streamTag <= 32767);
  s_->comm = mpiComm(*group_);
  s_->peer = peer;
  s_->tag = streamTag;
  s_->chunk = chunkBytes;
  s_->sends.resize(static_cast<size_t>(depth));
  s_->recvs.resize(static_cast<size_t>(depth));
  MpiCallGuard guard;
  for (auto& r : s_->recvs) {
    r.buf.resize(chunkBytes);
    s_->post(r);
  }
  for (auto& sl : s_->sends) sl.buf.resize(chunkBytes);
}

MpiLink::~MpiLink() {
  close();
  if (!mpiActive()) {  // MPI is gone (process exit): nothing to cancel, keep the buffers
    for (auto& r : s_->recvs) new std::vector<uint8_t>(std::move(r.buf));
    for (auto& sl : s_->sends) new std::vector<uint8_t>(std::move(sl.buf));
    return;
  }
  MpiCallGuard guard;
  for (auto& r : s_->recvs) {
    if (r.req == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r.req);
    MPI_Wait(&r.req, MPI_STATUS_IGNORE);
  }
  // Give unfinished sends a moment (the peer may still be draining), then
  // abandon them; MPI may still read their buffers, so those are leaked.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  for (auto& sl : s_->sends) {
    int done = sl.req == MPI_REQUEST_NULL;
    while (!done && Clock::now() < until) MPI_Test(&sl.req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&sl.req);
      new std::vector<uint8_t>(std::move(sl.buf));
    }
  }
}

void MpiLink::checkOpen() const {
  if (closed_.load(std::memory_order_acquire)) {
    fail(ErrorKind::Io, "the mpi link from rank ", self_, " to rank ", peer_,
         " was closed locally: this rank aborted or shut down the group");
  }
}

void MpiLink::failPeerClosed() const {
  fail(ErrorKind::Io, "rank ", peer_, " closed its mpi link to rank ", self_,
       " (it aborted, failed, or shut down the group) before sending what this rank waits for");
}

void MpiLink::scanForCloseNotice() {
  s_->scan();
  if (s_->peerClosed) failPeerClosed();
}

size_t MpiLink::trySend(const void* data, size_t bytes) {
  checkOpen();
  if (bytes == 0) return 0;
  MpiCallGuard guard;
  State& s = *s_;
  s.reapSends();
  size_t sent = 0;
  while (sent < bytes && s.sendsBusy < s.sends.size()) {
    auto& slot = s.sends[s.sendHead];
    const size_t n = std::min(bytes - sent, s.chunk);
    std::memcpy(slot.buf.data(), static_cast<const uint8_t*>(data) + sent, n);
    mpiCheck(MPI_Isend(slot.buf.data(), static_cast<int>(n), MPI_BYTE, s.peer, s.tag, s.comm, &slot.req), "MPI_Isend");
    s.sendHead = (s.sendHead + 1) % s.sends.size();
    ++s.sendsBusy;
    sent += n;
  }
  if (sent == 0) scanForCloseNotice();  // stuck: has the peer gone?
  return sent;
}

size_t MpiLink::tryRecv(RecvConsumer& consumer) {
  checkOpen();
  MpiCallGuard guard;
  State& s = *s_;
  for (;;) {
    if (!s.carry.empty()) {
      const size_t used = consumer.consume(s.carry.data(), s.carry.size());
      if (used > 0) {
        s.carry.erase(s.carry.begin(), s.carry.begin() + static_cast<std::ptrdiff_t>(used));
        return used;
      }
      // The consumer needs more contiguous bytes: extend the carry by one byte,
      // so it ends exactly where the consumer's unit (header, element) ends.
      if (s.carry.size() >= kCarryCap) return 0;
      if (s.pullIntoCarry(1) == 0) {
        if (s.peerClosed) failPeerClosed();
        return 0;
      }
      continue;
    }
    State::RecvSlot* head = s.head();
    if (head == nullptr) {
      if (s.peerClosed) failPeerClosed();
      return 0;
    }
    const size_t used = consumer.consume(head->buf.data() + head->off, head->count - head->off);
    if (used > 0) {
      head->off += used;
      s.advanceIfDone(*head);
      return used;
    }
    // A unit straddles the end of this message: continue in the carry.
    if (s.pullIntoCarry(head->count - head->off) == 0) return 0;
  }
}

size_t MpiLink::peek(void* out, size_t n) {
  checkOpen();
  MpiCallGuard guard;
  State& s = *s_;
  if (s.carry.size() < n) s.pullIntoCarry(std::min(n, kCarryCap) - s.carry.size());
  const size_t copied = std::min(n, s.carry.size());
  std::memcpy(out, s.carry.data(), copied);
  return copied;
}

void MpiLink::progress() {
  if (s_->sendsBusy == 0 || closed_.load(std::memory_order_acquire) || !mpiActive()) return;
  MpiCallGuard guard;
  s_->reapSends();
}

void MpiLink::checkPeer() {
  checkOpen();
  MpiCallGuard guard;
  scanForCloseNotice();
}

void MpiLink::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel) || !mpiActive()) return;
  // The notice: empty, on the stream tag, after everything sent so far. An
  // empty message completes without the peer's help; the request is freed.
  MpiCallGuard guard;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(nullptr, 0, MPI_BYTE, s_->peer, s_->tag, s_->comm, &req) == MPI_SUCCESS) MPI_Request_free(&req);
}

#else  // !SCALECOMM_WITH_MPI

struct MpiLink::State {};

int MpiLink::streamTagFor(const std::string&) { return 1; }

MpiLink::MpiLink(std::shared_ptr<MpiGroup> group, int self, int peer, int, size_t, int)
    : Link(peer), group_(std::move(group)), self_(self) {
  fail(ErrorKind::InvalidArgument, "scalecomm was built without MPI; rebuild with an MPI installed");
}
MpiLink::~MpiLink() = default;
size_t MpiLink::trySend(const void*, size_t) { return 0; }
size_t MpiLink::tryRecv(RecvConsumer&) { return 0; }
size_t MpiLink::peek(void*, size_t) { return 0; }
void MpiLink::checkPeer() {}
void MpiLink::progress() {}
void MpiLink::close() {}
void MpiLink::checkOpen() const {}

#endif

}  // namespace scalecomm
