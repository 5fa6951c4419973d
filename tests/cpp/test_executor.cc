// The executor over loopback links: virtual ranks as threads run real
// collectives on real data, for every dtype and op, world sizes 1-7, odd
// counts, tiny segments and a tiny ring (wrap-around and back-pressure); plus
// mismatch detection, timeouts and peer closure; and how a wait idles.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include <unistd.h>

#include "algo/collectives.h"
#include "algo/registry.h"
#include "closed_form.h"
#include "comm/communicator.h"
#include "comm/loopback_mesh.h"
#include "comm/reducer.h"
#include "comm/stream_channel.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/half.h"
#include "harness.h"

using namespace scalecomm;

namespace {

// Runs fn(rank, comm) on n threads; returns the per-rank error messages ("" = ok).
std::vector<std::string> runRanks(int n, size_t ringBytes, const std::function<void(int, Communicator&)>& fn) {
  LoopbackFabric fabric(n, ringBytes);
  auto comms = loopbackCommunicators(fabric, 0);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        comms[r]->closeLinks();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

CollectiveOptions opts(int64_t segBytes, uint64_t seq = 1, int64_t timeoutMs = 20000) {
  CollectiveOptions o;
  o.segmentBytes = segBytes;
  o.seq = seq;
  o.timeoutMs = timeoutMs;
  o.deadline = Deadline::after(std::chrono::milliseconds(timeoutMs));
  return o;
}

// Whether `algo` takes an allreduce of `count` floats in segments of `seg`
// elements here: its world and size limits, and (for algorithms whose ranks
// send before they receive, maxBytes > 0) one segment's message fitting the
// test's ring, which is smaller than any real transport's buffer.
bool runsHere(const std::string& algo, int n, int64_t count, int64_t seg, int64_t ringBytes) {
  if (!allreduceServes(algo, n, count * 4)) return false;
  return findAllreduceAlgorithm(algo)->maxBytes == 0 || std::min(count, seg) * 4 + 64 <= ringBytes;
}

}  // namespace

TEST(allreduce_every_algorithm_dtype_and_op_matches_closed_form) {
  for (const std::string& algo : allreduceAlgorithms()) {
    for (int n : {1, 2, 3, 5}) {
      if (!allreduceServes(algo, n)) continue;
      for (DataType t : sctest::kAllTypes) {
        for (ReduceOp op : sctest::kAllOps) {
          if (!reduceOpSupports(op, t)) continue;
          if (t == DataType::UInt8 && (op == ReduceOp::Min || op == ReduceOp::Max)) continue;  // negatives
          const int64_t count = 37;
          const double factor = 2.0;
          std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(count * elementSize(t)));
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i)
              sctest::storeValue(bufs[r].data(), i, t, sctest::reductionInput(r, i, op));
          auto errors = runRanks(n, 4096, [&](int r, Communicator& c) {
            CollectiveOptions o = opts(24);
            o.algorithm = algo;
            allreduce(c.channel(), bufs[r].data(), count, t, op, factor, o);
          });
          for (auto& e : errors) CHECK_EQ(e, std::string());
          for (int r = 0; r < n; ++r) {
            for (int64_t i = 0; i < count; ++i) {
              const double want = sctest::reducedValue(n, i, op, factor, t);
              const double got = sctest::loadValue(bufs[r].data(), i, t);
              if (!sctest::matches(got, want, t)) {
                throw sctest::Failure{strCat(algo, " n=", n, " dtype=", dataTypeName(t), " op=", reduceOpName(op),
                                             " rank ", r, " element ", i, ": got ",
                                             sctest::loadValue(bufs[r].data(), i, t), " want ", want)};
              }
            }
          }
        }
      }
    }
  }
}

