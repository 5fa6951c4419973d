// scalecomm transport: TCP links between any two hosts.
//
// Contract:
// - TcpListener binds an ephemeral port on the chosen address before rendezvous;
//   its address is published through the store; peers connect with a hello
//   (magic, group key, rank) that the acceptor checks, so a stray connection
//   cannot join the group.
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

class TcpListener {
 public:
  // Binds host:0 (host "" binds all interfaces) and listens.
  explicit TcpListener(const std::string& bindHost);
  ~TcpListener();
  int port() const { return port_; }
  // Accepts one peer and reads its hello; returns the fd and the peer's rank.
  std::pair<int, int> acceptPeer(uint64_t groupKey, const Deadline& deadline);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Connects to host:port and sends the hello; retries until the deadline.
int tcpConnectPeer(const std::string& host, int port, uint64_t groupKey, int selfRank, int peerRank,
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
