// The codec table on raw host memory, without torch: every entry's round
// trip and error-feedback identity, each codec's own promise, and the
// compressed allreduce across ranks as threads (every rank gets the same
// bits, equal to the sum of what each rank's codec kept).
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/compressed_allreduce.h"
#include "compress/powersgd.h"
#include "compress/random.h"
#include "core/error.h"
#include "core/half.h"
#include "harness.h"

using namespace scalecomm;
using sctest::gaussian;
using sctest::relativeError;

namespace {

// A spec of every codec entry (or of those with one round: not PowerSGD),
// with a test strength for its argument, e.g. "topk:0.1".
std::vector<std::string> codecSpecs(bool oneRoundOnly) {
  std::vector<std::string> out;
  for (const CodecEntry& c : codecRegistry()) {
    if (oneRoundOnly && c.make == nullptr) continue;
    static const char* args[] = {"", ":0.1", ":8", ":2"};
    out.push_back(std::string(c.name) + args[static_cast<int>(c.arg)]);
  }
  return out;
}
std::vector<std::string> oneRoundSpecs() { return codecSpecs(true); }

struct RoundTrip {
  std::vector<uint8_t> payload;
  std::vector<float> decoded, residual;
};

// The payload starts as `fill` bytes (a reused buffer holds anything).
RoundTrip roundTrip(const Codec& codec, const std::vector<float>& x, std::vector<float> residual, uint64_t seed,
                    int rank = 0, uint8_t fill = 0xab) {
  const auto n = static_cast<int64_t>(x.size());
  RoundTrip t;
  t.payload.assign(static_cast<size_t>(codec.payloadBytes(n)) + 1, fill);  // +1: a guard byte
  codec.encode(x.data(), residual.empty() ? nullptr : residual.data(), n, t.payload.data() + 0, seed, rank);
  CHECK_EQ(static_cast<int>(t.payload.back()), static_cast<int>(fill));  // nothing written past payloadBytes
  t.payload.pop_back();
  t.decoded.assign(x.size(), 0.f);
  codec.decodeAdd(t.decoded.data(), n, t.payload.data(), seed);
  t.residual = std::move(residual);
  return t;
}

}  // namespace

TEST(every_codec_keeps_what_its_residual_does_not) {
  // acc = x + residual; the new residual is acc - decode(payload), so
  // decoded + residual gives acc back, for every codec and size.
  for (const std::string& spec : oneRoundSpecs()) {
    const auto codec = makeCodec(CodecSpec::parse(spec));
    for (int64_t n : {1, 3, 255, 256, 257, 1000, 70001}) {
      const std::vector<float> x = gaussian(n, 1), r0 = gaussian(n, 2);
      const RoundTrip t = roundTrip(*codec, x, r0, 7);
      for (int64_t i = 0; i < n; ++i) {
        const float acc = x[i] + r0[i];
        if (std::fabs(t.decoded[i] + t.residual[i] - acc) > 1e-5f * (1 + std::fabs(acc))) {
          throw sctest::Failure{spec + " n=" + std::to_string(n) + ": decoded + residual != acc at " +
                                std::to_string(i)};
        }
      }
      // Without a residual, the same payload (acc = x + 0 encodes alike for x').
      std::vector<float> acc(x);
      for (int64_t i = 0; i < n; ++i) acc[i] += r0[i];
      CHECK(roundTrip(*codec, acc, {}, 7).payload == t.payload);
      // Every payload byte is written: the call reuses its payload memory uncleared.
      CHECK(roundTrip(*codec, x, r0, 7, 0, 0x00).payload == t.payload);
    }
  }
}