TEST(allreduce_grid_of_algorithms_world_sizes_counts_and_segments) {
  for (const std::string& algo : allreduceAlgorithms()) {
    for (int n : {1, 2, 3, 4, 5, 7, 8}) {
      if (!allreduceServes(algo, n)) continue;
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{n + 1}, int64_t{1001}, int64_t{100000}}) {
        for (int64_t seg : {int64_t{4}, int64_t{100}, int64_t{65536}}) {
          if (seg == 4 && count > 1001) continue;  // 10^5 one-element messages: slow, adds nothing
          if (!runsHere(algo, n, count, seg, 1024)) continue;
          std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i) bufs[r][i] = static_cast<float>((r + 1) * (i % 13));
          auto errors = runRanks(n, 1024, [&](int r, Communicator& c) {
            CollectiveOptions o = opts(seg);
            o.algorithm = algo;
            o.psServers = 2;  // sharded; the single server is covered by the closed-form test
            std::vector<int> hosts;
            for (int q = 0; q < n; ++q) hosts.push_back(q / 2);
            c.setHostOf(hosts);
            allreduce(c.channel(), bufs[r].data(), count, DataType::Float32, ReduceOp::Sum, 1, o);
          });
          std::string all;
          for (auto& e : errors) all += e.empty() ? "" : "\n    " + e;
          if (!all.empty()) throw sctest::Failure{strCat(algo, " n=", n, " count=", count, " seg=", seg, ":", all)};
          const float tri = static_cast<float>(n * (n + 1) / 2);
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i) CHECK_EQ(bufs[r][i], tri * static_cast<float>(i % 13));
        }
      }
    }
  }
}

TEST(broadcast_and_allgather_move_exact_bytes) {
  for (int n : {2, 3, 4}) {
    for (int root = 0; root < n; ++root) {
      std::vector<std::vector<int32_t>> bufs(n, std::vector<int32_t>(777, -1));
      for (int i = 0; i < 777; ++i) bufs[root][i] = i * 31 + root;
      for (const std::string& algo : selectableAlgorithms("broadcast")) {
        for (int r = 0; r < n; ++r)
          if (r != root) std::fill(bufs[r].begin(), bufs[r].end(), -1);
        auto errors = runRanks(n, 2048, [&](int r, Communicator& c) {
          CollectiveOptions o = opts(64);
          o.algorithm = algo;
          broadcast(c.channel(), bufs[r].data(), 777, DataType::Int32, root, o);
        });
        for (auto& e : errors) CHECK_EQ(e, std::string());
        for (int r = 0; r < n; ++r) CHECK(bufs[r] == bufs[root]);
      }
    }
    std::vector<std::vector<std::vector<int64_t>>> outs(n,
                                                        std::vector<std::vector<int64_t>>(n, std::vector<int64_t>(55)));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 55; ++i) outs[r][r][i] = r * 1000 + i;
    auto errors = runRanks(n, 1024, [&](int r, Communicator& c) {
      std::vector<void*> ptrs;
      for (auto& v : outs[r]) ptrs.push_back(v.data());
      allgather(c.channel(), ptrs, 55, DataType::Int64, opts(40));
    });
    for (auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b)
        for (int i = 0; i < 55; ++i) CHECK_EQ(outs[r][b][i], b * 1000 + i);
  }
}

TEST(count_mismatch_fails_every_rank_with_both_counts) {
  auto errors = runRanks(2, 4096, [&](int r, Communicator& c) {
    std::vector<float> buf(r == 0 ? 100 : 120, 1.0f);
    allreduce(c.channel(), buf.data(), static_cast<int64_t>(buf.size()), DataType::Float32, ReduceOp::Sum, 1,
              opts(1 << 20));
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[r].find("seq 1") != std::string::npos);
    CHECK(errors[r].find("100") != std::string::npos || errors[r].find("closed") != std::string::npos);
  }
  CHECK(errors[0].find("120 elements") != std::string::npos || errors[1].find("100 elements") != std::string::npos);
}

TEST(dtype_and_op_mismatch_are_named) {
  auto errors = runRanks(2, 4096, [&](int r, Communicator& c) {
    std::vector<int32_t> buf(16, 1);
    allreduce(c.channel(), buf.data(), 16, r == 0 ? DataType::Int32 : DataType::Float32,
              r == 0 ? ReduceOp::Sum : ReduceOp::Sum, 1, opts(1 << 20));
  });
  CHECK(errors[0].find("float32") != std::string::npos || errors[1].find("int32") != std::string::npos);
  errors = runRanks(2, 4096, [&](int r, Communicator& c) {
    std::vector<int32_t> buf(16, 1);
    allreduce(c.channel(), buf.data(), 16, DataType::Int32, r == 0 ? ReduceOp::Sum : ReduceOp::Max, 1, opts(1 << 20));
  });
  CHECK(errors[0].find("reduce op max") != std::string::npos || errors[1].find("reduce op sum") != std::string::npos);
}

