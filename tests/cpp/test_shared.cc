// The shared-window algorithms: ranks as threads connect a real shm mesh
// (each maps every rank's window) and run allreduce and barrier on it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "algo/registry.h"
#include "algo/shared.h"
#include "comm/communicator.h"
#include "comm/reducer.h"
#include "comm/stream_channel.h"
#include "core/error.h"
#include "harness.h"

using namespace scalecomm;

namespace {

constexpr int64_t kWindow = 4096;

using Body = std::function<void(int rank, Communicator& comm)>;
using MeshOf = std::function<MeshOptions(int rank)>;

MeshOptions sharedMesh(int) {
  MeshOptions mo;
  mo.transport = "shm";
  mo.useMpi = false;
  mo.shmRingBytes = 1 << 16;
  mo.shmWindowBytes = kWindow;
  return mo;
}

// The ranks of the mesh a thread runs in, and how many have their outcome.
struct MeshOutcomes {
  int n = 0;
  std::atomic<int> done{0};
};
thread_local MeshOutcomes* tlMesh = nullptr;
thread_local bool tlDone = false;

void markDone() {
  if (tlMesh != nullptr && !tlDone) {
    tlDone = true;
    tlMesh->done.fetch_add(1);
  }
}

// Runs body on n threads, each with its own communicator; returns each rank's error ("" if none).
std::vector<std::string> onMesh(int n, const Body& body, const MeshOf& meshOf = sharedMesh) {
  static std::atomic<int> groups{0};
  MemoryStore store;
  const std::string key = "shared-" + std::to_string(groups++);
  std::vector<std::string> errors(n);
  MeshOutcomes outcomes;
  outcomes.n = n;
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      tlMesh = &outcomes;
      tlDone = false;
      try {
        auto comm = Communicator::connectMesh(store, key, r, n, meshOf(r), Deadline::after(std::chrono::seconds(20)));
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      } catch (const sctest::Failure& f) {
        errors[r] = f.msg;
      }
      markDone();
      tlMesh = nullptr;
    });
  }
  for (auto& t : ts) t.join();
  return errors;
}

