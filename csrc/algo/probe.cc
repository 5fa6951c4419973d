#include "algo/probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "algo/collectives.h"

namespace scalecomm {

namespace {

double timeAllreduce(Communicator& comm, std::vector<float>& buf, int iters, const CollectiveOptions& opts) {
  allreduce(comm, buf.data(), static_cast<int64_t>(buf.size()), DataType::Float32, ReduceOp::Sum, 1, opts);  // warm
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    allreduce(comm, buf.data(), static_cast<int64_t>(buf.size()), DataType::Float32, ReduceOp::Sum, 1, opts);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

}  // namespace

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
  std::vector<double> measured = {tTiny / steps, 0.0};
  const double bytesPerRank = steps / n * static_cast<double>(big.size() * sizeof(float));
  measured[1] = std::max(1e-12, (tBig - tTiny) / bytesPerRank);
  allreduce(comm, measured.data(), 2, DataType::Float64, ReduceOp::Max, 1, opts);  // agree on the slowest
  params.alpha = measured[0];
  params.beta = measured[1];
  params.overhead = measured[0];
  return params;
}

}  // namespace scalecomm
