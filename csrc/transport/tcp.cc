#include "transport/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "core/params.h"

namespace scalecomm {

namespace {

constexpr uint64_t kHelloMagic = 0x53434f4d4d544350ULL;  // "SCOMMTCP"

struct Hello {
  uint64_t magic;
  uint64_t groupKey;
  int32_t rank;
  int32_t pad;
};

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Blocking-with-deadline exact I/O on a nonblocking fd (used during the handshake only).
bool ioExact(int fd, void* buf, size_t bytes, bool writing, const Deadline& deadline) {
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = writing ? ::send(fd, static_cast<uint8_t*>(buf) + done, bytes - done, MSG_NOSIGNAL)
                        : ::recv(fd, static_cast<uint8_t*>(buf) + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !writing) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (deadline.expired()) return false;
    pollfd p{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    poll(&p, 1, static_cast<int>(std::min<int64_t>(deadline.remainingMs(), 100)));
  }
  return true;
}

}  // namespace

TcpListener::TcpListener(const std::string& bindHost) {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail(ErrorKind::Io, "scalecomm tcp: socket(): ", std::strerror(errno));
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!bindHost.empty() && inet_pton(AF_INET, bindHost.c_str(), &addr.sin_addr) != 1) {
    fail(ErrorKind::InvalidArgument, "scalecomm tcp: cannot bind to '", bindHost, "': not an IPv4 address");
  }
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 128) != 0) {
    int err = errno;
    ::close(fd_);
    fail(ErrorKind::Io, "scalecomm tcp: cannot listen on ", bindHost.empty() ? "0.0.0.0" : bindHost, ": ",
         std::strerror(err));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  setNonBlocking(fd_, true);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::pair<int, int> TcpListener::acceptPeer(uint64_t groupKey, const Deadline& deadline) {
  for (;;) {
    int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Hello h{};
      if (ioExact(fd, &h, sizeof(h), false, Deadline::after(std::chrono::milliseconds(5000))) &&
          h.magic == kHelloMagic && h.groupKey == groupKey) {
        Hello ack{kHelloMagic, groupKey, h.rank, 0};
        if (ioExact(fd, &ack, sizeof(ack), true, deadline)) {
          setNoDelay(fd);
          return {fd, h.rank};
        }
      }
      SC_LOG(Warn, "tcp: ignored a connection that did not send a valid scalecomm hello for this group");
      ::close(fd);
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      fail(ErrorKind::Io, "scalecomm tcp: accept(): ", std::strerror(errno));
    }
    if (deadline.expired()) fail(ErrorKind::Timeout, "scalecomm tcp: timed out waiting for peers to connect");
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min<int64_t>(deadline.remainingMs(), 100)));
  }
}

int tcpConnectPeer(const std::string& host, int port, uint64_t groupKey, int selfRank, int peerRank,
                   const Deadline& deadline) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    fail(ErrorKind::Io, "scalecomm tcp: rank ", peerRank, " advertised a bad address '", host, "'");
  }
  int lastErr = 0;
  int backoffMs = 1;
  while (!deadline.expired()) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      setNonBlocking(fd, true);
      Hello h{kHelloMagic, groupKey, selfRank, 0};
      Hello ack{};
      if (ioExact(fd, &h, sizeof(h), true, deadline) && ioExact(fd, &ack, sizeof(ack), false, deadline) &&
          ack.magic == kHelloMagic && ack.rank == selfRank) {
        setNoDelay(fd);
        return fd;
      }
      lastErr = ECONNRESET;
    } else {
      lastErr = errno;
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoffMs));
    backoffMs = std::min(backoffMs * 2, 100);
  }
  fail(ErrorKind::Timeout, "scalecomm tcp: rank ", selfRank, " could not connect to rank ", peerRank, " at ", host, ":",
       port, " before the timeout (last error: ", std::strerror(lastErr),
       "); check that the address is reachable or set SCALECOMM_SOCKET_IFNAME");
}