CollectiveOptions sharedOptions(uint64_t seq, int64_t timeoutMs = 20000) {
  CollectiveOptions o;
  o.algorithm = "shared";
  o.seq = seq;
  o.timeoutMs = timeoutMs;
  o.deadline = Deadline::after(std::chrono::milliseconds(timeoutMs));
  return o;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A failed rank's group keeps its links open until it is destroyed: hold the
// communicator after an error until every rank of the mesh has its own
// outcome (at most 10 s), so a peer finds its own error rather than the
// closed links, however slowly it runs (a sanitizer on a loaded machine).
void keepLinksAfterError(const std::function<void()>& f) {
  try {
    f();
  } catch (...) {
    markDone();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (tlMesh != nullptr && tlMesh->done.load() < tlMesh->n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    throw;
  }
}

}  // namespace

TEST(windows_exist_only_when_every_rank_is_linked_by_shm_with_the_same_size) {
  auto windowOf = [](const MeshOf& meshOf) {
    std::vector<int64_t> seen(3, -1);
    auto errors = onMesh(3, [&](int r, Communicator& c) { seen[r] = sharedWindowBytes(c); }, meshOf);
    for (auto& e : errors) CHECK_EQ(e, std::string());
    return seen;
  };
  CHECK(windowOf(sharedMesh) == std::vector<int64_t>(3, kWindow));
  // One rank forcing tcp: its pairs are tcp, so no rank gets windows.
  CHECK(windowOf([](int r) {
          MeshOptions mo = sharedMesh(r);
          mo.transport = r == 2 ? "tcp" : "auto";
          return mo;
        }) == std::vector<int64_t>(3, 0));
  // Window sizes that differ between ranks: none.
  CHECK(windowOf([](int r) {
          MeshOptions mo = sharedMesh(r);
          mo.shmWindowBytes = r == 1 ? 2 * kWindow : kWindow;
          return mo;
        }) == std::vector<int64_t>(3, 0));
  CHECK(windowOf([](int r) {
          MeshOptions mo = sharedMesh(r);
          mo.shmWindowBytes = 0;
          return mo;
        }) == std::vector<int64_t>(3, 0));
}

// Every dtype and op at 2-4 ranks, counts up to the window, in place; the
// result is the rank-order fold, bitwise equal on every rank.
TEST(shared_allreduce_is_exact_and_bitwise_equal_on_every_rank) {
  const std::vector<DataType> dtypes = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                                        DataType::Int32,   DataType::Int64,   DataType::UInt8};
  for (int n = 2; n <= 4; ++n) {
    std::vector<std::vector<std::vector<uint8_t>>> results(n);
    std::vector<std::vector<std::vector<uint8_t>>> expected(n);
    auto errors = onMesh(n, [&](int r, Communicator& comm) {
      uint64_t seq = 0;
      std::mt19937 gen(1234);  // the same stream on every rank: every rank knows every input
      for (DataType dt : dtypes) {
        const int64_t es = static_cast<int64_t>(elementSize(dt));
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
          if (!reduceOpSupports(op, dt)) continue;
          for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100}, kWindow / es}) {
            std::vector<std::vector<uint8_t>> inputs(n, std::vector<uint8_t>(static_cast<size_t>(count * es)));
            for (auto& in : inputs) {
              for (int64_t i = 0; i < count; ++i) {
                // small values (exact products), fractions for floats (rounding visible)
                const double v = static_cast<double>(gen() % 5) + (gen() % 2 ? 0.5 : 0.0) + 1;
                sctest::storeValue(in.data(), i, dt, v);
              }
            }
            std::vector<uint8_t> want = inputs[0];
            for (int q = 1; q < n; ++q) reduceInto(want.data(), inputs[q].data(), count, dt, op);
            if (op == ReduceOp::Avg) divideInPlace(want.data(), count, dt, n);
            std::vector<uint8_t> data = inputs[r];
            allreduce(comm.channel(), data.data(), count, dt, op, 1.0, sharedOptions(++seq));
            results[r].push_back(data);
            expected[r].push_back(want);
          }
        }
      }
    });
    for (auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 0; r < n; ++r) {
      CHECK_EQ(results[r].size(), results[0].size());
      for (size_t k = 0; k < results[r].size(); ++k) {
        CHECK(results[r][k] == results[0][k]);  // bitwise equal across ranks
        CHECK(results[r][k] == expected[r][k]);
      }
    }
  }
}

// Above the window: chunks of the window, each reduced in slices by every
// rank; exact (closed form), bitwise equal on every rank, at world sizes 1-8
// and counts that end mid-chunk and mid-slice, back to back, one rank jittering.
TEST(shared_allreduce_above_the_window_is_exact_at_every_world_size) {
  for (int n = 1; n <= 8; ++n) {
    std::vector<std::vector<std::vector<uint8_t>>> results(n);
    auto errors = onMesh(n, [&](int r, Communicator& comm) {
      std::mt19937 jitter(r + 11);
      uint64_t seq = 0;
      for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Int64, DataType::UInt8}) {
        const int64_t es = static_cast<int64_t>(elementSize(dt));
        const int64_t perWindow = kWindow / es;
        for (int64_t count : {perWindow + 1, 3 * perWindow - 5, 7 * perWindow / 2 + 3 * n}) {
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
            if (!reduceOpSupports(op, dt) || (op == ReduceOp::Avg && !isFloating(dt))) continue;
            std::vector<uint8_t> data(static_cast<size_t>(count * es));
            for (int64_t i = 0; i < count; ++i)
              sctest::storeValue(data.data(), i, dt, (i + r) % 3 + (op == ReduceOp::Avg ? n : 0));
            if (jitter() % 3 == 0) std::this_thread::yield();
            allreduce(comm.channel(), data.data(), count, dt, op, 1.0, sharedOptions(++seq));
            for (int64_t i = 0; i < count; ++i) {
              double want = 0;
              for (int q = 0; q < n; ++q) {
                const double v = (i + q) % 3 + (op == ReduceOp::Avg ? n : 0);
                want = op == ReduceOp::Max ? (q == 0 ? v : std::max(want, v)) : want + v;
              }
              if (op == ReduceOp::Avg) want /= n;
              const double got = sctest::loadValue(data.data(), i, dt);
              if (std::fabs(got - want) > 0.02 * std::fabs(want) + 1e-9) {
                throw Error(ErrorKind::Internal, strCat(dataTypeName(dt), " ", reduceOpName(op), " count ", count,
                                                        " element ", i, ": ", got, " != ", want));
              }
            }
            results[r].push_back(data);
          }
        }
      }
    });
    for (auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);  // bitwise equal across ranks
  }
}

