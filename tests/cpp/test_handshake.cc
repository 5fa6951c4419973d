// SHA-256/HMAC against published vectors, the tcp handshake against
// strangers (silent, garbage, the wrong key, the wrong target rank), and the
// quick ACKs of links between hosts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/hmac.h"
#include "harness.h"
#include "transport/tcp.h"

using namespace scalecomm;

namespace {

std::string hex(const Digest& d) { return toHex(d.data(), d.size()); }

int rawConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  CHECK(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

}  // namespace

TEST(sha256_and_hmac_match_the_published_vectors) {
  CHECK_EQ(hex(sha256("abc", 3)), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes: two blocks
  CHECK_EQ(hex(sha256(two.data(), two.size())),
           std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  const std::string thousand(1000, 'a');
  CHECK_EQ(hex(sha256(thousand.data(), thousand.size())),
           std::string("41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"));
  // RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
  CHECK_EQ(hex(hmacSha256(std::string(20, '\x0b'), "Hi There", 8)),
           std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  const std::string what = "what do ya want for nothing?";
  CHECK_EQ(hex(hmacSha256("Jefe", what.data(), what.size())),
           std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  const std::string big = "Test Using Larger Than Block-Size Key - Hash Key First";
  CHECK_EQ(hex(hmacSha256(std::string(131, '\xaa'), big.data(), big.size())),
           std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
  CHECK(randomBytes(32) != randomBytes(32));
}

// A stranger that connects and says nothing, one that sends garbage, one
// with the wrong key and one aiming at another rank: the real peer is
// accepted at once, every stranger is rejected, and nothing waits for them.
TEST(strangers_are_refused_without_delaying_the_real_peer) {
  TcpListener listener("127.0.0.1");
  const int port = listener.port();
  int silent = rawConnect(port);
  int garbage = rawConnect(port);
  const char junk[64] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(::send(garbage, junk, sizeof(junk), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(junk)));
  std::string wrongKeyError, wrongTargetError;
  std::thread wrongKey([&] {
    try {
      ::close(tcpConnectPeer("127.0.0.1", port, "another job's key", 1, 0, Deadline::after(std::chrono::seconds(1))));
    } catch (const Error& e) {
      wrongKeyError = e.what();
    }
  });
  std::thread wrongTarget([&] {
    try {
      ::close(tcpConnectPeer("127.0.0.1", port, "the key", 2, 3, Deadline::after(std::chrono::seconds(1))));
    } catch (const Error& e) {
      wrongTargetError = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  std::thread real(
      [&] { ::close(tcpConnectPeer("127.0.0.1", port, "the key", 3, 0, Deadline::after(std::chrono::seconds(5)))); });
  auto [fd, who, stream] = listener.acceptPeer("the key", 0, 4, Deadline::after(std::chrono::seconds(5)));
  const double took = secondsSince(start);
  real.join();
  ::close(fd);
  CHECK_EQ(who, 3);
  CHECK(took < 2.0);  // not held up by the silent stranger (kHandshakeMs is 10 s)
  // The strangers the first accept did not reach (on a busy machine the real
  // peer can get there first) are refused by the next, which no peer answers.
  try {
    listener.acceptPeer("the key", 0, 4, Deadline::after(std::chrono::milliseconds(1500)));
    CHECK(false);
  } catch (const Error&) {
  }
  wrongKey.join();
  wrongTarget.join();
  CHECK(wrongKeyError.find("could not connect to rank 0") != std::string::npos);
  CHECK(wrongTargetError.find("could not connect to rank 3") != std::string::npos);
  CHECK(listener.rejected() >= 2);  // garbage, and at least the first wrong-key and wrong-target attempts
  ::close(silent);
  ::close(garbage);
}

// A listener that does not know the key cannot pose as the peer.
TEST(a_listener_without_the_key_is_not_trusted) {
  TcpListener impostor("127.0.0.1");
  std::thread accepting([&] {
    try {
      auto [fd, who, stream] = impostor.acceptPeer("guessed key", 0, 2, Deadline::after(std::chrono::seconds(1)));
      ::close(fd);
    } catch (const Error&) {
    }
  });
  std::string error;
  try {
    ::close(
        tcpConnectPeer("127.0.0.1", impostor.port(), "the key", 1, 0, Deadline::after(std::chrono::milliseconds(800))));
  } catch (const Error& e) {
    error = e.what();
  }
  accepting.join();
  CHECK(error.find("could not connect to rank 0") != std::string::npos);
}

// A listener whose queue is full drops new SYNs; a blocking connect() would
// wait out the kernel's retransmissions (minutes). The connect ends at the
// deadline, with a reason.
TEST(a_connect_the_listener_never_takes_ends_at_the_deadline) {
  const int full = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(full, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(full, 0) == 0);
  socklen_t len = sizeof(addr);
  CHECK(getsockname(full, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  std::vector<int> queued;  // fill the accept queue (never accepted)
  for (int i = 0; i < 4; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    queued.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    ::close(tcpConnectPeer("127.0.0.1", port, "k", 1, 0, Deadline::after(std::chrono::milliseconds(500))));
  } catch (const Error& e) {
    error = e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  for (int fd : queued) ::close(fd);
  ::close(full);
  CHECK(error.find("could not connect to rank 0") != std::string::npos);
  CHECK(took < std::chrono::milliseconds(1500));
}

namespace {

struct TakeAll final : RecvConsumer {
  size_t got = 0;
  size_t consume(const uint8_t*, size_t avail) override {
    got += avail;
    return avail;
  }
};

// Both ends' quick-ack mode after 20 round trips of 1000 bytes over a
// loopback connection whose links ask for quick ACKs or not.
std::pair<int, int> quickAckAfterPingPong(bool quickAcks) {
  TcpListener listener("127.0.0.1");
  int connected = -1;
  std::thread connecting([&] {
    connected = tcpConnectPeer("127.0.0.1", listener.port(), "k", 1, 0, Deadline::after(std::chrono::seconds(5)));
  });
  auto accepted = listener.acceptPeer("k", 0, 2, Deadline::after(std::chrono::seconds(5)));
  connecting.join();
  TcpLink a(0, 1, {accepted.fd}, quickAcks), b(1, 0, {connected}, quickAcks);
  std::vector<uint8_t> msg(1000, 7);
  for (int i = 0; i < 20; ++i) {
    for (auto [from, to] : {std::pair<TcpLink*, TcpLink*>{&a, &b}, {&b, &a}}) {
      size_t sent = 0;
      TakeAll sink;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while ((sent < msg.size() || sink.got < msg.size()) && std::chrono::steady_clock::now() < until) {
        if (sent < msg.size()) sent += from->trySend(msg.data() + sent, msg.size() - sent);
        to->tryRecv(sink);
      }
      CHECK_EQ(sink.got, msg.size());
    }
  }
  auto mode = [](int fd) {
    int on = -1;
    socklen_t len = sizeof(on);
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &on, &len) == 0);
    return on;
  };
  return {mode(accepted.fd), mode(connected)};
}

}  // namespace

// A link between hosts keeps its socket in quick-ack mode through a
// conversation; without the option the kernel's delayed ACKs come back as
// soon as both ends send (the contrast shows the check can fail).
TEST(links_between_hosts_ack_at_once) {
  CHECK(quickAckAfterPingPong(true) == std::make_pair(1, 1));
  CHECK(quickAckAfterPingPong(false) != std::make_pair(1, 1));
}

TEST_MAIN()