TEST(decode_writes_the_bits_of_clearing_adding_and_dividing) {
  // decode() overwrites (a reused output holds anything) and divides in its
  // pass; its bits are those of clearing, decodeAdd, then / float(divisor),
  // -0 included (it comes out +0, as adding onto cleared memory gives).
  for (const std::string& spec : oneRoundSpecs()) {
    const auto codec = makeCodec(CodecSpec::parse(spec));
    for (int64_t n : {1, 257, 70001}) {
      std::vector<float> x = gaussian(n, 8);
      for (int64_t i = 0; i < n; i += 5) x[static_cast<size_t>(i)] = -0.f;
      const RoundTrip t = roundTrip(*codec, x, {}, 9);
      for (int64_t divisor : {1, 3, 4}) {
        std::vector<float> want(t.decoded);
        for (float& v : want) v /= static_cast<float>(divisor);
        std::vector<float> got(x.size(), std::numeric_limits<float>::quiet_NaN());
        codec->decode(got.data(), n, t.payload.data(), 9, divisor);
        if (std::memcmp(got.data(), want.data(), x.size() * sizeof(float)) != 0) {
          throw sctest::Failure{spec + " n=" + std::to_string(n) + " divisor=" + std::to_string(divisor) +
                                ": decode differs from clear + decodeAdd + divide"};
        }
      }
    }
  }
}

TEST(casts_round_to_nearest_even) {
  const std::vector<float> x = gaussian(1000, 3);
  const RoundTrip h = roundTrip(*makeCodec(CodecSpec::parse("fp16")), x, {}, 0);
  const RoundTrip b = roundTrip(*makeCodec(CodecSpec::parse("bf16")), x, {}, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK_EQ(h.decoded[i], fp16ToFloat(floatToFp16(x[i])));
    CHECK_EQ(b.decoded[i], bf16ToFloat(floatToBf16(x[i])));
  }
}

namespace {

// Every finite value of the format, the midpoints between neighbours (ties
// round to even) and the floats either side of each, the subnormals and the
// overflow edge: the cast codec (AVX2/F16C where the CPU has them) sends,
// keeps and decodes the bits of core/half.h's integer code.
void checkCastEdges(const char* spec, uint16_t (*toHalf)(float), float (*fromHalf)(uint16_t), uint32_t infinity,
                    std::vector<float> extra) {
  std::vector<float> x;
  for (uint32_t h = 0; h < infinity; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float v = fromHalf(static_cast<uint16_t>(h | sign));
      const float next = fromHalf(static_cast<uint16_t>((h + 1) | sign));  // the last: infinity
      const float mid = v + (next - v) / 2;                                // exact in float
      x.insert(x.end(), {v, mid, std::nextafter(mid, 0.f), std::nextafter(mid, next)});
    }
  }
  for (float v : extra) x.insert(x.end(), {v, -v});
  x.push_back(7.f);  // n not a multiple of 8: the tail too
  const auto codec = makeCodec(CodecSpec::parse(spec));
  const auto n = static_cast<int64_t>(x.size());
  const RoundTrip plain = roundTrip(*codec, x, {}, 0);
  const RoundTrip fed = roundTrip(*codec, x, std::vector<float>(x.size(), 0.f), 0);
  std::vector<float> divided(x.size());
  codec->decode(divided.data(), n, plain.payload.data(), 0, 3);
  for (size_t i = 0; i < x.size(); ++i) {
    for (const RoundTrip* t : {&plain, &fed}) {
      const float acc = t == &fed ? x[i] + 0.f : x[i];  // -0 + 0 is +0
      const uint16_t want = toHalf(acc), sent = loadField<uint16_t>(t->payload.data() + 2 * i);
      if (sent != want) {
        throw sctest::Failure{std::string(spec) + " sent " + std::to_string(sent) + " for " + std::to_string(acc) +
                              ", the integer code " + std::to_string(want)};
      }
      const float back = fromHalf(want), decoded = 0.f + back;  // decodeAdd onto cleared memory
      CHECK(std::memcmp(&t->decoded[i], &decoded, sizeof decoded) == 0);
      if (t == &fed && std::isfinite(back)) CHECK_EQ(fed.residual[i], acc - back);
      if (t == &plain) {
        const float third = (0.f + back) / 3.f;
        CHECK(std::memcmp(&divided[i], &third, sizeof third) == 0);
      }
    }
  }
}

}  // namespace