TEST(missing_rank_times_out_naming_the_peer) {
  auto start = Clock::now();
  auto errors = runRanks(2, 4096, [&](int r, Communicator& c) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // never calls allreduce
      return;
    }
    std::vector<float> buf(8, 1.0f);
    allreduce(c.channel(), buf.data(), 8, DataType::Float32, ReduceOp::Sum, 1, opts(1 << 20, 1, 300));
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  CHECK(errors[0].find("Timed out after 300 ms waiting for rank 1") != std::string::npos);
  CHECK(ms < 5000);
}

TEST(closed_peer_is_reported_promptly) {
  auto errors = runRanks(3, 4096, [&](int r, Communicator& c) {
    if (r == 2) {
      c.abort();  // as if rank 2 failed: its links close
      return;
    }
    std::vector<float> buf(1000, 1.0f);
    allreduce(c.channel(), buf.data(), 1000, DataType::Float32, ReduceOp::Sum, 1, opts(64, 1, 10000));
  });
  CHECK(errors[0].find("closed") != std::string::npos);
  CHECK(errors[1].find("closed") != std::string::npos);
}

namespace {

// A reducer that only queues (as a CUDA reducer does on its stream) and applies
// the queue at fence(); with honourFences false it applies nothing until the
// test flushes it after the collective, as if the executor never fenced.
class DeferredReducer final : public Reducer {
 public:
  explicit DeferredReducer(bool honourFences) : honour_(honourFences) {}
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    const auto* s = static_cast<const uint8_t*>(src);
    pending_.push_back({dst, std::vector<uint8_t>(s, s + count * elementSize(dtype)), count, dtype, op, 0});
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    pending_.push_back({data, {}, count, dtype, ReduceOp::None, divisor});
  }
  void scale(void* data, int64_t count, DataType dtype, double factor) override {
    flush();  // the executor fences a pre-multiplication at once; nothing to defer
    scaleInPlace(data, count, dtype, factor);
  }
  void fence() override {
    ++fences_;
    if (honour_) flush();
  }
  void flush() {
    for (auto& p : pending_) {
      if (p.divisor) {
        divideInPlace(p.dst, p.count, p.dtype, p.divisor);
      } else {
        reduceInto(p.dst, p.src.data(), p.count, p.dtype, p.op);
      }
    }
    pending_.clear();
  }
  int fences() const { return fences_; }

 private:
  struct Op {
    void* dst;
    std::vector<uint8_t> src;
    int64_t count;
    DataType dtype;
    ReduceOp op;
    int64_t divisor;
  };
  bool honour_;
  int fences_ = 0;
  std::vector<Op> pending_;
};

// Runs every allreduce algorithm with deferred reducers; returns how many
// (algorithm, world size) runs ended with a wrong element.
int wrongRunsWithDeferredReducers(bool honourFences) {
  int wrong = 0;
  for (const std::string& algo : allreduceAlgorithms()) {
    // `ordered` (like the shared windows) folds host memory itself, in one
    // pass, not through the channel's reducer.
    if (findAlgorithm(algo)->memory == AlgorithmMemory::Host) continue;
    for (int n : {2, 3, 5}) {
      if (!runsHere(algo, n, 1001, 256, 1024)) continue;
      const int64_t count = 1001;
      std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < count; ++i) bufs[r][i] = static_cast<float>((r + 1) * (i % 13));
      std::vector<std::unique_ptr<DeferredReducer>> reducers;
      for (int r = 0; r < n; ++r) reducers.push_back(std::make_unique<DeferredReducer>(honourFences));
      auto errors = runRanks(n, 1024, [&](int r, Communicator& c) {
        CollectiveOptions o = opts(256);
        o.algorithm = algo;
        c.channel().setReducer(reducers[r].get());
        allreduce(c.channel(), bufs[r].data(), count, DataType::Float32, ReduceOp::Avg, 1, o);
      });
      for (auto& e : errors) CHECK_EQ(e, std::string());
      bool ok = true;
      int fences = 0;
      for (int r = 0; r < n; ++r) {
        fences += reducers[r]->fences();
        reducers[r]->flush();
        for (int64_t i = 0; i < count; ++i) {
          ok = ok && bufs[r][i] == static_cast<float>(n + 1) / 2 * static_cast<float>(i % 13);
        }
      }
      CHECK(fences > 0);  // someone reduced (leaves of a tree or ps clients need not)
      wrong += ok ? 0 : 1;
    }
  }
  return wrong;
}

}  // namespace

