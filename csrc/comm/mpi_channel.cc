#include "comm/mpi_channel.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "comm/host_channel.h"
#include "core/error.h"

#ifdef SCALECOMM_WITH_MPI
#include "transport/mpi_detail.h"
#endif

namespace scalecomm {

#ifdef SCALECOMM_WITH_MPI

namespace {

constexpr int kHeaderTag = 1;
constexpr int kPayloadTag = 2;
constexpr uint64_t kMaxPiece = uint64_t{1} << 30;  // bytes per MPI message (MPI counts are int)
constexpr auto kCloseGrace = std::chrono::milliseconds(50);

class MpiChannel final : public HostChannel {
 public:
  MpiChannel(Communicator& comm, std::shared_ptr<MpiGroup> group)
      : HostChannel(comm), group_(std::move(group)), mpi_(mpiComm(*group_)) {
    for (int p = 0; p < comm.size(); ++p) {
      out_.push_back(std::make_unique<Flight>());
      in_.push_back(std::make_unique<Flight>());
    }
    closeSeen_.resize(static_cast<size_t>(comm.size()));
  }
  ~MpiChannel() override {
    if (mpiActive()) abandon();
  }

  Reducer& reducer() override { return hostReducer(); }
  void start() override {}  // a failed plan's abandon() left nothing in flight
  bool flush() override { return false; }

  Progress send(const ChannelMessage& m) override {
    Flight& f = *out_[m.peer];
    MpiCallGuard guard;
    const bool first = f.stage == Stage::Idle;
    if (first) {
      f.header = *m.header;
      post(f, &f.header, sizeof(WireHeader), m.peer, kHeaderTag, true);
      postPayload(f, m.data, static_cast<uint64_t>(f.header.payloadBytes), m.peer, true);
      f.stage = Stage::Payload;
    }
    if (!completed(f)) return first ? Progress::Partial : Progress::None;
    f.stage = Stage::Idle;
    return Progress::Done;
  }

  Progress recv(const ChannelMessage& m, const HeaderCheck& check) override {
    Flight& f = *in_[m.peer];
    MpiCallGuard guard;
    bool moved = f.stage == Stage::Idle;
    if (moved) {
      f.want = *m.header;
      post(f, &f.header, sizeof(WireHeader), m.peer, kHeaderTag, false);
      f.stage = Stage::Header;
    }
    if (f.stage == Stage::Header) {
      if (!completed(f)) return moved ? Progress::Partial : Progress::None;
      if (std::memcmp(&f.header, &f.want, sizeof(WireHeader)) != 0) {
        f.stage = Stage::Idle;
        check.mismatch(m.peer, f.header, f.want);
      }
      const auto bytes = static_cast<uint64_t>(f.want.payloadBytes);
      if (m.op != ReduceOp::None && f.scratch.size() < bytes) f.scratch.resize(bytes);
      postPayload(f, m.op == ReduceOp::None ? m.data : f.scratch.data(), bytes, m.peer, false);
      f.stage = Stage::Payload;
      moved = true;
    }
    if (!completed(f)) return moved ? Progress::Partial : Progress::None;
    f.stage = Stage::Idle;
    if (m.op != ReduceOp::None && m.count > 0) {
      reducer().reduce(m.data, f.scratch.data(), m.count, m.dtype, m.op);
      reducer().fence();  // later tasks may send this memory
    }
    return Progress::Done;
  }

  // A peer's close notice (it aborted, failed or left) fails the call only
  // while a message with that peer is in flight here, and only once the
  // notice has been known for kCloseGrace: the notice travels on the links'
  // tag, not this channel's, so the last message the peer sent before closing
  // may be delivered by the very MPI call that delivered the notice, or just
  // after it. The executor re-tests the message before every idle call.
  void idle(const std::vector<int>& peers, Clock::time_point idleSince) override {
    if (++idleCalls_ % 64 == 0) {
      for (int p : peers) {
        if (in_[p]->stage == Stage::Idle && out_[p]->stage == Stage::Idle) continue;
        try {
          comm_.link(p).checkPeer();
        } catch (const Error&) {
          if (comm_.aborted()) throw;  // this rank's own abort closed the link
          const Clock::time_point now = Clock::now();
          if (closeSeen_[p] == Clock::time_point{}) closeSeen_[p] = now;
          if (now - closeSeen_[p] >= kCloseGrace) throw;
        }
      }
    }
    comm_.idle(peers, idleSince);
  }