TEST(casts_send_the_portable_conversions_bits_at_every_edge) {
  checkCastEdges("fp16", floatToFp16Bits, fp16ToFloatBits, 0x7c00u,
                 {65504.f, 65519.99f, 65520.f, 1e30f, 1e-45f, 1e-40f, 2.98e-8f, 2.99e-8f});
  checkCastEdges("bf16", floatToBf16, bf16ToFloat, 0x7f80u,
                 {3.3895313e38f, 3.3961775e38f, std::numeric_limits<float>::max(), 1e-45f, 1e-40f});
}

TEST(topk_keeps_exactly_the_largest_magnitudes) {
  for (const char* spec : {"topk:0.01", "topk:0.3", "topk:1", "topk_sampled:0.01"}) {
    const int64_t n = 100000;
    std::vector<float> x = gaussian(n, 4);
    const RoundTrip t = roundTrip(*makeCodec(CodecSpec::parse(spec)), x, {}, 5);
    const int64_t k = keptElements(n, CodecSpec::parse(spec).ratio);
    std::vector<float> mag(x.size());
    for (size_t i = 0; i < x.size(); ++i) mag[i] = std::fabs(x[i]);
    std::nth_element(mag.begin(), mag.begin() + (k - 1), mag.end(), std::greater<float>());
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (t.decoded[i] == 0.f) continue;
      ++kept;
      CHECK_EQ(t.decoded[i], x[i]);  // true values
      CHECK(std::fabs(x[i]) >= mag[k - 1]);
    }
    if (std::string(spec).rfind("topk:", 0) == 0) {
      CHECK_EQ(kept, k);
    } else {
      CHECK(kept <= k && kept > k * 9 / 10);  // sampled: at most k, nearly all
    }
  }
}

TEST(randomk_positions_come_from_the_shared_seed_and_payloads_sum) {
  const auto codec = makeCodec(CodecSpec::parse("randomk:0.1"));
  CHECK(codec->sumType() == DataType::Float32);
  const int64_t n = 5000;
  const std::vector<float> a = gaussian(n, 6), b = gaussian(n, 7);
  const RoundTrip ta = roundTrip(*codec, a, {}, 11, 0), tb = roundTrip(*codec, b, {}, 11, 3);
  std::vector<uint8_t> summed(ta.payload.size());
  for (size_t j = 0; j < summed.size(); j += 4) {
    storeField<float>(summed.data() + j,
                      loadField<float>(ta.payload.data() + j) + loadField<float>(tb.payload.data() + j));
  }
  std::vector<float> out(static_cast<size_t>(n), 0.f);
  codec->decodeAdd(out.data(), n, summed.data(), 11);
  int64_t positions = 0;
  for (int64_t i = 0; i < n; ++i) {
    CHECK((ta.decoded[i] != 0.f) == (tb.decoded[i] != 0.f));  // same positions on both ranks
    if (ta.decoded[i] == 0.f) continue;
    ++positions;
    CHECK_EQ(ta.decoded[i], a[i]);  // a position drawn twice counts once
    CHECK_EQ(out[i], a[i] + b[i]);
  }
  CHECK(positions > 400 && positions <= 500);  // 500 draws with replacement
}

TEST(qsgd_is_unbiased_and_its_levels_bounded) {
  const int64_t n = 1500;
  const std::vector<float> x = gaussian(n, 8);
  const auto codec = makeCodec(CodecSpec::parse("qsgd:4"));
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  const int draws = 400;
  for (int s = 0; s < draws; ++s) {
    const RoundTrip t = roundTrip(*codec, x, {}, s);
    for (int64_t i = 0; i < n; ++i) {
      const auto level = static_cast<int8_t>(t.payload[4 * 3 + i]);  // 3 buckets of norms first
      CHECK(level >= -4 && level <= 4);
      mean[i] += t.decoded[i] / draws;
    }
  }
  std::vector<float> m(mean.begin(), mean.end());
  CHECK(relativeError(m, x) < 0.1);
  // Other ranks round independently at the same step.
  CHECK(roundTrip(*codec, x, {}, 1, 0).payload != roundTrip(*codec, x, {}, 1, 1).payload);
}