// From 3 ranks a message above kSlicesFromBytes that fits the window runs in
// slices of the message split evenly (one chunk): exact, bitwise equal on
// every rank, at counts that end mid-slice and at the window's edge.
TEST(shared_allreduce_in_slices_within_the_window_is_exact) {
  constexpr int64_t kBig = 4 * kSlicesFromBytes;
  const MeshOf bigWindows = [](int r) {
    MeshOptions mo = sharedMesh(r);
    mo.shmWindowBytes = kBig;
    return mo;
  };
  for (int n = 2; n <= 5; ++n) {
    std::vector<std::vector<std::vector<uint8_t>>> results(n);
    auto errors = onMesh(
        n,
        [&](int r, Communicator& comm) {
          uint64_t seq = 0;
          for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Int64}) {
            const int64_t es = static_cast<int64_t>(elementSize(dt));
            for (int64_t count : {kSlicesFromBytes / es + 1, (kSlicesFromBytes + 4096) / es + 3 * n, kBig / es}) {
              CHECK_EQ(sharedInSlices(n, count * es, kBig), n > 2);
              std::vector<uint8_t> data(static_cast<size_t>(count * es));
              for (int64_t i = 0; i < count; ++i) sctest::storeValue(data.data(), i, dt, (i * 7 + r) % 5);
              allreduce(comm.channel(), data.data(), count, dt, ReduceOp::Sum, 1.0, sharedOptions(++seq));
              for (int64_t i = 0; i < count; ++i) {
                double want = 0;
                for (int q = 0; q < n; ++q) want += (i * 7 + q) % 5;
                const double got = sctest::loadValue(data.data(), i, dt);
                if (got != want) {
                  throw Error(ErrorKind::Internal,
                              strCat(dataTypeName(dt), " count ", count, " element ", i, ": ", got, " != ", want));
                }
              }
              results[r].push_back(data);
            }
          }
        },
        bigWindows);
    for (auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);
  }
}

// Back-to-back calls with no barrier between them, one rank jittering: a
// call's window data must never be overwritten while a peer still reads it,
// within a message above the window and from one call to the next, as the
// log wraps after calls of every size up to the window.
TEST(consecutive_calls_never_overwrite_data_a_peer_still_reads) {
  const int n = 3;
  const int calls = 3000;
  const size_t sizes[] = {
      64, 5 * kWindow / 2 / sizeof(double) + 3, kWindow / sizeof(double), kWindow / sizeof(double) - 1,
      3,  kWindow / 2 / sizeof(double) + 1};
  auto errors = onMesh(n, [&](int r, Communicator& comm) {
    std::mt19937 jitter(r + 7);
    std::mt19937 order(11);  // the same sizes on every rank
    std::vector<double> data;
    for (int k = 1; k <= calls; ++k) {
      data.resize(sizes[order() % std::size(sizes)]);
      for (size_t i = 0; i < data.size(); ++i) data[i] = k * 1000.0 + r * 10.0 + static_cast<double>(i);
      if (jitter() % 8 == 0) std::this_thread::yield();
      if (k % 5 == 0) {
        barrier(comm.channel(), sharedOptions(k));
        continue;
      }
      allreduce(comm.channel(), data.data(), static_cast<int64_t>(data.size()), DataType::Float64, ReduceOp::Sum, 1.0,
                sharedOptions(k));
      for (size_t i = 0; i < data.size(); ++i) {
        const double want = n * (k * 1000.0 + static_cast<double>(i)) + 10.0 * (0 + 1 + 2);
        if (data[i] != want) {
          throw Error(ErrorKind::Internal, strCat("call ", k, " element ", i, ": ", data[i], " != ", want));
        }
      }
    }
  });
  for (auto& e : errors) CHECK_EQ(e, std::string());
}

