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
#include "core/hmac.h"
#include "core/logging.h"
#include "core/params.h"

namespace scalecomm {

namespace {

constexpr uint64_t kHelloMagic = 0x33434f4d4d544350ULL;  // "PCTMMOC3": handshake version 3

struct Challenge {  // acceptor -> connector
  uint64_t magic;
  uint8_t nonce[16];
};
struct Hello {  // connector -> acceptor
  uint64_t magic;
  int32_t rank;
  int32_t target;
  int32_t stream;
  int32_t pad;
  uint8_t mac[32];
};
struct Ack {  // acceptor -> connector
  uint64_t magic;
  uint8_t mac[32];
};

// HMAC(key, label | challenge | rank | target | stream): label keeps a
// hello's proof from being replayed as an ack.
Digest handshakeMac(const std::string& key, char label, const uint8_t nonce[16], int32_t rank, int32_t target,
                    int32_t stream) {
  uint8_t msg[1 + 16 + 12];
  msg[0] = static_cast<uint8_t>(label);
  std::memcpy(msg + 1, nonce, 16);
  std::memcpy(msg + 17, &rank, 4);
  std::memcpy(msg + 21, &target, 4);
  std::memcpy(msg + 25, &stream, 4);
  return hmacSha256(key, msg, sizeof(msg));
}

void setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Asks the kernel to ACK at once. Quick-ack mode is not a lasting socket
// option: the kernel leaves it on its own (sending data re-enters delayed
// ACKs), so the link asks again after every send and read that moved bytes.
void quickAck(int fd) {
#ifdef TCP_QUICKACK
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
#else
  (void)fd;
#endif
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

struct TcpListener::Pending {
  int fd;
  uint8_t nonce[16];
  Hello hello;
  size_t got = 0;
  Clock::time_point since;
};

TcpListener::~TcpListener() {
  for (auto& p : pending_) ::close(p->fd);
  if (fd_ >= 0) ::close(fd_);
}

AcceptedPeer TcpListener::acceptPeer(const std::string& key, int selfRank, int size, const Deadline& deadline) {
  auto reject = [&](size_t i, const char* why) {
    ::close(pending_[i]->fd);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    ++rejected_;
    if ((rejected_ & (rejected_ - 1)) == 0) {  // 1st, 2nd, 4th, ...: a retrying stranger cannot flood the log
      SC_LOG(Warn, "tcp (rank ", selfRank, "): closed a connection that ", why, " (", rejected_,
             " so far); only ranks of this group that know its key may connect");
    }
  };
  for (;;) {
    // New connections: send each a fresh challenge (a few bytes into an empty socket).
    for (int fd; (fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
      auto p = std::make_unique<Pending>();
      p->fd = fd;
      p->since = Clock::now();
      const std::string nonce = randomBytes(sizeof(p->nonce));
      std::memcpy(p->nonce, nonce.data(), sizeof(p->nonce));
      Challenge c{kHelloMagic, {}};
      std::memcpy(c.nonce, p->nonce, sizeof(c.nonce));
      if (::send(fd, &c, sizeof(c), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(c))) {
        ::close(fd);
        continue;
      }
      if (pending_.size() >= 256) reject(0, "was the oldest of too many unfinished handshakes");
      pending_.push_back(std::move(p));
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      fail(ErrorKind::Io, "scalecomm tcp: accept(): ", std::strerror(errno));
    }
    // Progress every handshake; the first one complete and proven wins.
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = *pending_[i];
      ssize_t n = ::recv(p.fd, reinterpret_cast<uint8_t*>(&p.hello) + p.got, sizeof(Hello) - p.got, 0);
      if (n > 0) p.got += static_cast<size_t>(n);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        reject(i, "closed before its hello");
        continue;
      }
      if (p.got < sizeof(Hello)) {
        if (Clock::now() - p.since > std::chrono::milliseconds(kHandshakeMs)) {
          reject(i, "sent no hello in time");
          continue;
        }
        ++i;
        continue;
      }
      const Hello& h = p.hello;
      Digest mac;
      std::memcpy(mac.data(), h.mac, mac.size());
      if (h.magic != kHelloMagic || h.target != selfRank || h.rank < 0 || h.rank >= size || h.stream < 0 ||
          h.stream >= kMaxTcpStreams || !macEqual(mac, handshakeMac(key, 'h', p.nonce, h.rank, h.target, h.stream))) {
        reject(i, "did not prove this group's key");
        continue;
      }
      Ack ack{kHelloMagic, {}};
      const Digest proof = handshakeMac(key, 'a', p.nonce, h.rank, h.target, h.stream);
      std::memcpy(ack.mac, proof.data(), proof.size());
      const int fd = p.fd;
      const int rank = h.rank;
      const int stream = h.stream;
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      if (::send(fd, &ack, sizeof(ack), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(ack))) {
        ::close(fd);
        continue;
      }
      setNoDelay(fd);
      return {fd, rank, stream};
    }
    if (deadline.expired()) fail(ErrorKind::Timeout, "scalecomm tcp: timed out waiting for peers to connect");
    std::vector<pollfd> fds{{fd_, POLLIN, 0}};
    for (const auto& p : pending_) fds.push_back({p->fd, POLLIN, 0});
    poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(deadline.remainingMs(), 100)));
  }
}