TEST(sign_sends_signs_times_the_block_mean) {
  const int64_t n = 600;  // a partial last block
  const std::vector<float> x = gaussian(n, 9);
  const RoundTrip t = roundTrip(*makeCodec(CodecSpec::parse("sign")), x, {}, 0);
  for (int64_t lo = 0; lo < n; lo += 256) {
    const int64_t hi = std::min<int64_t>(n, lo + 256);
    double mean = 0;
    for (int64_t i = lo; i < hi; ++i) mean += std::fabs(x[i]) / (hi - lo);
    for (int64_t i = lo; i < hi; ++i) {
      CHECK(std::fabs(std::fabs(t.decoded[i]) - mean) < 1e-5);
      CHECK((t.decoded[i] > 0) == (x[i] >= 0));
    }
  }
}

TEST(a_payload_naming_an_element_out_of_range_is_refused) {
  const auto codec = makeCodec(CodecSpec::parse("topk:0.5"));
  std::vector<uint8_t> payload(static_cast<size_t>(codec->payloadBytes(4)), 0);
  storeField<int32_t>(payload.data(), 9);
  std::vector<float> out(4, 0.f);
  try {
    codec->decodeAdd(out.data(), 4, payload.data(), 0);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("names element 9 of 4") != std::string::npos);
  }
}

TEST(specs_are_checked_against_the_table) {
  CHECK_EQ(CodecSpec::parse("topk:0.25").str(), std::string("topk:0.25"));
  for (const char* bad : {"zip", "topk", "topk:0", "topk:2", "qsgd:200", "sign:3", "powersgd:0"}) {
    try {
      CodecSpec::parse(bad);
      throw sctest::Failure{std::string("accepted ") + bad};
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidArgument);
    }
  }
}

TEST(draws_are_a_pure_function_of_seed_and_index) {
  CHECK_EQ(codec_random::draw(3, 5), codec_random::draw(3, 5));
  CHECK(codec_random::draw(3, 5) != codec_random::draw(4, 5));
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const int64_t p = codec_random::index(1, i, 7);
    CHECK(p >= 0 && p < 7);
    const float u = codec_random::uniform(1, i);
    CHECK(u >= 0.f && u < 1.f);
    sum += codec_random::normal(1, i);
  }
  CHECK(std::fabs(sum / 10000) < 0.05);
}

namespace {

// Ranks as threads: allreduce and allgather over shared memory.
class Exchange {
 public:
  explicit Exchange(int size) : size_(size), slots_(static_cast<size_t>(size)) {}

  CompressComms comms(int rank) {
    CompressComms c;
    c.rank = rank;
    c.size = size_;
    c.allreduce = [this, rank](void* data, int64_t count, DataType type, ReduceOp op) {
      slots_[rank] = data;
      barrier();
      std::vector<double> sum(static_cast<size_t>(count), 0.0);
      for (int q = 0; q < size_; ++q)
        for (int64_t i = 0; i < count; ++i) sum[i] += sctest::loadValue(slots_[q], i, type);
      barrier();
      const double divisor = op == ReduceOp::Avg ? size_ : 1;
      for (int64_t i = 0; i < count; ++i) sctest::storeValue(data, i, type, sum[i] / divisor);
      barrier();
    };
    c.allgatherBytes = [this, rank](uint8_t* all, int64_t b) {
      slots_[rank] = all;
      barrier();
      for (int q = 0; q < size_; ++q)
        if (q != rank) std::memcpy(all + q * b, static_cast<uint8_t*>(slots_[q]) + q * b, static_cast<size_t>(b));
      barrier();
    };
    return c;
  }

 private:
  void barrier() {
    std::unique_lock<std::mutex> l(mu_);
    const int gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return generation_ != gen; });
    }
  }
  int size_;
  std::vector<void*> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, generation_ = 0;
};

}  // namespace