// Ordering with a reducer that queues its work: the executor fences every
// reduction before anything reads or sends that memory, so every algorithm
// stays exact; the same runs without honoured fences go wrong, which shows the
// check can fail.
TEST(queued_reductions_are_fenced_before_their_memory_is_sent) {
  CHECK_EQ(wrongRunsWithDeferredReducers(true), 0);
  CHECK(wrongRunsWithDeferredReducers(false) > 0);
}

TEST(half_conversions_round_to_nearest_even) {
  CHECK_EQ(fp16ToFloat(floatToFp16(1.0f)), 1.0f);
  CHECK_EQ(fp16ToFloat(floatToFp16(65504.0f)), 65504.0f);
  CHECK(std::isinf(fp16ToFloat(floatToFp16(65520.0f))));
  CHECK_EQ(fp16ToFloat(floatToFp16(5.9604644775390625e-08f)), 5.9604644775390625e-08f);  // smallest subnormal
  CHECK_EQ(floatToFp16(1.0f + 1.0f / 2048), floatToFp16(1.0f));                          // tie rounds to even
  CHECK_EQ(bf16ToFloat(floatToBf16(3.0f)), 3.0f);
  CHECK(std::isnan(fp16ToFloat(floatToFp16(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h) CHECK_EQ(floatToFp16(fp16ToFloat(static_cast<uint16_t>(h))), h);
}

// foldInto equals, bit for bit, reduceFrom then reduceInto for each later
// input then divideInPlace, for every dtype and op, counts across its tiles,
// with the second output apart, on one of the inputs, or absent, and folded
// in place (the output on the first or the last input).
TEST(a_fold_in_one_pass_has_the_bits_of_the_pairwise_reductions) {
  const std::vector<DataType> dtypes = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                                        DataType::Int8,    DataType::Int32,   DataType::Int64,   DataType::UInt8};
  uint32_t seed = 7;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (DataType dt : dtypes) {
    const int64_t es = static_cast<int64_t>(elementSize(dt));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
      if (!reduceOpSupports(op, dt)) continue;
      for (int k = 2; k <= 5; ++k) {
        for (int64_t count : {int64_t{1}, int64_t{7}, 8192 / es + 3, 3 * 8192 / es - 1}) {
          for (int64_t divisor : {int64_t{1}, int64_t{k}}) {
            if (divisor > 1 && !isFloating(dt)) continue;
            std::vector<std::vector<uint8_t>> in(k, std::vector<uint8_t>(static_cast<size_t>(count * es)));
            for (auto& v : in)
              for (int64_t i = 0; i < count; ++i)
                sctest::storeValue(v.data(), i, dt, static_cast<double>(next() % 61) / 7.0);  // rounding visible
            std::vector<uint8_t> want(in[0].size());
            reduceFrom(want.data(), in[0].data(), in[1].data(), count, dt, op);
            for (int j = 2; j < k; ++j) reduceInto(want.data(), in[j].data(), count, dt, op);
            if (divisor > 1) divideInPlace(want.data(), count, dt, divisor);
            for (int alsoAt : {-2, -1, 0, k - 1}) {  // absent, apart, on the first or the last input
              std::vector<std::vector<uint8_t>> mine = in;
              std::vector<const void*> ptrs;
              for (auto& v : mine) ptrs.push_back(v.data());
              std::vector<uint8_t> dst(want.size()), apart(want.size());
              void* also = alsoAt == -2 ? nullptr : alsoAt == -1 ? apart.data() : mine[alsoAt].data();
              foldInto(dst.data(), also, ptrs.data(), k, count, dt, op, divisor);
              CHECK(dst == want);
              if (alsoAt == -1) CHECK(apart == want);
              if (alsoAt >= 0) CHECK(mine[alsoAt] == want);
            }
            for (int at : {0, k - 1}) {
              std::vector<std::vector<uint8_t>> mine = in;
              std::vector<const void*> ptrs;
              for (auto& v : mine) ptrs.push_back(v.data());
              foldInto(mine[at].data(), nullptr, ptrs.data(), k, count, dt, op, divisor);
              CHECK(mine[at] == want);
            }
          }
        }
      }
    }
  }
}

// fp16 and bf16 sums on the host (AVX2 and F16C where the CPU has them)
// have the bits of the per-element code the GPU kernels share
// (core/elementwise.h): every pairing of the formats' edges (ties,
// subnormals, overflow to infinity, infinities), folds of 2-5 inputs with
// and without AVG's divisor, and the divide alone; a NaN stays a NaN.
template <typename Tag>
void checkHalfSums(DataType dtype, uint16_t exponentMask) {
  std::vector<uint16_t> edge;
  for (uint32_t h : {0x0000u, 0x0001u, 0x0002u, 0x007fu, 0x0080u, 0x03ffu, 0x0400u, 0x0401u, 0x3c00u, 0x3c01u,
                     0x3bffu, 0x3f80u, 0x3f81u, 0x5640u, 0x7bfeu, 0x7bffu, 0x7c00u, 0x7f7eu, 0x7f7fu, 0x7f80u}) {
    if ((h & exponentMask) == exponentMask && (h & ~exponentMask & 0x7fffu) != 0) continue;  // a NaN
    edge.push_back(static_cast<uint16_t>(h));
    edge.push_back(static_cast<uint16_t>(h | 0x8000u));
  }
  uint32_t seed = 11;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  for (int i = 0; i < 2000; ++i) {
    const auto h = static_cast<uint16_t>(next() >> 16);
    if ((h & exponentMask) != exponentMask) edge.push_back(h);  // no NaN among the inputs
  }
  const int64_t n = 40003;  // not a multiple of 8: the tail too
  const auto sum = [](uint16_t a, uint16_t b) { return reduceElement<Tag, ReduceOp::Sum>(a, b); };
  const auto same = [](uint16_t got, uint16_t want) {
    const float g = Storage<Tag>::load(got), w = Storage<Tag>::load(want);
    return got == want || (std::isnan(g) && std::isnan(w));
  };
  for (int k = 2; k <= 5; ++k) {
    std::vector<std::vector<uint16_t>> in(k, std::vector<uint16_t>(static_cast<size_t>(n)));
    for (int64_t i = 0; i < n; ++i) {
      in[0][i] = edge[static_cast<size_t>(i) % edge.size()];
      in[1][i] = edge[static_cast<size_t>(i) / edge.size() % edge.size()];
      for (int j = 2; j < k; ++j) in[j][i] = edge[next() % edge.size()];
    }
    std::vector<const void*> ptrs;
    for (auto& v : in) ptrs.push_back(v.data());
    for (int64_t divisor : {int64_t{1}, int64_t{k}}) {
      std::vector<uint16_t> folded(static_cast<size_t>(n)), pair(static_cast<size_t>(n));
      foldInto(folded.data(), nullptr, ptrs.data(), k, n, dtype, ReduceOp::Avg, divisor);
      reduceFrom(pair.data(), in[0].data(), in[1].data(), n, dtype, ReduceOp::Sum);
      std::vector<uint16_t> divided = in[0];
      divideInPlace(divided.data(), n, dtype, divisor);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t want = sum(in[0][i], in[1][i]);
        CHECK(same(pair[i], want));
        for (int j = 2; j < k; ++j) want = sum(want, in[j][i]);
        if (divisor > 1) want = divideElement<Tag>(want, divisor);
        if (!same(folded[i], want)) {
          throw sctest::Failure{std::string(dataTypeName(dtype)) + " fold of " + std::to_string(k) + " / " +
                                std::to_string(divisor) + " at " + std::to_string(i) + ": " +
                                std::to_string(folded[i]) + ", the per-element code " + std::to_string(want)};
        }
        CHECK(same(divided[i], divideElement<Tag>(in[0][i], divisor)));
      }
    }
  }
}

