// The host reduction loops alone, one thread: reduceInto (dst += src) and a
// fold of k inputs per dtype, the dtypes interleaved in rounds. Prints, per
// dtype, the median and range over the rounds of each round's least time
// and the median's rate over the bytes the loop reads and writes.
// Usage:
//   reduce_loops [bytes=4M] [rounds=7] [iters=20] [k=4] [dtypes=float32,float16,bfloat16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "comm/reducer.h"
#include "core/dtype.h"

using namespace scalecomm;

namespace {

DataType parseType(const std::string& name) {
  if (name == "float32") return DataType::Float32;
  if (name == "float16") return DataType::Float16;
  if (name == "bfloat16") return DataType::BFloat16;
  if (name == "float64") return DataType::Float64;
  if (name == "int32") return DataType::Int32;
  std::fprintf(stderr, "reduce_loops: unknown dtype %s (float32, float16, bfloat16, float64, int32)\n", name.c_str());
  std::exit(2);
}

struct Row {
  std::string name;
  DataType dtype;
  std::vector<std::vector<uint8_t>> in;
  std::vector<double> into, fold;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t bytes = argc > 1 ? bench::parseSize(argv[1]) : 4 << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  const int k = argc > 4 ? std::atoi(argv[4]) : 4;
  const std::string list = argc > 5 ? argv[5] : "float32,float16,bfloat16";
  if (bytes < 8 || rounds < 1 || iters < 1 || k < 2) {
    std::fprintf(stderr, "usage: reduce_loops [bytes>=8] [rounds>=1] [iters>=1] [k>=2] [dtypes]\n");
    return 2;
  }
  std::vector<Row> rows;
  std::stringstream names(list);
  for (std::string name; std::getline(names, name, ',');) {
    Row row{name, parseType(name), {}, {}, {}};
    const auto es = static_cast<int64_t>(elementSize(row.dtype));
    for (int j = 0; j <= k; ++j) {
      std::vector<uint8_t> v(static_cast<size_t>(bytes / es * es));
      // Small values (the bits of 1.0-ish floats in every format) so that
      // repeated sums stay finite.
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i % es == es - 1 ? 0x3c : i * 37 + j);
      row.in.push_back(std::move(v));
    }
    rows.push_back(std::move(row));
  }
  for (int round = 0; round < rounds; ++round) {
    for (Row& row : rows) {
      const auto count = static_cast<int64_t>(row.in[0].size() / elementSize(row.dtype));
      std::vector<const void*> ptrs;
      for (int j = 1; j <= k; ++j) ptrs.push_back(row.in[j].data());
      double into = 1e30, fold = 1e30;
      for (int it = 0; it < iters; ++it) {
        double t0 = bench::nowMs();
        reduceInto(row.in[0].data(), row.in[1].data(), count, row.dtype, ReduceOp::Sum);
        into = std::min(into, bench::nowMs() - t0);
        t0 = bench::nowMs();
        foldInto(row.in[0].data(), nullptr, ptrs.data(), k, count, row.dtype, ReduceOp::Avg, k);
        fold = std::min(fold, bench::nowMs() - t0);
      }
      row.into.push_back(into);
      row.fold.push_back(fold);
    }
  }
  std::printf("%lld bytes per input, fold of %d, %d rounds of %d calls; ms: median [min-max] over rounds\n",
              static_cast<long long>(bytes), k, rounds, iters);
  std::printf("%-10s %24s %9s %24s %9s\n", "dtype", "reduceInto", "GB/s", "foldInto (avg)", "GB/s");
  for (const Row& row : rows) {
    const double b = static_cast<double>(row.in[0].size());
    std::printf("%-10s %24s %9.2f %24s %9.2f\n", row.name.c_str(), bench::summary(row.into).c_str(),
                3 * b / 1e6 / bench::median(row.into), bench::summary(row.fold).c_str(),
                (k + 1) * b / 1e6 / bench::median(row.fold));
  }
  return 0;
}
