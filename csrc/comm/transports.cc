#include "comm/transports.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"
#include "transport/mpi_link.h"
#include "transport/shm.h"
#include "transport/tcp.h"

namespace scalecomm {

std::string Rendezvous::field(int r, const std::string& k) const {
  auto it = infos[r].find(k);
  return it == infos[r].end() ? std::string() : it->second;
}

namespace {

// Same host (identity from the rendezvous) and both ends offer a segment.
class ShmTransport : public Transport {
 public:
  void publish(Rendezvous& rv, std::map<std::string, std::string>& info) override {
    inbox_ = ShmSegment::create(rv.rank, rv.size, rv.opts.shmRingBytes, rv.opts.shmWindowBytes);
    info["shm"] = inbox_->name();
    segments_.assign(rv.size, nullptr);
    segments_[rv.rank] = inbox_;
  }
  std::string whyNot(const Rendezvous& rv, int peer) const override {
    if (!rv.sameHost(peer)) {
      return strCat("rank ", peer, " is on another host ('", rv.field(peer, "host"), "' vs '",
                    rv.field(rv.rank, "host"), "')");
    }
    if (rv.field(peer, "shm").empty() || rv.field(rv.rank, "shm").empty()) return "shm is off on one end";
    return "";
  }
  std::unique_ptr<Link> connect(Rendezvous& rv, int peer) override {
    if (!proved_) {  // before this rank says it is ready: every peer checks it in finish()
      inbox_->proveKey(rv.key);
      proved_ = true;
    }
    auto peerInbox = ShmSegment::open(rv.field(peer, "shm"), peer, rv.size);
    segments_[peer] = peerInbox;
    return std::make_unique<ShmLink>(rv.rank, peer, inbox_, peerInbox);
  }
  // Windows when every peer is linked by shm with the same window size: the
  // same answer on every rank (same host is transitive; sizes are in the
  // segments every rank maps).
  // Every peer linked by shm proved the group's key in its segment before
  // it said it was ready (as every tcp peer does in its handshake).
  void finish(Rendezvous& rv) override {
    inbox_->unlinkName();
    for (int q = 0; q < rv.size; ++q) {
      if (q == rv.rank || !segments_[q] || segments_[q]->provesKey(rv.key)) continue;
      fail(ErrorKind::Io, "scalecomm shm (rank ", rv.rank, "): rank ", q, "'s segment ", segments_[q]->name(),
           " does not prove the group's key: a process that is not rank ", q,
           " of this group (it does not know SCALECOMM_SECRET, or joined another generation) wrote rank ", q,
           "'s address into the store; the group is not formed. Check who can reach the store, and set the same "
           "SCALECOMM_SECRET on every rank.");
    }
    bool all = inbox_->windowBytes() > 0;
    for (const auto& s : segments_) all = all && s && s->windowBytes() == inbox_->windowBytes();
    if (all) rv.windows = std::make_shared<ShmWindows>(rv.rank, segments_);
  }

