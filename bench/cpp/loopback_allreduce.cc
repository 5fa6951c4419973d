// Allreduce throughput of the executor over loopback links (ranks as threads
// in one process): isolates schedule, executor, ring and reducer costs from
// process scheduling and Python. Usage:
//   loopback_allreduce [ranks=2] [bytes=64M] [segment=256K] [ring=4M] [iters=10]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "algo/collectives.h"
#include "bench_util.h"
#include "comm/loopback_mesh.h"
#include "comm/stream_channel.h"

using namespace scalecomm;

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 2;
  int64_t bytes = argc > 2 ? bench::parseSize(argv[2]) : 64 << 20;
  int64_t seg = argc > 3 ? bench::parseSize(argv[3]) : 256 << 10;
  int64_t ring = argc > 4 ? bench::parseSize(argv[4]) : 4 << 20;
  int iters = argc > 5 ? std::atoi(argv[5]) : 10;
  LoopbackFabric fabric(n, static_cast<size_t>(ring));
  auto comms = loopbackCommunicators(fabric);
  const int64_t count = bytes / 4;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(count, 1.0f));
  double best = 1e30;
  for (int it = 0; it < iters; ++it) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r) {
      ts.emplace_back([&, r] {
        CollectiveOptions o;
        o.segmentBytes = seg;
        o.seq = it;
        allreduce(comms[r]->channel(), bufs[r].data(), count, DataType::Float32, ReduceOp::Sum, 1, o);
      });
    }
    for (auto& t : ts) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
  }
  double algbw = bytes / best / 1e9;
  std::printf("ranks %d bytes %lld segment %lld ring %lld: best %.1f us, algbw %.2f GB/s, busbw %.2f GB/s\n", n,
              static_cast<long long>(bytes), static_cast<long long>(seg), static_cast<long long>(ring), best * 1e6,
              algbw, algbw * 2 * (n - 1) / n);
  return 0;
}
