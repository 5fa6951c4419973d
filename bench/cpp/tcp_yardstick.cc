// The raw TCP yardstick: what plain sockets move between two hosts when both
// send and receive at once (as a 2-rank ring allreduce does), over 1 or N
// streams, each stream carrying bytes/N each way. Two ways to drive them:
// "threads" (one blocking sender and one blocking receiver thread per stream)
// and "poll" (one thread, nonblocking sockets, poll()). Every send and recv
// moves at most 128 KiB (iperf3's default block: one huge recv returns the
// window to the sender only when it ends, which slows the stream). No
// scalecomm code is involved. Usage (one end listens, the other connects, both in the same mode;
// both print per-iteration times):
//   tcp_yardstick threads|poll listen <port> <streams> <bytes> <iters>
//   tcp_yardstick threads|poll connect <addr> <port> <streams> <bytes> <iters>
// Prints "seconds <t1> <t2> ..." on stdout: each iteration, from the start of
// its sends to the end of its receives on this end. Exits 1 with a message on
// any socket error, or when no peer came within 60 s.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBlock = 128 * 1024;  // bytes per send/recv call

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp_yardstick: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

std::vector<int> listenStreams(int port, int n) {
  int srv = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(srv, n) != 0) die("listen");
  timeval tv{60, 0};
  setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = accept(srv, nullptr, nullptr);
    if (fd < 0) die("accept");
    fds.push_back(fd);
  }
  close(srv);
  return fds;
}

std::vector<int> connectStreams(const char* host, int port, int n) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) die("address");
  std::vector<int> fds;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (static_cast<int>(fds.size()) < n) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      fds.push_back(fd);
      continue;
    }
    close(fd);
    if (std::chrono::steady_clock::now() > deadline) die("connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return fds;
}

// One exchange driven by one thread over nonblocking sockets; false on error.
bool exchangePolled(const std::vector<int>& fds, std::vector<std::vector<char>>& out,
                    std::vector<std::vector<char>>& in, size_t bytes, size_t share) {
  const size_t n = fds.size();
  std::vector<size_t> sent(n, 0), got(n, 0), len(n);
  for (size_t i = 0; i < n; ++i) len[i] = std::min(share, bytes - i * share);
  std::vector<pollfd> p(n);
  for (;;) {
    bool busy = false;
    for (size_t i = 0; i < n; ++i) {
      short events = 0;
      if (sent[i] < len[i]) {
        ssize_t k =
            send(fds[i], out[i].data() + sent[i], std::min(kBlock, len[i] - sent[i]), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) sent[i] += static_cast<size_t>(k);
        if (k < 0 && errno != EAGAIN) return false;
        if (sent[i] < len[i]) events |= POLLOUT;
      }
      if (got[i] < len[i]) {
        ssize_t k = recv(fds[i], in[i].data() + got[i], std::min(kBlock, len[i] - got[i]), MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN)) return false;
        if (k > 0) got[i] += static_cast<size_t>(k);
        if (got[i] < len[i]) events |= POLLIN;
      }
      p[i] = pollfd{fds[i], events, 0};
      busy = busy || events != 0;
    }
    if (!busy) return true;
    poll(p.data(), n, 1000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool listening = argc == 7 && std::string(argv[2]) == "listen";
  if ((mode != "threads" && mode != "poll") || (!listening && !(argc == 8 && std::string(argv[2]) == "connect"))) {
    std::fprintf(stderr,
                 "usage: tcp_yardstick threads|poll listen <port> <streams> <bytes> <iters>\n"
                 "       tcp_yardstick threads|poll connect <addr> <port> <streams> <bytes> <iters>\n");
    return 2;
  }
  const int a = listening ? 3 : 4;
  const int port = std::atoi(argv[a]);
  const int n = std::atoi(argv[a + 1]);
  const size_t bytes = std::strtoull(argv[a + 2], nullptr, 10);
  const int iters = std::atoi(argv[a + 3]);
  if (n < 1 || n > 64 || iters < 1 || bytes < static_cast<size_t>(n)) {
    std::fprintf(stderr, "tcp_yardstick: need 1..64 streams, iters >= 1, bytes >= streams\n");
    return 2;
  }
  std::vector<int> fds = listening ? listenStreams(port, n) : connectStreams(argv[3], port, n);
  int one = 1;
  for (int fd : fds) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (mode == "poll")
    for (int fd : fds) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  const size_t share = (bytes + n - 1) / n;
  std::vector<std::vector<char>> out(n, std::vector<char>(share, 1)), in(n, std::vector<char>(share));
  std::printf("seconds");
  for (int it = 0; it < iters; ++it) {
    std::atomic<bool> failed{false};
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    if (mode == "poll") failed = !exchangePolled(fds, out, in, bytes, share);
    for (int i = 0; i < n && mode == "threads"; ++i) {
      const size_t len = std::min(share, bytes - i * share);
      threads.emplace_back([&, i, len] {
        for (size_t done = 0; done < len;) {
          ssize_t k = send(fds[i], out[i].data() + done, std::min(kBlock, len - done), MSG_NOSIGNAL);
          if (k <= 0) return void(failed = true);
          done += static_cast<size_t>(k);
        }
      });
      threads.emplace_back([&, i, len] {
        for (size_t done = 0; done < len;) {
          ssize_t k = recv(fds[i], in[i].data() + done, std::min(kBlock, len - done), 0);
          if (k <= 0) return void(failed = true);
          done += static_cast<size_t>(k);
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failed) die("transfer");
    std::printf(" %.6f", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("\n");
  for (int fd : fds) close(fd);
  return 0;
}