TEST(half_sums_have_the_bits_of_the_per_element_code) {
  checkHalfSums<Fp16Tag>(DataType::Float16, 0x7c00u);
  checkHalfSums<Bf16Tag>(DataType::BFloat16, 0x7f80u);
}

namespace {

// A link that, like MPI's, moves bytes only when it is called.
class CalledLink final : public Link {
 public:
  CalledLink(int peer, bool called) : Link(peer), called_(called) {}
  size_t trySend(const void*, size_t) override { return 0; }
  size_t tryRecv(RecvConsumer&) override { return 0; }
  void checkPeer() override {}
  bool needsProgress() const override { return called_; }
  void progress() override { ++progressed; }
  int64_t pollMicros() const override { return called_ ? 100000 : kDefaultPollMicros; }
  void close() override {}
  const char* kind() const override { return "called"; }
  int progressed = 0;

 private:
  bool called_;
};

uint64_t blockedAfter(bool called, std::chrono::microseconds idleFor) {
  std::vector<std::unique_ptr<Link>> links(2);
  links[1] = std::make_unique<CalledLink>(1, called);
  auto* link = static_cast<CalledLink*>(links[1].get());
  Communicator comm(0, 2, std::move(links), /*spinMicros=*/0);
  comm.idle({1}, Clock::now() - idleFor);
  CHECK(link->progressed == (called ? 1 : 0));
  return comm.idleCounts().blocked;
}

// A link with a descriptor to poll, like a socket's: a pipe nothing is written to.
class PolledLink final : public Link {
 public:
  explicit PolledLink(int peer) : Link(peer) { CHECK(pipe(fds_) == 0); }
  ~PolledLink() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  size_t trySend(const void*, size_t) override { return 0; }
  size_t tryRecv(RecvConsumer&) override { return 0; }
  void checkPeer() override {}
  void close() override {}
  int waitFd() const override { return fds_[0]; }
  const char* kind() const override { return "polled"; }