namespace {

// Answers the listener's challenge and checks its proof; on failure says why in `why`.
bool handshakeAsConnector(int fd, const std::string& key, int selfRank, int peerRank, int stream,
                          const Deadline& deadline, std::string& why) {
  Challenge c{};
  if (!ioExact(fd, &c, sizeof(c), false, deadline) || c.magic != kHelloMagic) {
    why = "no scalecomm handshake from the listener";
    return false;
  }
  Hello h{kHelloMagic, selfRank, peerRank, stream, 0, {}};
  const Digest proof = handshakeMac(key, 'h', c.nonce, selfRank, peerRank, stream);
  std::memcpy(h.mac, proof.data(), proof.size());
  Ack ack{};
  if (!ioExact(fd, &h, sizeof(h), true, deadline) || !ioExact(fd, &ack, sizeof(ack), false, deadline)) {
    why = "the listener closed the connection during the handshake (a different group's key?)";
    return false;
  }
  Digest mac;
  std::memcpy(mac.data(), ack.mac, mac.size());
  if (ack.magic != kHelloMagic || !macEqual(mac, handshakeMac(key, 'a', c.nonce, selfRank, peerRank, stream))) {
    why = "the listener did not prove this group's key (another process on that port?)";
    return false;
  }
  return true;
}

// Connects `fd` to `addr` by the deadline. A blocking connect() to an address
// that drops SYNs (a listener whose queue is full, a black-holed route) waits
// out the kernel's retransmissions, minutes past any timeout.
bool connectBy(int fd, const sockaddr_in& addr, const Deadline& deadline, std::string& why) {
  setNonBlocking(fd, true);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return true;
  if (errno != EINPROGRESS) {
    why = std::strerror(errno);
    return false;
  }
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(deadline.remainingMs(), 100))));
    if (ready > 0) {
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err == 0) return true;
      why = std::strerror(err);
      return false;
    }
    if (ready < 0 && errno != EINTR) {
      why = std::strerror(errno);
      return false;
    }
    if (deadline.expired()) {
      why = "the connection was not accepted in time (the listener's queue may be full)";
      return false;
    }
  }
}

}  // namespace