 private:
  std::shared_ptr<ShmSegment> inbox_;
  std::vector<std::shared_ptr<ShmSegment>> segments_;  // by rank: those linked by shm
  bool proved_ = false;                                // our proof is in our segment
};

// Every rank of the group in one MPI job (the rendezvous made the communicator).
class MpiTransport : public Transport {
 public:
  void publish(Rendezvous&, std::map<std::string, std::string>&) override {}
  std::string whyNot(const Rendezvous& rv, int) const override {
    if (rv.mpiGroup) return "";
    return mpiCompiledIn() ? "not every rank of the group runs in one MPI job (start all with one mpirun)"
                           : "this build has no MPI (install libopenmpi-dev and rebuild)";
  }
  std::unique_ptr<Link> connect(Rendezvous& rv, int peer) override {
    return std::make_unique<MpiLink>(rv.mpiGroup, rv.rank, peer, MpiLink::streamTagFor(rv.nonce),
                                     rv.opts.mpiChunkBytes);
  }
};

// Sockets per pair: the smaller of the two ranks' tcp_streams. The higher rank
// connects each stream, the lower accepts them.
class TcpTransport : public Transport {
 public:
  ~TcpTransport() override {
    for (auto& [who, fds] : accepted_)
      for (int fd : fds)
        if (fd >= 0) ::close(fd);
  }
  void publish(Rendezvous& rv, std::map<std::string, std::string>& info) override {
    const std::string addr = localAdvertiseAddress();
    listener_ = std::make_unique<TcpListener>(addr);  // the advertised interface only
    info["addr"] = addr;
    info["port"] = std::to_string(listener_->port());
    info["tcp_streams"] = std::to_string(std::clamp(rv.opts.tcpStreams, 1, kMaxTcpStreams));
  }
  std::string whyNot(const Rendezvous& rv, int peer) const override {
    if (rv.field(peer, "addr").empty() || rv.field(rv.rank, "addr").empty()) return "tcp is off on one end";
    return "";
  }
  std::unique_ptr<Link> connect(Rendezvous& rv, int peer) override {
    const size_t streams = streamsWith(rv, peer);
    const bool quickAcks = !rv.sameHost(peer);
    std::vector<int> fds;
    if (peer < rv.rank) {
      for (size_t i = 0; i < streams; ++i) {
        fds.push_back(tcpConnectPeer(rv.field(peer, "addr"), std::stoi(rv.field(peer, "port")), rv.key, rv.rank, peer,
                                     rv.deadline, static_cast<int>(i)));
      }
      return std::make_unique<TcpLink>(rv.rank, peer, std::move(fds), quickAcks);
    }
    // Higher peers connect in their own rank order, not ours: keep early ones.
    auto complete = [&] {
      auto it = accepted_.find(peer);
      return it != accepted_.end() && std::count(it->second.begin(), it->second.end(), -1) == 0;
    };
    while (!complete()) {
      const AcceptedPeer a = listener_->acceptPeer(rv.key, rv.rank, rv.size, rv.deadline);
      std::vector<int>* slots = nullptr;
      if (a.rank > rv.rank && a.rank < rv.size) {
        auto [it, fresh] = accepted_.try_emplace(a.rank, streamsWith(rv, a.rank), -1);
        slots = &it->second;
      }
      if (slots == nullptr || static_cast<size_t>(a.stream) >= slots->size() || (*slots)[a.stream] >= 0) {
        ::close(a.fd);
        fail(ErrorKind::Io, "scalecomm rendezvous (rank ", rv.rank, "): unexpected connection from rank ", a.rank,
             " (stream ", a.stream, ")");
      }
      (*slots)[a.stream] = a.fd;
    }
    fds = std::move(accepted_[peer]);
    accepted_.erase(peer);
    return std::make_unique<TcpLink>(rv.rank, peer, std::move(fds), quickAcks);
  }
  void finish(Rendezvous& rv) override {
    if (!accepted_.empty()) {
      fail(ErrorKind::Io, "scalecomm rendezvous (rank ", rv.rank, "): rank ", accepted_.begin()->first,
           " connected over tcp but this rank chose another transport for it");
    }
    listener_.reset();
  }

 private:
  static size_t streamsWith(const Rendezvous& rv, int peer) {
    auto streams = [&](int r) {
      const std::string v = rv.field(r, "tcp_streams");
      return v.empty() ? 1 : std::clamp(std::stoi(v), 1, kMaxTcpStreams);
    };
    return static_cast<size_t>(std::min(streams(rv.rank), streams(peer)));
  }
  std::unique_ptr<TcpListener> listener_;
  std::map<int, std::vector<int>> accepted_;  // rank -> its streams' fds (-1: not yet), accepted before its turn
};

template <typename T>
std::unique_ptr<Transport> make() {
  return std::make_unique<T>();
}

}  // namespace

const std::vector<TransportEntry>& transportRegistry() {
  static const std::vector<TransportEntry> table = {
      {"shm", &make<ShmTransport>},
      {"mpi", &make<MpiTransport>},
      {"tcp", &make<TcpTransport>},
  };
  return table;
}

std::string transportNames() {
  std::string out;
  for (const auto& t : transportRegistry()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

}  // namespace scalecomm