 private:
  int fds_[2];
};

// Whether a wait 50 us old blocks, on a crowded machine or not.
uint64_t blockedEarly(bool socket, bool crowded) {
  std::vector<std::unique_ptr<Link>> links(2);
  if (socket)
    links[1] = std::make_unique<PolledLink>(1);
  else
    links[1] = std::make_unique<CalledLink>(1, false);
  Communicator comm(0, 2, std::move(links), /*spinMicros=*/0);
  comm.setCrowded(crowded);
  comm.idle({1}, Clock::now() - std::chrono::microseconds(50));
  return comm.idleCounts().blocked;
}

}  // namespace

// A wait polls as long as its peers' links ask (MPI, which moves bytes, its
// rendezvous replies too, only inside its calls: 100 ms) before it sleeps.
TEST(a_wait_polls_as_long_as_its_peers_links_ask) {
  CHECK_EQ(blockedAfter(true, std::chrono::milliseconds(5)), uint64_t{0});
  CHECK_EQ(blockedAfter(true, std::chrono::seconds(1)), uint64_t{1});
  CHECK_EQ(blockedAfter(false, std::chrono::milliseconds(5)), uint64_t{1});
}

// On a machine with more of the group's ranks than cores, a wait on a socket
// blocks at once; elsewhere, and on links without a descriptor, it yields first.
TEST(a_crowded_machine_blocks_on_sockets_without_yielding_first) {
  CHECK_EQ(blockedEarly(true, false), uint64_t{0});
  CHECK_EQ(blockedEarly(true, true), uint64_t{1});
  CHECK_EQ(blockedEarly(false, true), uint64_t{0});
}

TEST_MAIN()
