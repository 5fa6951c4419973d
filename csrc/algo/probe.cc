#include "algo/probe.h"

#include "comm/communicator.h"
#include "comm/stream_channel.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algo/collectives.h"
#include "algo/shared.h"

namespace scalecomm {

namespace {

// The copy rate's message: the largest that every world runs in one call.
constexpr int64_t kWindowProbeBytes = kSlicesFromBytes;

double timeAllreduce(Communicator& comm, std::vector<float>& buf, int iters, const CollectiveOptions& opts) {
  allreduce(comm.channel(), buf.data(), static_cast<int64_t>(buf.size()), DataType::Float32, ReduceOp::Sum, 1,
            opts);  // warm
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    allreduce(comm.channel(), buf.data(), static_cast<int64_t>(buf.size()), DataType::Float32, ReduceOp::Sum, 1, opts);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

// One exchange around the ring of this host's ranks (send to the next, receive
// from the previous, together); point-to-point numbered 0 like the probe's
// collectives, so user messages (numbered from 1) are not disturbed.
double timeHostRing(Communicator& comm, int next, int prev, std::vector<float>& out, std::vector<float>& in, int iters,
                    const CollectiveOptions& opts) {
  const int64_t count = static_cast<int64_t>(out.size());
  std::vector<PointToPointOp> ops = {{true, out.data(), count, DataType::Float32, next, 0, 0},
                                     {false, in.data(), count, DataType::Float32, prev, 0, 0}};
  pointToPointBatch(comm.channel(), ops, opts);  // warm
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) pointToPointBatch(comm.channel(), ops, opts);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

}  // namespace

double windowCopySeconds(double tCall, double tRound, double copies, double linkBeta) {
  return std::max(linkBeta / kWindowCopyCeiling, (tCall - tRound) / copies);
}

void probeIntraHost(Communicator& comm, const CollectiveOptions& opts, CostParams& params) {
  const auto& hosts = comm.hostOf();
  const int n = comm.size(), rank = comm.rank();
  if (!spansHosts(hosts)) return;  // one host: the ring probe measured shared memory already
  std::vector<int> mine;
  for (int r = 0; r < n; ++r) {
    if (hosts[r] == hosts[rank]) mine.push_back(r);
  }
  std::vector<double> measured = {0.0, 0.0};
  if (mine.size() >= 2) {
    size_t i = 0;
    while (mine[i] != rank) ++i;
    const int next = mine[(i + 1) % mine.size()], prev = mine[(i + mine.size() - 1) % mine.size()];
    std::vector<float> tinyOut(2), tinyIn(2), bigOut((1 << 20) / sizeof(float)), bigIn(bigOut.size());
    const double tTiny = timeHostRing(comm, next, prev, tinyOut, tinyIn, 20, opts);
    const double tBig = timeHostRing(comm, next, prev, bigOut, bigIn, 3, opts);
    measured = {tTiny, std::max(1e-13, (tBig - tTiny) / static_cast<double>(bigOut.size() * sizeof(float)))};
  }
  allreduce(comm.channel(), measured.data(), 2, DataType::Float64, ReduceOp::Max, 1, opts);
  if (measured[0] > 0) {
    params.intraAlpha = measured[0];
    params.intraBeta = measured[1];
  }
}

CostParams probeCostParams(Communicator& comm, const Deadline& deadline) {
  CostParams params;
  const int n = comm.size();
  if (n < 2) return params;
  CollectiveOptions opts;
  opts.algorithm = "ring";
  opts.seq = 0;
  opts.deadline = deadline;
  opts.timeoutMs = std::max<int64_t>(1, deadline.remainingMs());
  std::vector<float> tiny(2, 0.0f), big((1 << 20) / sizeof(float), 0.0f);
  const double steps = 2.0 * (n - 1);
  const double tTiny = timeAllreduce(comm, tiny, 20, opts);
  const double tBig = timeAllreduce(comm, big, 3, opts);
  std::vector<double> measured = {tTiny / steps, 0.0, -1.0, -1.0};
  const double bytesPerRank = steps / n * static_cast<double>(big.size() * sizeof(float));
  measured[1] = std::max(1e-12, (tBig - tTiny) / bytesPerRank);
  if (comm.windows() != nullptr) {  // every rank has them, or none
    CollectiveOptions shared = opts;
    shared.algorithm = "shared";
    // Far below a link message's latency, so one descheduled rank would swamp
    // a single batch: the fastest of five, here and for the copies.
    auto fastest = [&](std::vector<float>& buf, int iters) {
      double t = timeAllreduce(comm, buf, iters, shared);
      for (int batch = 1; batch < 5; ++batch) t = std::min(t, timeAllreduce(comm, buf, iters, shared));
      return t;
    };
    measured[2] = fastest(tiny, 40);
    // The copies: one window's worth (at most kWindowProbeBytes) in one call,
    // less the flag round, over the bytes the cost model says that call
    // copies (its price at one second per copied byte and nothing else).
    AlgoParams layout;
    layout.windowBytes = sharedWindowBytes(comm);
    const int64_t bytes = std::min(kWindowProbeBytes, layout.windowBytes);
    if (bytes >= kWindowProbeBytes / 16) {
      std::vector<float> mid(static_cast<size_t>(bytes) / sizeof(float), 0.0f);
      CostParams perCopy;
      perCopy.alpha = perCopy.beta = perCopy.overhead = perCopy.windowAlpha = 0;
      perCopy.windowBeta = 1;
      const double copies = predictAllreduceSeconds("shared", n, bytes, perCopy, layout);
      measured[3] = windowCopySeconds(fastest(mid, 8), measured[2], copies, measured[1]);
    }
  }
  allreduce(comm.channel(), measured.data(), 4, DataType::Float64, ReduceOp::Max, 1, opts);  // agree on the slowest
  params.alpha = measured[0];
  params.beta = measured[1];
  params.overhead = measured[0];
  params.windowAlpha = measured[2];
  params.windowBeta = measured[3];
  probeIntraHost(comm, opts, params);
  return params;
}

}  // namespace scalecomm