TEST(compressed_allreduce_sums_what_each_rank_kept_for_every_codec) {
  const int ranks = 3;
  const int64_t n = 4000;
  for (const std::string& spec : codecSpecs(false)) {
    const CompressedSite site(CodecSpec::parse(spec));
    Exchange ex(ranks);
    std::vector<std::vector<float>> x(ranks), out(ranks);
    std::vector<CompressState> state(ranks);
    for (int r = 0; r < ranks; ++r) x[r] = out[r] = gaussian(n, 20 + r);
    for (int step = 0; step < 2; ++step) {  // the second call starts from residuals and PowerSGD's warm start
      std::vector<std::vector<float>> residualBefore(ranks);
      for (int r = 0; r < ranks; ++r) {
        residualBefore[r] = state[r].residual;
        out[r] = x[r];
      }
      const auto errors = sctest::onThreads(ranks, [&](int r) {
        // PowerSGD: two weights and a bias between them (the others ignore the layout)
        const PowerSgdLayout layout{{2400, 40}, {100, kPowerSgdDense}, {1500, 30}};
        compressedAllreduce(out[r].data(), n, site, /*errorFeedback=*/true, state[r], ex.comms(r), step,
                            /*average=*/false, layout);
      });
      for (const auto& e : errors) CHECK_EQ(e, std::string());
      // kept_r = acc_r - new residual_r; the result is their sum, bit-identical on every rank.
      std::vector<float> kept(static_cast<size_t>(n), 0.f);
      for (int r = 0; r < ranks; ++r) {
        CHECK(out[r] == out[0]);
        CHECK_EQ(state[r].steps, static_cast<uint64_t>(step + 1));
        for (int64_t i = 0; i < n; ++i) {
          const float acc = x[r][i] + (residualBefore[r].empty() ? 0.f : residualBefore[r][i]);
          kept[i] += acc - state[r].residual[i];
        }
      }
      const double tolerance = spec == "fp16" || spec == "bf16" ? 1e-2 : 1e-4;
      if (relativeError(out[0], kept) > tolerance) {
        throw sctest::Failure{spec + ": the result is not the sum of what the ranks kept (relative error " +
                              std::to_string(relativeError(out[0], kept)) + ")"};
      }
    }
  }
}

TEST(an_averaging_compressed_allreduce_is_the_sum_divided_by_the_ranks_for_every_codec) {
  const int ranks = 3;
  const int64_t n = 4000;
  for (const std::string& spec : codecSpecs(false)) {
    const CompressedSite site(CodecSpec::parse(spec));
    std::vector<std::vector<float>> sum(ranks), mean(ranks);
    for (int r = 0; r < ranks; ++r) sum[r] = mean[r] = gaussian(n, 40 + r);
    for (const bool average : {false, true}) {
      Exchange ex(ranks);
      std::vector<CompressState> state(ranks);
      auto& out = average ? mean : sum;
      const auto errors = sctest::onThreads(ranks, [&](int r) {
        compressedAllreduce(out[r].data(), n, site, /*errorFeedback=*/true, state[r], ex.comms(r), 0, average,
                            {{2400, 40}, {1600, 40}});
      });
      for (const auto& e : errors) CHECK_EQ(e, std::string());
    }
    for (int r = 0; r < ranks; ++r)
      for (int64_t i = 0; i < n; ++i) {
        if (mean[r][i] != sum[r][i] / static_cast<float>(ranks))
          throw sctest::Failure{spec + ": rank " + std::to_string(r) + " element " + std::to_string(i) +
                                " averaged to " + std::to_string(mean[r][i]) + ", the sum over the ranks " +
                                std::to_string(sum[r][i] / static_cast<float>(ranks))};
      }
  }
}

TEST(every_codec_says_whether_what_it_encoded_was_finite) {
  // encode reads acc = x + residual in its one pass and says whether all of
  // it was finite: an infinity or NaN in x, or a sum with the residual that
  // overflowed. A NaN must not upset top-k's selections (ASan, UBSan).
  const int64_t n = 5000;
  const float big = std::numeric_limits<float>::max();
  for (const std::string& spec : oneRoundSpecs()) {
    const auto codec = makeCodec(CodecSpec::parse(spec));
    std::vector<uint8_t> payload(static_cast<size_t>(codec->payloadBytes(n)));
    for (const bool feedback : {false, true}) {
      // none, an infinity, a NaN, x + residual overflows, fp16's range exceeded with a residual to keep
      for (const int bad : {0, 1, 2, 3, 4}) {
        if ((bad == 3 || bad == 4) && !feedback) continue;
        if (bad == 4 && spec != "fp16") continue;
        std::vector<float> x = gaussian(n, 7), residual(feedback ? n : 0, 0.f);
        if (bad == 1) x[4321] = -std::numeric_limits<float>::infinity();
        if (bad == 2) x[17] = std::numeric_limits<float>::quiet_NaN();
        if (bad == 3) x[2500] = residual[2500] = big;
        if (bad == 4) x[99] = 70000.f;
        const bool finite = codec->encode(x.data(), feedback ? residual.data() : nullptr, n, payload.data(), 3, 0);
        if (finite != (bad == 0))
          throw sctest::Failure{spec + (feedback ? " with" : " without") + " a residual, case " + std::to_string(bad) +
                                ": encode said " + (finite ? "finite" : "not finite")};
      }
    }
  }
}