TEST(ranks_that_disagree_get_an_error_naming_both_sides) {
  // Different counts.
  auto errors = onMesh(2, [&](int r, Communicator& comm) {
    std::vector<float> data(r == 0 ? 5 : 6, 1.0f);
    allreduce(comm.channel(), data.data(), static_cast<int64_t>(data.size()), DataType::Float32, ReduceOp::Sum, 1.0,
              sharedOptions(1));
  });
  for (auto& e : errors) {
    CHECK(contains(e, "scalecomm allreduce (rank "));
    CHECK(contains(e, "same shape and dtype"));
  }
  // A barrier against an allreduce: an error, not wrong data or a hang.
  errors = onMesh(2, [&](int r, Communicator& comm) {
    std::vector<float> data(4, 1.0f);
    if (r == 0) {
      barrier(comm.channel(), sharedOptions(1));
    } else {
      allreduce(comm.channel(), data.data(), 4, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(1));
    }
  });
  for (auto& e : errors) CHECK(contains(e, "all ranks must call the same collectives in the same order"));
}

// Ranks whose messages differ in size can pick different algorithms (auto
// chooses per size): one waits on the windows, the other on the links. Both
// must get the mismatch error, not wait for the timeout.
TEST(ranks_on_different_channels_get_the_mismatch_error_not_a_timeout) {
  for (const char* linked : {"pairwise", "ring"}) {
    const auto start = std::chrono::steady_clock::now();
    auto errors = onMesh(2, [&](int r, Communicator& comm) {
      std::vector<float> data(r == 0 ? 5 : 6, 1.0f);
      CollectiveOptions o = sharedOptions(1, 10000);
      if (r == 0) o.algorithm = linked;
      keepLinksAfterError([&] {
        allreduce(comm.channel(), data.data(), static_cast<int64_t>(data.size()), DataType::Float32, ReduceOp::Sum, 1.0,
                  o);
      });
    });
    for (auto& e : errors) CHECK(contains(e, "same shape and dtype"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  // Same shape, different algorithms (settings that differ per rank).
  auto errors = onMesh(2, [&](int r, Communicator& comm) {
    std::vector<float> data(6, 1.0f);
    CollectiveOptions o = sharedOptions(1, 10000);
    if (r == 1) o.algorithm = "ring";
    keepLinksAfterError([&] { allreduce(comm.channel(), data.data(), 6, DataType::Float32, ReduceOp::Sum, 1.0, o); });
  });
  CHECK(contains(errors[0], "runs it with algorithm ring but this rank with shared"));
  CHECK(contains(errors[1], "runs it with algorithm shared but this rank with ring"));
}

// auto's agreement runs over the links right after a measured call, under
// the call's seq. Ranks that reach it first wait for the late one and look at
// their peers' windows meanwhile: the call each peer published there must not
// pass for a peer running the agreement on the windows (nor the agreement on
// a link for a peer running the call over links).
TEST(auto_s_agreement_after_a_shared_call_is_not_taken_for_that_call) {
  auto errors = onMesh(3, [&](int r, Communicator& comm) {
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      std::vector<float> data(2, static_cast<float>(r + 1));
      allreduce(comm.channel(), data.data(), 2, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(seq));
      CHECK(data == std::vector<float>(2, 6.0f));
      if (r == static_cast<int>(seq % 3)) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      CollectiveOptions agree = sharedOptions(seq);
      agree.algorithm = "ring";
      agree.part = CallPart::Agreement;
      std::vector<double> times(12, static_cast<double>(r));
      allreduce(comm.channel(), times.data(), 12, DataType::Float64, ReduceOp::Max, 1.0, agree);
      CHECK(times == std::vector<double>(12, 2.0));
    }
  });
  for (auto& e : errors) CHECK_EQ(e, std::string());
  // A rank in the agreement while a peer is in the call's own exchange
  // (over the links) is told so by name, not left to a timeout.
  errors = onMesh(2, [&](int r, Communicator& comm) {
    std::vector<double> times(12, 1.0);
    CollectiveOptions o = sharedOptions(7, 10000);
    o.algorithm = "ring";
    if (r == 1) o.part = CallPart::Agreement;
    keepLinksAfterError([&] { allreduce(comm.channel(), times.data(), 12, DataType::Float64, ReduceOp::Max, 1.0, o); });
  });
  CHECK(contains(errors[0], "rank 1 is in auto's agreement on its times while this rank is in the call"));
  CHECK(contains(errors[1], "rank 0 is in the call while this rank is in auto's agreement on its times"));
  CHECK(contains(errors[1], "(rank 1, seq 7, auto's agreement on its times)"));
}

TEST(a_missing_peer_times_out_by_name_and_abort_ends_the_wait) {
  auto errors = onMesh(3, [&](int r, Communicator& comm) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // never calls; keeps its links open
      return;
    }
    std::vector<float> data(4, 1.0f);
    allreduce(comm.channel(), data.data(), 4, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(1, 300));
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(contains(errors[r], "Timed out after 300 ms waiting for rank 2 (1 shared call behind)"));
  }
  CHECK_EQ(errors[2], std::string());
  // abort() from another thread wakes the waiting rank.
  errors = onMesh(2, [&](int r, Communicator& comm) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      comm.abort();
    });
    try {
      barrier(comm.channel(), sharedOptions(1));
    } catch (...) {
      aborter.join();
      throw;
    }
    aborter.join();
  });
  CHECK(contains(errors[0], "aborted"));
}

