// Host codec costs, one process, one thread: encode (with and without error
// feedback) and decodeAdd of n float32 values per codec, the codecs
// interleaved in rounds. Prints, per codec, the median and range over the
// rounds of each round's least time, and encode's rate over x's bytes.
// Usage:
//   codec_encode [values=4M] [rounds=7] [iters=5] [codecs=fp16,bf16,topk:0.01,...]
// The values are standard normal (the same every run); a codec with error
// feedback carries its residual from call to call, as a training run does.
// powersgd:R is one whole call of PowerSGD (compress/powersgd.h) on one
// near-square matrix, its two allreduces a single rank's (no transfer):
// "encode" without a residual, "encode+residual" with it; no decode.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "compress/codec.h"
#include "compress/powersgd.h"
#include "compress/random.h"

using namespace scalecomm;

namespace {

struct Row {
  std::string spec;
  std::unique_ptr<Codec> codec;
  int factorRank = 0;  // powersgd:R (no codec)
  PowerSgdWarmStart warm;
  std::vector<float> residual;
  std::vector<uint8_t> payload;
  std::vector<double> plain, feedback, decode;  // per round: least of iters
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? bench::parseSize(argv[1]) : 4 << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string list = argc > 4 ? argv[4] : "fp16,bf16,topk:0.01,topk_sampled:0.01,randomk:0.01,qsgd:8,sign";
  if (n < 1 || rounds < 1 || iters < 1) {
    std::fprintf(stderr, "usage: codec_encode [values>=1] [rounds>=1] [iters>=1] [codecs]\n");
    return 2;
  }
  std::vector<float> x(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = codec_random::normal(7, static_cast<uint64_t>(i));
  std::vector<Row> rows;
  std::stringstream names(list);
  for (std::string spec; std::getline(names, spec, ',');) {
    Row row;
    row.spec = spec;
    const CodecSpec parsed = CodecSpec::parse(spec);
    if (!parsed.entry->make) {  // powersgd: its own protocol
      row.factorRank = parsed.rank;
    } else {
      row.codec = makeCodec(parsed);
      row.payload.resize(static_cast<size_t>(row.codec->payloadBytes(n)));
    }
    row.residual.assign(static_cast<size_t>(n), 0.f);
    rows.push_back(std::move(row));
  }
  uint64_t seed = 1;
  for (int round = 0; round < rounds; ++round) {
    for (Row& row : rows) {
      double plain = 1e30, feedback = 1e30, decode = 1e30;
      for (int it = 0; it < iters && row.factorRank > 0; ++it) {
        const auto local = [](float*, int64_t) {};
        std::copy(x.begin(), x.end(), out.begin());
        double t0 = bench::nowMs();
        powerSgd(out.data(), n, row.factorRank, {}, row.warm, local, nullptr);
        plain = std::min(plain, bench::nowMs() - t0);
        std::copy(x.begin(), x.end(), out.begin());
        t0 = bench::nowMs();
        powerSgd(out.data(), n, row.factorRank, {}, row.warm, local, row.residual.data());
        feedback = std::min(feedback, bench::nowMs() - t0);
      }
      for (int it = 0; it < iters && row.codec; ++it, ++seed) {
        double t0 = bench::nowMs();
        row.codec->encode(x.data(), nullptr, n, row.payload.data(), seed, 0);
        plain = std::min(plain, bench::nowMs() - t0);
        t0 = bench::nowMs();
        row.codec->decodeAdd(out.data(), n, row.payload.data(), seed);
        decode = std::min(decode, bench::nowMs() - t0);
        t0 = bench::nowMs();
        row.codec->encode(x.data(), row.residual.data(), n, row.payload.data(), seed, 0);
        feedback = std::min(feedback, bench::nowMs() - t0);
      }
      row.plain.push_back(plain);
      row.feedback.push_back(feedback);
      row.decode.push_back(decode);
    }
  }
  std::printf("%lld values (%.1f MiB), %d rounds of %d calls; ms: median [min-max] over rounds\n",
              static_cast<long long>(n), n * 4.0 / (1 << 20), rounds, iters);
  std::printf("%-20s %24s %24s %24s %10s\n", "codec", "encode", "encode+residual", "decodeAdd", "enc GB/s");
  for (Row& row : rows) {
    std::printf("%-20s %24s %24s %24s %10.2f\n", row.spec.c_str(), bench::summary(row.plain).c_str(),
                bench::summary(row.feedback).c_str(), row.codec ? bench::summary(row.decode).c_str() : "-",
                n * 4.0 / 1e6 / bench::median(row.plain));
  }
  return 0;
}
