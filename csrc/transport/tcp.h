// scalecomm transport: TCP links between any two hosts.
//
// Contract:
// - TcpListener binds an ephemeral port on the advertised address before
//   rendezvous; the address is published through the store. Every connection
//   is authenticated both ways against the group's key (a secret the store
//   hands every rank, see comm/transports.h): the acceptor sends a fresh
//   random challenge, the connector answers with its rank, the rank it means
//   to reach and HMAC-SHA-256(key, challenge, ranks), and the acceptor proves
//   the key back the same way. A connection that sends anything else, or
//   nothing within kHandshakeMs, is closed and logged; all handshakes progress
//   together, so a stranger never delays a real peer.
// - A TcpLink owns one connected, nonblocking socket (TCP_NODELAY). It stages
//   received bytes in its own buffer, so consumers always see contiguous spans.
// - EOF, reset or any socket error raises Error(Io) naming the peer. close() is
//   shutdown(SHUT_RDWR): safe from any thread, wakes a peer blocked on us.
// Thread safety: as Link. Every blocking step (connect, accept, hello) has a deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/deadline.h"
#include "transport/link.h"

namespace scalecomm {

constexpr int64_t kHandshakeMs = 10000;  // longest a connection may take to prove itself

class TcpListener {
 public:
  // Binds host:0 (host "" binds all interfaces) and listens.
  explicit TcpListener(const std::string& bindHost);
  ~TcpListener();
  int port() const { return port_; }
  // The next connection that proves `key` and names selfRank as its target:
  // its fd (handshake done) and the peer's rank in [0, size).
  std::pair<int, int> acceptPeer(const std::string& key, int selfRank, int size, const Deadline& deadline);
  // Connections closed for failing the handshake (for tests and logs).
  int rejected() const { return rejected_; }

 private:
  struct Pending;
  int fd_ = -1;
  int port_ = 0;
  int rejected_ = 0;
  std::vector<std::unique_ptr<Pending>> pending_;
};

// Connects to host:port and proves the key (see above); retries until the deadline.
int tcpConnectPeer(const std::string& host, int port, const std::string& key, int selfRank, int peerRank,
                   const Deadline& deadline);

// The IPv4 address this host should advertise: SCALECOMM_SOCKET_IFNAME's address,
// else the local end of the route to MASTER_ADDR, else the hostname's address,
// else 127.0.0.1.
std::string localAdvertiseAddress();

class TcpLink : public Link {
 public:
  TcpLink(int self, int peer, int fd);
  ~TcpLink() override;
  size_t trySend(const void* data, size_t bytes) override;
  size_t tryRecv(RecvConsumer& consumer) override;
  void checkPeer() override;
  void close() override;
  int waitFd() const override { return fd_; }
  bool sendBlocked() const override { return sendBlocked_; }
  const char* kind() const override { return "tcp"; }

 private:
  [[noreturn]] void throwSocketError(const char* what, int err);
  int self_;
  int fd_;
  std::vector<uint8_t> buf_;
  size_t rpos_ = 0, wpos_ = 0;
  bool sendBlocked_ = false;  // the sending thread's own state (see sendBlocked())
  std::atomic<bool> closed_{false};
};

}  // namespace scalecomm