  void abandon() override {
    MpiCallGuard guard;
    for (auto* flights : {&in_, &out_}) {
      const bool receiving = flights == &in_;
      for (auto& f : *flights) {
        if (f->stage == Stage::Idle) continue;
        if (receiving) {
          for (MPI_Request& r : f->reqs)
            if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
        }
        // A send still in flight gets a moment to finish (its peer may be
        // draining) unless this rank aborted: then the peers are leaving or
        // gone, and its waiters must be released at once.
        const auto until = Clock::now() + std::chrono::milliseconds(comm_.aborted() ? 0 : 200);
        int done = 0;
        MPI_Testall(static_cast<int>(f->reqs.size()), f->reqs.data(), &done, MPI_STATUSES_IGNORE);
        while (!done && Clock::now() < until)
          MPI_Testall(static_cast<int>(f->reqs.size()), f->reqs.data(), &done, MPI_STATUSES_IGNORE);
        if (!done) {
          for (MPI_Request& r : f->reqs)
            if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
          noteMpiRequestAbandoned();
          (void)f.release();  // MPI may still use its header or scratch
          f = std::make_unique<Flight>();
        }
        f->stage = Stage::Idle;
        f->reqs.clear();
      }
    }
  }

 private:
  // Where a peer's message in one direction is: none in flight, a receive
  // waiting for its header, or the payload (a send's header and payload).
  enum class Stage : uint8_t { Idle, Header, Payload };
  struct Flight {
    Stage stage = Stage::Idle;
    WireHeader header{};  // sent, or received
    WireHeader want{};    // receives: expected
    std::vector<MPI_Request> reqs;
    std::vector<uint8_t> scratch;  // receive-reduce
  };

  void post(Flight& f, void* data, uint64_t bytes, int peer, int tag, bool sending) {
    f.reqs.emplace_back(MPI_REQUEST_NULL);
    const int n = static_cast<int>(bytes);
    mpiCheck(sending ? MPI_Isend(data, n, MPI_BYTE, peer, tag, mpi_, &f.reqs.back())
                     : MPI_Irecv(data, n, MPI_BYTE, peer, tag, mpi_, &f.reqs.back()),
             sending ? "MPI_Isend" : "MPI_Irecv");
  }
  void postPayload(Flight& f, uint8_t* data, uint64_t bytes, int peer, bool sending) {
    for (uint64_t off = 0; off < bytes; off += kMaxPiece)
      post(f, data + off, std::min(kMaxPiece, bytes - off), peer, kPayloadTag, sending);
  }
  // Whether every request posted on f has completed (they are then dropped).
  bool completed(Flight& f) {
    int done = 1;
    if (!f.reqs.empty()) {
      mpiCheck(MPI_Testall(static_cast<int>(f.reqs.size()), f.reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
    if (done) f.reqs.clear();
    return done != 0;
  }

  std::shared_ptr<MpiGroup> group_;
  MPI_Comm mpi_;
  std::vector<std::unique_ptr<Flight>> out_, in_;
  std::vector<Clock::time_point> closeSeen_;  // per peer: when its close notice was first seen
  uint64_t idleCalls_ = 0;
};

}  // namespace

std::unique_ptr<Channel> makeMpiChannel(Communicator& comm, std::shared_ptr<MpiGroup> group) {
  return std::make_unique<MpiChannel>(comm, std::move(group));
}

#else  // !SCALECOMM_WITH_MPI

std::unique_ptr<Channel> makeMpiChannel(Communicator&, std::shared_ptr<MpiGroup>) { return nullptr; }

#endif

}  // namespace scalecomm