TEST(a_sum_that_overflows_with_the_residual_shows_in_the_result_and_is_not_kept) {
  // A residual near the float range plus a gradient that pushes it over: the
  // call is an overflowed step (every rank's result shows it, the residual
  // starts afresh), not a residual of inf - inf = NaN kept for every later
  // call.
  const int ranks = 2;
  const int64_t n = 4000;
  for (const std::string& spec : codecSpecs(false)) {
    const CompressedSite site(CodecSpec::parse(spec));
    Exchange ex(ranks);
    std::vector<std::vector<float>> out(ranks);
    std::vector<CompressState> state(ranks);
    for (int r = 0; r < ranks; ++r) {
      out[r] = gaussian(n, 60 + r);
      state[r].residual.assign(n, 0.f);
    }
    out[1][123] = state[1].residual[123] = std::numeric_limits<float>::max();
    const auto errors = sctest::onThreads(ranks, [&](int r) {
      compressedAllreduce(out[r].data(), n, site, /*errorFeedback=*/true, state[r], ex.comms(r), 0,
                          /*average=*/false, {});
    });
    for (const auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 0; r < ranks; ++r) {
      bool shows = false, kept = false;
      for (int64_t i = 0; i < n; ++i) {
        shows |= !std::isfinite(out[r][i]);
        // the overflowed rank starts afresh; the other keeps its own, finite
        kept |= !std::isfinite(state[r].residual[i]) || (r == 1 && state[r].residual[i] != 0.f);
      }
      if (!shows || kept)
        throw sctest::Failure{spec + ": rank " + std::to_string(r) + (shows ? "" : "'s result is all finite") +
                              (kept ? "'s residual kept the overflowed step" : "")};
    }
  }
}

TEST(powersgd_recovers_a_low_rank_sum_exactly) {
  // Every rank holds u_r v^T (40 x 50): the sum is rank one, which rank 2 recovers.
  const int ranks = 2, rows = 40, cols = 50;
  const std::vector<float> v = gaussian(cols, 30);
  std::vector<std::vector<float>> x(ranks);
  std::vector<float> expect(rows * cols, 0.f);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> u = gaussian(rows, 31 + r);
    x[r].resize(rows * cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        x[r][i * cols + j] = u[i] * v[j];
        expect[i * cols + j] += u[i] * v[j];
      }
  }
  const CompressedSite site(CodecSpec::parse("powersgd:2"));
  Exchange ex(ranks);
  std::vector<CompressState> state(ranks);
  const auto errors = sctest::onThreads(ranks, [&](int r) {
    compressedAllreduce(x[r].data(), rows * cols, site, false, state[r], ex.comms(r), 0, /*average=*/false,
                        {{rows * cols, rows}});
  });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
  CHECK(relativeError(x[0], expect) < 1e-5);
  CHECK(x[1] == x[0]);
  CHECK_EQ(state[0].warm.cols, static_cast<int64_t>(cols));
}

// PowerSGD as its contract states it, written out element by element: each
// of P's entries summed in 8 partial sums (element j into j mod 8, added
// pairwise) then the tail; Q's entries and the products added in order;
// modified Gram-Schmidt in double, each column projected twice. The
// library's passes run blocked and vectorised; they must give these bits.
struct PlainPowerSgd {
  int r;
  std::function<void(float*, int64_t)> sum;
  std::vector<float> warm;  // per block, cols x r

