// scalecomm transport: TCP links between any two hosts.
//
// Contract:
// - TcpListener binds an ephemeral port on the advertised address before
//   rendezvous; the address is published through the store. Every connection
//   is authenticated both ways against the group's key (a secret the store
//   hands every rank, see comm/transports.h): the acceptor sends a fresh
//   random challenge, the connector answers with its rank, the rank it means
//   to reach, the stream index (below) and HMAC-SHA-256(key, challenge, ranks,
//   stream), and the acceptor proves the key back the same way. A connection
//   that sends anything else, or nothing within kHandshakeMs, is closed and
//   logged; all handshakes progress together, so a stranger never delays a
//   real peer.
// - A TcpLink owns one or more connected, nonblocking sockets (TCP_NODELAY) to
//   its peer: streams 0..n-1, the same n on both ends. The link's byte stream
//   is striped over them: bytes [k*stripe, (k+1)*stripe) travel on stream
//   k % n, so both ends know which socket carries every byte and a message
//   larger than a stripe moves on several sockets at once (more bytes in
//   flight on long fat links). With one stream nothing is striped. Received
//   bytes are staged in the link's own buffer, so consumers always see
//   contiguous spans.
// - A link between hosts asks for quick ACKs (TCP_QUICKACK) after every send
//   and read that moved bytes, so messages crossing each other (a pipeline's
//   activations and gradients) are not held for a delayed-ACK timeout (tens
//   of ms). A link on one host keeps delayed ACKs: cheaper over loopback.
// - EOF, reset or any socket error raises Error(Io) naming the peer. close() is
//   shutdown(SHUT_RDWR) of every stream: safe from any thread, wakes a peer
//   blocked on us.
// Thread safety: as Link. Every blocking step (connect, accept, hello) has a deadline.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "transport/link.h"

namespace scalecomm {

constexpr int64_t kHandshakeMs = 10000;         // longest a connection may take to prove itself
constexpr size_t kTcpStripeBytes = 128 * 1024;  // bytes per stream before the next (several streams)

// A connection that proved itself to a listener.
struct AcceptedPeer {
  int fd;
  int rank;    // the connecting rank, in [0, size)
  int stream;  // the stream index it asked for, in [0, kMaxTcpStreams)
};
constexpr int kMaxTcpStreams = 64;

class TcpListener {
 public:
  // Binds host:0 (host "" binds all interfaces) and listens.
  explicit TcpListener(const std::string& bindHost);
  ~TcpListener();
  int port() const { return port_; }
  // The next connection that proves `key` and names selfRank as its target
  // (handshake done).
  AcceptedPeer acceptPeer(const std::string& key, int selfRank, int size, const Deadline& deadline);
  // Connections closed for failing the handshake (for tests and logs).
  int rejected() const { return rejected_; }

 private:
  struct Pending;
  int fd_ = -1;
  int port_ = 0;
  int rejected_ = 0;
  std::vector<std::unique_ptr<Pending>> pending_;
};

// Connects to host:port as stream `stream` and proves the key (see above);
// retries until the deadline. Returns the fd.
int tcpConnectPeer(const std::string& host, int port, const std::string& key, int selfRank, int peerRank,
                   const Deadline& deadline, int stream = 0);

// The IPv4 address this host should advertise: SCALECOMM_SOCKET_IFNAME's address,
// else the local end of the route to MASTER_ADDR, else the hostname's address,
// else 127.0.0.1.
std::string localAdvertiseAddress();

class TcpLink : public Link {
 public:
  // fds: the connected streams in index order (at least one); the link owns them.
  // quickAcks: ask for quick ACKs (links between hosts, above).
  TcpLink(int self, int peer, std::vector<int> fds, bool quickAcks = false);
  ~TcpLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  void checkPeer() override;
  void close() override;
  size_t peek(void* out, size_t n) override;
  int waitFd() const override { return fds_[streamOf(received_)]; }
  int sendWaitFd() const override { return fds_[streamOf(sent_)]; }
  bool sendBlocked() const override { return sendBlocked_; }
  const char* kind() const override { return "tcp"; }
  int streams() const { return static_cast<int>(fds_.size()); }

 private:
  [[noreturn]] void throwSocketError(const char* what, int err);
  size_t streamOf(uint64_t pos) const { return fds_.size() == 1 ? 0 : (pos / kTcpStripeBytes) % fds_.size(); }
  // Bytes from pos to the end of its stripe (unbounded with one stream).
  size_t stripeRoom(uint64_t pos, size_t want) const {
    return fds_.size() == 1 ? want : std::min<size_t>(want, kTcpStripeBytes - pos % kTcpStripeBytes);
  }
  // Moves the staged bytes to the front of the staging buffer.
  void compact();
  // Reads what the streams have, in stripe order, into the staging buffer
  // (from wpos_; the caller compacts first). Notes the peer's end in peerEof_.
  size_t fill();
  int self_;
  std::vector<int> fds_;
  uint64_t sent_ = 0, received_ = 0;  // stream offsets: which stream is next each way
  std::vector<uint8_t> buf_;
  size_t rpos_ = 0, wpos_ = 0;
  bool sendBlocked_ = false;  // the sending thread's own state (see sendBlocked())
  bool peerEof_ = false;      // the peer closed its streams: only what is staged remains
  bool quickAcks_;
  std::atomic<bool> closed_{false};
};

}  // namespace scalecomm