int tcpConnectPeer(const std::string& host, int port, const std::string& key, int selfRank, int peerRank,
                   const Deadline& deadline, int stream) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    fail(ErrorKind::Io, "scalecomm tcp: rank ", peerRank, " advertised a bad address '", host, "'");
  }
  std::string lastErr = "none";
  int backoffMs = 1;
  while (!deadline.expired()) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(ErrorKind::Io, "scalecomm tcp: socket(): ", std::strerror(errno));
    if (connectBy(fd, addr, deadline, lastErr)) {
      const Deadline handshake = Deadline::after(
          std::chrono::milliseconds(std::max<int64_t>(1, std::min<int64_t>(deadline.remainingMs(), kHandshakeMs))));
      if (handshakeAsConnector(fd, key, selfRank, peerRank, stream, handshake, lastErr)) {
        setNoDelay(fd);
        return fd;
      }
    }
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(backoffMs));
    backoffMs = std::min(backoffMs * 2, 100);
  }
  fail(ErrorKind::Timeout, "scalecomm tcp: rank ", selfRank, " could not connect to rank ", peerRank, " at ", host, ":",
       port, " before the timeout (last error: ", lastErr,
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

TcpLink::TcpLink(int self, int peer, std::vector<int> fds, bool quickAcks)
    : Link(peer), self_(self), fds_(std::move(fds)), buf_(1 << 20), quickAcks_(quickAcks) {
  SC_CHECK(!fds_.empty(), "a tcp link needs at least one socket");
}

TcpLink::~TcpLink() {
  close();
  for (int fd : fds_) ::close(fd);
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
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    const size_t want = stripeRoom(sent_, bytes - done);
    ssize_t n = ::send(fds_[streamOf(sent_)], p + done, want, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) throwSocketError("send", errno);
      n = 0;
    }
    done += static_cast<size_t>(n);
    sent_ += static_cast<uint64_t>(n);
    if (n > 0 && quickAcks_) quickAck(fds_[streamOf(sent_ - 1)]);
    if (static_cast<size_t>(n) < want) break;  // this stream is full: the next bytes must wait for it
  }
  sendBlocked_ = done < bytes;
  return done;
}

void TcpLink::compact() {
  if (rpos_ == 0) return;
  std::memmove(buf_.data(), buf_.data() + rpos_, wpos_ - rpos_);
  wpos_ -= rpos_;
  rpos_ = 0;
}

size_t TcpLink::fill() {
  size_t got = 0;
  while (wpos_ < buf_.size() && !peerEof_) {
    const size_t want = stripeRoom(received_, buf_.size() - wpos_);
    ssize_t n = ::recv(fds_[streamOf(received_)], buf_.data() + wpos_, want, MSG_DONTWAIT);
    if (n == 0) {
      peerEof_ = true;
      break;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      throwSocketError("recv", errno);
    }
    wpos_ += static_cast<size_t>(n);
    received_ += static_cast<uint64_t>(n);
    got += static_cast<size_t>(n);
    if (quickAcks_) quickAck(fds_[streamOf(received_ - 1)]);
    if (static_cast<size_t>(n) < want) break;  // this stream has nothing more now
  }
  return got;
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
    // Need more bytes: read what the streams have after what is staged.
    compact();
    if (wpos_ == buf_.size()) return 0;  // staging full and the consumer took nothing
    if (fill() == 0) {
      // The consumer took nothing of what is staged and nothing more will come.
      if (peerEof_) throwSocketError("recv", 0);
      return 0;
    }
  }
  return 0;
}

size_t TcpLink::peek(void* out, size_t n) {
  if (wpos_ - rpos_ < n) {
    compact();
    fill();
    if (peerEof_ && wpos_ < n) throwSocketError("recv", 0);  // what is staged is all there will be
  }
  const size_t k = std::min(n, wpos_ - rpos_);
  std::memcpy(out, buf_.data() + rpos_, k);
  return k;
}

void TcpLink::checkPeer() {
  if (closed_)
    fail(ErrorKind::Io, "the tcp link from rank ", self_, " to rank ", peer_,
         " was closed locally: this rank aborted or shut down the group");
}

void TcpLink::close() {
  if (!closed_) {
    closed_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
}

}  // namespace scalecomm