  // One matrix block m (rows x cols, its last row `n - (rows - 1) cols`
  // long; the rest zero), q its warm start (cols x r); returns P (rows x r,
  // before the sum) for the caller to sum, then finish() does the rest.
  static float at(const float* m, int64_t n, int64_t cols, int64_t i, int64_t j) {
    return i * cols + j < n ? m[i * cols + j] : 0.f;
  }
  static std::vector<float> first(const float* m, int64_t n, int64_t rows, int64_t cols, const float* q, int r) {
    std::vector<float> p(rows * r);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t len = std::max<int64_t>(0, std::min(cols, n - i * cols));
      for (int t = 0; t < r; ++t) {
        float part[8] = {};
        const int64_t whole = len / 8 * 8;
        for (int64_t j = 0; j < whole; ++j) part[j % 8] += m[i * cols + j] * q[j * r + t];
        float s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        for (int64_t j = whole; j < len; ++j) s += m[i * cols + j] * q[j * r + t];
        p[i * r + t] = s;
      }
    }
    return p;
  }
  static void orthonormal(std::vector<float>& p, int64_t rows, int r) {
    auto column = [&](int t) {
      std::vector<float> c(rows);
      for (int64_t i = 0; i < rows; ++i) c[i] = p[i * r + t];
      return c;
    };
    auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
      double s = 0;
      for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
      return s;
    };
    for (int t = 0; t < r; ++t) {
      std::vector<float> c = column(t);
      const double before = std::sqrt(dot(c, c));
      for (int pass = 0; pass < 2; ++pass) {
        for (int u = 0; u < t; ++u) {
          const std::vector<float> cu = column(u);
          const auto d = static_cast<float>(dot(cu, c));
          for (int64_t i = 0; i < rows; ++i) c[i] -= d * cu[i];
        }
      }
      const double norm = std::sqrt(dot(c, c));
      const float scale = norm > 1e-6 * before && norm > 1e-30 ? static_cast<float>(1.0 / norm) : 0.f;
      for (int64_t i = 0; i < rows; ++i) p[i * r + t] = c[i] * scale;
    }
  }
  // Q (cols x r) = M^T P, each entry 0 + P[0][t] M[0][j] + P[1][t] M[1][j] + ...
  static std::vector<float> second(const float* m, int64_t n, int64_t rows, int64_t cols, const std::vector<float>& p,
                                   int r) {
    std::vector<float> q(cols * r);
    for (int64_t j = 0; j < cols; ++j)
      for (int t = 0; t < r; ++t) {
        float s = 0.f;
        for (int64_t i = 0; i < rows; ++i)
          if (i * cols + j < n) s += p[i * r + t] * m[i * cols + j];
        q[j * r + t] = s;
      }
    return q;
  }
  static float product(const std::vector<float>& p, const std::vector<float>& q, int r, int64_t i, int64_t j) {
    float s = p[i * r] * q[j * r];
    for (int t = 1; t < r; ++t) s += p[i * r + t] * q[j * r + t];
    return s;
  }
};