TEST(a_peer_missing_from_a_message_above_the_window_is_named_not_waited_for) {
  // Rank 2 takes part in a small call, then never calls the large one: the
  // others time out naming it instead of waiting or reading stale cells.
  auto errors = onMesh(3, [&](int r, Communicator& comm) {
    std::vector<float> data(4 * kWindow, 1.0f);  // 4 chunks of the window
    if (r == 2) {
      allreduce(comm.channel(), data.data(), kWindow / 4, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(1, 300));
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    allreduce(comm.channel(), data.data(), kWindow / 4, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(1, 300));
    keepLinksAfterError([&] {
      allreduce(comm.channel(), data.data(), 4 * kWindow, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(2, 300));
    });
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(contains(errors[r], "scalecomm allreduce (rank " + std::to_string(r) + ", seq 2)"));
    CHECK(contains(errors[r], "Timed out after 300 ms waiting for rank 2"));
  }
  CHECK_EQ(errors[2], std::string());
}

TEST(a_peer_that_leaves_is_reported_not_waited_for) {
  auto errors = onMesh(2, [&](int r, Communicator& comm) {
    if (r == 1) {
      comm.closeLinks();  // what a rank that fails or is destroyed does
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    barrier(comm.channel(), sharedOptions(1));
  });
  CHECK(contains(errors[0], "scalecomm barrier (rank 0, seq 1)"));
  CHECK(contains(errors[0], "closed its shared-memory link"));
}

TEST(shared_serves_every_size_where_the_group_has_windows_and_auto_prices_it) {
  AlgoParams none;
  AlgoParams windows;
  windows.windowBytes = kWindow;
  auto has = [](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), "shared") != v.end(); };
  CHECK(!has(autoAllreduceCandidates(4, 1024, none)));
  CHECK(has(autoAllreduceCandidates(4, 1024, windows)));
  CHECK(has(autoAllreduceCandidates(4, 100 * kWindow, windows)));
  CHECK(!allreduceServes("shared", 2, 64));
  CHECK(allreduceServes("shared", 2, 64, windows));
  CHECK(allreduceServes("shared", 2, int64_t{1} << 30, windows));
  // Above the window: one flag round per chunk and one to finish; each byte
  // copied about twice (in and out) instead of the one-round path's n reads.
  CostParams p;
  p.alpha = 1e-6;
  p.beta = 1e-10;
  p.gamma = 0;
  const double ten = predictAllreduceSeconds("shared", 2, 10 * kWindow, p, windows);
  CHECK(std::fabs(ten - (11 * p.alpha + p.beta * 10 * kWindow * 3 / 4)) < 1e-12);
  // Bandwidth-bound, it beats the ring, whose every byte crosses a link.
  p.alpha = 1e-9;
  CHECK(predictAllreduceSeconds("shared", 4, 1000 * kWindow, p, windows) <
        predictAllreduceSeconds("ring", 4, 1000 * kWindow, p, windows));
}

// A rank that waits long sleeps on its doorbell (a handful of 1 ms naps,
// not a poll every few microseconds) and its peer's bytes wake it: for a
// message that arrives late, for room in a full ring, and for a window post.
TEST(a_long_wait_sleeps_on_the_doorbell_and_the_peer_wakes_it) {
  constexpr int kRounds = 20;
  constexpr auto kLate = std::chrono::milliseconds(5);
  std::vector<Communicator::IdleCounts> counts(2);
  const auto errors = onMesh(2, [&](int rank, Communicator& comm) {
    auto opts = [](uint64_t seq) {
      CollectiveOptions o = sharedOptions(seq);
      o.algorithm = "";
      return o;
    };
    // A small message sent late: rank 1 waits for data.
    std::vector<float> small(256);
    for (int k = 1; k <= kRounds; ++k) {
      if (rank == 0) {
        std::this_thread::sleep_for(kLate);
        std::fill(small.begin(), small.end(), static_cast<float>(k));
        sendTo(comm.channel(), small.data(), 256, DataType::Float32, 1, 0, opts(k));
      } else {
        recvFrom(comm.channel(), small.data(), 256, DataType::Float32, 0, 0, opts(k));
        CHECK(small.front() == static_cast<float>(k) && small.back() == static_cast<float>(k));
      }
    }
    // A message 16x the ring, received late: rank 0 waits for room.
    std::vector<float> big((1 << 20) / 4, 1.0f);
    for (int k = kRounds + 1; k <= kRounds + 3; ++k) {
      if (rank == 0) {
        sendTo(comm.channel(), big.data(), static_cast<int64_t>(big.size()), DataType::Float32, 1, 0, opts(k));
      } else {
        std::this_thread::sleep_for(kLate);
        recvFrom(comm.channel(), big.data(), static_cast<int64_t>(big.size()), DataType::Float32, 0, 0, opts(k));
      }
    }
    // A shared window call that rank 0 joins late.
    for (int k = 1; k <= kRounds; ++k) {
      if (rank == 0) std::this_thread::sleep_for(kLate);
      std::vector<float> data(64, 1.0f);
      allreduce(comm.channel(), data.data(), 64, DataType::Float32, ReduceOp::Sum, 1.0, sharedOptions(k));
      CHECK(data[0] == 2.0f);
    }
    counts[rank] = comm.idleCounts();
  });
  CHECK(errors[0].empty() && errors[1].empty());
  // Rank 1 waited about 2 x 20 x 5 ms; polling in 20 us slices took thousands of naps.
  // A wait ends on a ring when the ring finds it asleep: most of the 40, and
  // at least half as many on a loaded machine (a sanitizer build next to other
  // jobs: 18-40 seen); without the doorbell, none.
  CHECK(counts[1].blocked < 2 * kRounds * 12);
  CHECK(counts[1].rung >= kRounds / 2);
  CHECK(counts[0].rung >= 1);  // room in the full ring woke rank 0
}

TEST(a_wait_on_the_callers_own_thread_spins_its_own_budget_before_it_sleeps) {
  std::vector<uint64_t> asCaller(2), asWorker(2);
  std::atomic<int> finished{0};
  const auto errors = onMesh(2, [&](int rank, Communicator& comm) {
    comm.setSpinMicros(50);
    comm.setCallerSpinMicros(100000);  // far beyond the wait: a preempted thread cannot run past it
    // Waits until `d` has passed, or (untilBlocked) until the first sleep,
    // 200 ms at most; returns the sleeps.
    const auto waitFor = [&](std::chrono::microseconds d, bool untilBlocked) {
      const Clock::time_point since = Clock::now();
      const uint64_t before = comm.idleCounts().blocked;
      while (Clock::now() - since < d && !(untilBlocked && comm.idleCounts().blocked > before))
        comm.idle({1 - rank}, since, [] { return false; });
      return comm.idleCounts().blocked - before;
    };
    {
      const CallerWaits caller;
      asCaller[rank] = waitFor(std::chrono::microseconds(2000), false);
    }
    // Past the 200 us poll window it sleeps (waited for, not timed: a thread
    // preempted for the whole of a short wait would never call idle() past it).
    asWorker[rank] = waitFor(std::chrono::microseconds(200000), true);
    finished.fetch_add(1);
    while (finished.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  CHECK(errors[0].empty() && errors[1].empty());
  for (int r = 0; r < 2; ++r) {
    CHECK_EQ(asCaller[r], uint64_t{0});
    CHECK(asWorker[r] > 0);
  }
}

TEST_MAIN()