std::string localAdvertiseAddress() {
  std::string ifname = paramString("SCALECOMM_SOCKET_IFNAME");
  if (!ifname.empty()) {
    ifaddrs* ifs = nullptr;
    std::string found;
    if (getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && ifname == i->ifa_name) {
          char buf[INET_ADDRSTRLEN];
          inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
          found = buf;
          break;
        }
      }
      freeifaddrs(ifs);
    }
    if (found.empty()) {
      fail(ErrorKind::InvalidArgument, "scalecomm: SCALECOMM_SOCKET_IFNAME=", ifname,
           " names no interface with an IPv4 address on this host");
    }
    return found;
  }
  const char* master = std::getenv("MASTER_ADDR");
  if (master != nullptr && master[0] != '\0') {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(master, "9", &hints, &res) == 0 && res != nullptr) {
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      std::string out;
      if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // UDP connect sends nothing
        sockaddr_in local{};
        socklen_t len = sizeof(local);
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
          char buf[INET_ADDRSTRLEN];
          inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
          out = buf;
        }
      }
      if (fd >= 0) ::close(fd);
      freeaddrinfo(res);
      if (!out.empty() && out != "0.0.0.0") return out;
    }
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &res) == 0 && res != nullptr) {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
    freeaddrinfo(res);
    return buf;
  }
  return "127.0.0.1";
}

TcpLink::TcpLink(int self, int peer, int fd) : Link(peer), self_(self), fd_(fd), buf_(1 << 20) {}

TcpLink::~TcpLink() {
  close();
  ::close(fd_);
}

void TcpLink::throwSocketError(const char* what, int err) {
  if (closed_)
    fail(ErrorKind::Io, "the tcp link from rank ", self_, " to rank ", peer_,
         " was closed locally: this rank aborted or shut down the group");
  if (err == 0) {
    fail(ErrorKind::Io, "rank ", peer_, " closed its tcp connection to rank ", self_,
         " (it exited, crashed, or aborted after an error; see that rank's error for the cause)");
  }
  fail(ErrorKind::Io, "tcp ", what, " between rank ", self_, " and rank ", peer_, " failed: ", std::strerror(err),
       " (the peer died or the network failed)");
}

size_t TcpLink::trySend(const void* data, size_t bytes) {
  ssize_t n = ::send(fd_, data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) {
    sendBlocked_ = static_cast<size_t>(n) < bytes;
    return static_cast<size_t>(n);
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    sendBlocked_ = true;
    return 0;
  }
  throwSocketError("send", errno);
}

size_t TcpLink::tryRecv(RecvConsumer& consumer) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (wpos_ > rpos_) {
      size_t used = consumer.consume(buf_.data() + rpos_, wpos_ - rpos_);
      if (used > 0) {
        rpos_ += used;
        if (rpos_ == wpos_) rpos_ = wpos_ = 0;
        return used;
      }
    }
    // Need more bytes: compact, then read what the socket has.
    if (rpos_ > 0) {
      std::memmove(buf_.data(), buf_.data() + rpos_, wpos_ - rpos_);
      wpos_ -= rpos_;
      rpos_ = 0;
    }
    if (wpos_ == buf_.size()) return 0;  // staging full and the consumer took nothing (a peek)
    ssize_t n = ::recv(fd_, buf_.data() + wpos_, buf_.size() - wpos_, MSG_DONTWAIT);
    if (n > 0) {
      wpos_ += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throwSocketError("recv", 0);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    throwSocketError("recv", errno);
  }
  return 0;
}

void TcpLink::checkPeer() {
  if (closed_)
    fail(ErrorKind::Io, "the tcp link from rank ", self_, " to rank ", peer_,
         " was closed locally: this rank aborted or shut down the group");
}

void TcpLink::close() {
  if (!closed_) {
    closed_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }
}

}  // namespace scalecomm