TEST(powersgd_has_the_bits_of_its_plain_definition) {
  // Blocks as a DDP bucket holds them (matrices of odd shapes, a dense one)
  // and one near-square matrix whose last row is short; ranks 1-8, so Q's
  // columns go four at a time and alone. The "allreduce" triples each value,
  // so the summed Q differs from this rank's (the residual takes this
  // rank's). Two calls, so the second adds the first's residual.
  const auto triple = [](float* v, int64_t k) {
    for (int64_t i = 0; i < k; ++i) v[i] = 3.f * v[i];
  };
  struct Case {
    PowerSgdLayout layout;
    int64_t n;
  };
  const std::vector<Case> cases = {
      {{{37 * 53, 37}, {19, kPowerSgdDense}, {12 * 100, 12}, {64 * 9, 64}}, 37 * 53 + 19 + 1200 + 576},
      {{}, 1000},  // 32 x 32, the last row 8 long
      {{}, 4099},
  };
  for (const Case& c : cases) {
    for (int r : {1, 3, 4, 5, 8}) {
      const int64_t divisor = r % 2 == 0 ? 1 : 3;  // an average over three ranks, and none
      const std::vector<float> x = gaussian(c.n, 70 + r);
      std::vector<float> residual(c.n, 1.f), got = x;
      PowerSgdWarmStart warm;
      for (int call = 0; call < 2; ++call) {  // the second from the first's warm start and residual
        got = x;
        powerSgd(got.data(), c.n, r, c.layout, warm, triple, residual.data(), divisor);
      }
      // The same two calls, element by element: c = x + the residual, x =
      // the product / divisor.
      const PowerSgdPlan plan = powerSgdPlan(c.n, r, c.layout);
      std::vector<float> want = x, wantResidual(c.n, 1.f), q0(plan.secondCount);
      const auto divided = [divisor](float v) { return divisor == 1 ? v : v / static_cast<float>(divisor); };
      for (const auto& b : plan.blocks) {
        if (!b.shape.gains) continue;
        for (int64_t i = 0; i < b.shape.cols * r; ++i)
          q0[b.second + i] = codec_random::normal(kPowerSgdWarmStartSeed, i);
      }
      for (int call = 0; call < 2; ++call) {
        std::vector<float> m(c.n);
        for (int64_t i = 0; i < c.n; ++i) m[i] = x[i] + wantResidual[i];
        want = m;
        std::vector<float> first(plan.firstCount), second(plan.secondCount);
        std::vector<std::vector<float>> ps;
        for (const auto& b : plan.blocks) {
          if (!b.shape.gains) {
            std::copy(m.begin() + b.offset, m.begin() + b.offset + b.count, first.begin() + b.first);
            continue;
          }
          const auto p =
              PlainPowerSgd::first(m.data() + b.offset, b.count, b.shape.rows, b.shape.cols, q0.data() + b.second, r);
          std::copy(p.begin(), p.end(), first.begin() + b.first);
        }
        triple(first.data(), plan.firstCount);
        for (const auto& b : plan.blocks) {
          if (!b.shape.gains) {
            for (int64_t i = 0; i < b.count; ++i)
              want[b.offset + i] = divided(first[b.first + i]), wantResidual[b.offset + i] = 0;
            continue;
          }
          std::vector<float> p(first.begin() + b.first, first.begin() + b.first + b.shape.rows * r);
          PlainPowerSgd::orthonormal(p, b.shape.rows, r);
          const auto q = PlainPowerSgd::second(m.data() + b.offset, b.count, b.shape.rows, b.shape.cols, p, r);
          for (int64_t e = 0; e < b.count; ++e)
            wantResidual[b.offset + e] =
                m[b.offset + e] - PlainPowerSgd::product(p, q, r, e / b.shape.cols, e % b.shape.cols);
          std::copy(q.begin(), q.end(), second.begin() + b.second);
          ps.push_back(p);
        }
        triple(second.data(), plan.secondCount);
        size_t k = 0;
        for (const auto& b : plan.blocks) {
          if (!b.shape.gains) continue;
          const std::vector<float> q(second.begin() + b.second, second.begin() + b.second + b.shape.cols * r);
          for (int64_t e = 0; e < b.count; ++e)
            want[b.offset + e] = divided(PlainPowerSgd::product(ps[k], q, r, e / b.shape.cols, e % b.shape.cols));
          std::copy(q.begin(), q.end(), q0.begin() + b.second);
          ++k;
        }
      }
      const std::string what = "n " + std::to_string(c.n) + ", rank " + std::to_string(r);
      CHECK(std::memcmp(got.data(), want.data(), c.n * sizeof(float)) == 0 ||
            (std::printf("%s: x\n", what.c_str()), false));
      CHECK(std::memcmp(residual.data(), wantResidual.data(), c.n * sizeof(float)) == 0 ||
            (std::printf("%s: residual\n", what.c_str()), false));
      CHECK(std::memcmp(warm.q.data(), q0.data(), q0.size() * sizeof(float)) == 0 ||
            (std::printf("%s: warm start\n", what.c_str()), false));
    }
  }
}

TEST_MAIN()
