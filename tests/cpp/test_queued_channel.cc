// The one executor over a queued channel, on the CPU emulation of NCCL's
// semantics (comm/emulated_queues.h): every rank's work runs on its own queue
// after the host issued it, and grouped sends and receives are rendezvous
// that deadlock where NCCL's grouped calls would. Every collective and
// algorithm of the grid runs here exactly as a GPU would run it (the same
// plans, the same executor, the same channel code; only issueGroup, scratch
// and the reducer are the emulation's), checked against closed forms, with
// segments and pacing; plus the native (`nccl`) collectives, proof that
// nothing runs on the host at issue, and a deadlock that the emulation
// reports.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "algo/collectives.h"
#include "algo/registry.h"
#include "closed_form.h"
#include "comm/emulated_queues.h"
#include "core/error.h"
#include "harness.h"

using namespace scalecomm;

namespace {

// Runs fn(rank, channel) on n threads, then waits for every rank's queue;
// returns the per-rank error messages ("" = ok).
std::vector<std::string> runQueued(int n, const std::function<void(int, EmulatedQueuedChannel&)>& fn,
                                   std::chrono::milliseconds stall = std::chrono::seconds(10),
                                   QueueFabric* fabricOut = nullptr) {
  QueueFabric local(n, stall);
  QueueFabric& fabric = fabricOut != nullptr ? *fabricOut : local;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      EmulatedQueuedChannel& ch = fabric.channel(r);
      try {
        fn(r, ch);
        ch.synchronize(Deadline::after(std::chrono::seconds(30)));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string joined(const std::vector<std::string>& errors) {
  std::string all;
  for (auto& e : errors) all += e.empty() ? "" : "\n    " + e;
  return all;
}

CollectiveOptions opts(const std::string& algo, int64_t segBytes, int64_t sendAheadBytes = 0) {
  CollectiveOptions o;
  o.algorithm = algo;
  o.segmentBytes = segBytes;
  o.sendAheadBytes = sendAheadBytes;
  o.seq = 1;
  o.psServers = 2;
  o.deadline = Deadline::after(std::chrono::seconds(30));
  return o;
}

void setHosts(EmulatedQueuedChannel& ch, int n) {
  std::vector<int> hosts;
  for (int q = 0; q < n; ++q) hosts.push_back(q / 2);
  ch.setHostOf(hosts);
}

// Allreduce algorithms with a schedule that runs on device memory (`shared`
// and `ordered` fold on host memory only).
std::vector<std::string> scheduleAlgorithms() {
  std::vector<std::string> out;
  for (const auto& a : algorithmRegistry())
    if (a.allreduce != nullptr && a.memory != AlgorithmMemory::Host) out.push_back(a.name);
  return out;
}

std::vector<float> rankInput(int r, int64_t count) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((r + 1) * (i % 13));
  return v;
}

}  // namespace

TEST(every_allreduce_algorithm_dtype_and_op_runs_on_queued_channels) {
  std::vector<std::string> algos = scheduleAlgorithms();
  algos.push_back("nccl");  // the native collective, where NCCL has the op and dtype
  for (const std::string& algo : algos) {
    for (int n : {1, 2, 3, 5}) {
      if (algo != "nccl" && !allreduceServes(algo, n)) continue;
      for (DataType t : sctest::kAllTypes) {
        for (ReduceOp op : sctest::kAllOps) {
          if (!reduceOpSupports(op, t)) continue;
          if (t == DataType::UInt8 && (op == ReduceOp::Min || op == ReduceOp::Max)) continue;  // negatives
          const bool native = algo == "nccl";
          const ReduceOp nativeOp = op == ReduceOp::PremulSum ? ReduceOp::Sum : op;
          if (native && !ncclNativeTakes(CollectiveKind::Allreduce, t, nativeOp)) continue;
          const int64_t count = 37;
          std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(count * elementSize(t)));
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i)
              sctest::storeValue(bufs[r].data(), i, t, sctest::reductionInput(r, i, op));
          auto errors = runQueued(n, [&](int r, EmulatedQueuedChannel& ch) {
            setHosts(ch, n);
            allreduce(ch, bufs[r].data(), count, t, op, 2.0, opts(algo, 24));
          });
          const std::string all = joined(errors);
          if (!all.empty())
            throw sctest::Failure{strCat(algo, " n=", n, " ", dataTypeName(t), " ", reduceOpName(op), all)};
          for (int r = 0; r < n; ++r) {
            for (int64_t i = 0; i < count; ++i) {
              const double want = sctest::reducedValue(n, i, op, 2.0, t), got = sctest::loadValue(bufs[r].data(), i, t);
              if (!sctest::matches(got, want, t)) {
                throw sctest::Failure{strCat(algo, " n=", n, " ", dataTypeName(t), " ", reduceOpName(op), " rank ", r,
                                             " element ", i, ": got ", got, " want ", want)};
              }
            }
          }
        }
      }
    }
  }
}

TEST(allreduce_grid_of_algorithms_world_sizes_counts_segments_and_pacing_on_queued_channels) {
  for (const std::string& algo : scheduleAlgorithms()) {
    for (int n : {1, 2, 3, 4, 5, 7, 8}) {
      if (!allreduceServes(algo, n)) continue;
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n - 1}, int64_t{n + 1}, int64_t{1001}, int64_t{100000}}) {
        if (!allreduceServes(algo, n, count * 4)) continue;
        for (int64_t seg : {int64_t{4}, int64_t{100}, int64_t{65536}}) {
          if (seg == 4 && count > 1001) continue;
          for (int64_t ahead : {int64_t{0}, 2 * seg}) {
            std::vector<std::vector<float>> bufs;
            for (int r = 0; r < n; ++r) bufs.push_back(rankInput(r, count));
            auto errors = runQueued(n, [&](int r, EmulatedQueuedChannel& ch) {
              setHosts(ch, n);
              allreduce(ch, bufs[r].data(), count, DataType::Float32, ReduceOp::Sum, 1, opts(algo, seg, ahead));
            });
            const std::string all = joined(errors);
            if (!all.empty()) {
              throw sctest::Failure{strCat(algo, " n=", n, " count=", count, " seg=", seg, " ahead=", ahead, ":", all)};
            }
            const float tri = static_cast<float>(n * (n + 1) / 2);
            for (int r = 0; r < n; ++r)
              for (int64_t i = 0; i < count; ++i) CHECK_EQ(bufs[r][i], tri * static_cast<float>(i % 13));
          }
        }
      }
    }
  }
}

TEST(broadcast_and_reduce_every_algorithm_and_root_on_queued_channels) {
  std::vector<std::string> algos = selectableAlgorithms("broadcast");
  algos.push_back("nccl");
  for (const std::string& algo : algos) {
    for (int n : {2, 3, 4, 5}) {
      for (int root = 0; root < n; ++root) {
        for (int64_t ahead : {int64_t{0}, int64_t{128}}) {
          const int64_t count = 777;
          std::vector<std::vector<int32_t>> b(n, std::vector<int32_t>(count, -1)), red(n);
          for (int64_t i = 0; i < count; ++i) b[root][i] = static_cast<int32_t>(i * 31 + root);
          for (int r = 0; r < n; ++r) red[r] = std::vector<int32_t>(count, r + 1);
          auto errors = runQueued(n, [&](int r, EmulatedQueuedChannel& ch) {
            broadcast(ch, b[r].data(), count, DataType::Int32, root, opts(algo, 64, ahead));
            reduce(ch, red[r].data(), count, DataType::Int32, ReduceOp::Sum, 1, root, opts(algo, 64, ahead));
          });
          const std::string all = joined(errors);
          if (!all.empty()) throw sctest::Failure{strCat(algo, " n=", n, " root=", root, ":", all)};
          for (int r = 0; r < n; ++r) CHECK(b[r] == b[root]);
          for (int64_t i = 0; i < count; ++i) CHECK_EQ(red[root][i], n * (n + 1) / 2);
        }
      }
    }
  }
}

TEST(allgather_reduce_scatter_gather_scatter_alltoall_and_point_to_point_on_queued_channels) {
  for (const std::string& algo : {std::string("ring"), std::string("nccl")}) {
    for (int n : {1, 2, 3, 4, 5, 7}) {
      const int64_t per = 53;
      // allgather into one contiguous buffer (NCCL's form) and reduce-scatter in place
      std::vector<std::vector<int64_t>> gathered(n, std::vector<int64_t>(per * n, -1)), rs(n);
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < per; ++i) gathered[r][r * per + i] = r * 1000 + i;
        for (int64_t i = 0; i < per * n; ++i) rs[r].push_back(r + i);
      }
      // gather / scatter blocks, all-to-all with uneven splits
      std::vector<std::vector<std::vector<float>>> blocks(n, std::vector<std::vector<float>>(n));
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q) blocks[r][q].assign(per, r == q ? static_cast<float>(r + 1) : -1.0f);
      std::vector<std::vector<std::vector<int32_t>>> a2aSend(n, std::vector<std::vector<int32_t>>(n)),
          a2aRecv = a2aSend;
      for (int r = 0; r < n; ++r)
        for (int q = 0; q < n; ++q) {
          a2aSend[r][q].assign(r + q + 1, r * 100 + q);
          a2aRecv[r][q].assign(q + r + 1, -1);
        }
      auto errors = runQueued(n, [&](int r, EmulatedQueuedChannel& ch) {
        CollectiveOptions o = opts(algo, 40, 80);
        std::vector<void*> outs;
        for (int q = 0; q < n; ++q) outs.push_back(gathered[r].data() + q * per);
        allgather(ch, outs, per, DataType::Int64, o);
        reduceScatter(ch, rs[r].data(), per, DataType::Int64, ReduceOp::Sum, 1, o);
        const int root = n - 1;
        std::vector<void*> ptrs;
        for (auto& v : blocks[r]) ptrs.push_back(v.data());
        gather(ch, ptrs, per, DataType::Float32, root, o);
        scatter(ch, ptrs, per, DataType::Float32, root, o);
        std::vector<void*> sp, rp;
        std::vector<int64_t> sc, rc;
        for (int q = 0; q < n; ++q) {
          sp.push_back(a2aSend[r][q].data());
          rp.push_back(a2aRecv[r][q].data());
          sc.push_back(q == r ? 0 : static_cast<int64_t>(a2aSend[r][q].size()));
          rc.push_back(q == r ? 0 : static_cast<int64_t>(a2aRecv[r][q].size()));
        }
        alltoall(ch, sp, sc, rp, rc, DataType::Int32, o);
        // point to point: a ring shift in one batch, then one message each way with rank 0
        if (n > 1) {
          int32_t out = r, in = -1;
          std::vector<PointToPointOp> batch = {{false, &in, 1, DataType::Int32, (r + n - 1) % n, 7, 1},
                                               {true, &out, 1, DataType::Int32, (r + 1) % n, 7, 1}};
          pointToPointBatch(ch, batch, o);
          ch.synchronize(Deadline::after(std::chrono::seconds(10)));
          CHECK_EQ(in, (r + n - 1) % n);
          if (r == 1) sendTo(ch, &out, 1, DataType::Int32, 0, 3, o);
          if (r == 0) recvFrom(ch, &in, 1, DataType::Int32, 1, 3, o);
          ch.synchronize(Deadline::after(std::chrono::seconds(10)));
          if (r == 0) CHECK_EQ(in, 1);
        }
      });
      const std::string all = joined(errors);
      if (!all.empty()) throw sctest::Failure{strCat(algo, " n=", n, ":", all)};
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; i < per; ++i) CHECK_EQ(gathered[r][q * per + i], q * 1000 + i);
        for (int64_t i = 0; i < per; ++i) CHECK_EQ(rs[r][r * per + i], n * (n - 1) / 2 + n * (r * per + i));
        for (int q = 0; q < n; ++q) {
          CHECK(blocks[n - 1][q] == std::vector<float>(per, static_cast<float>(q + 1)));  // gathered at the root
          if (q != r) CHECK(a2aRecv[r][q] == std::vector<int32_t>(q + r + 1, q * 100 + r));
        }
        CHECK(blocks[r][r] == std::vector<float>(per, static_cast<float>(r + 1)));  // scattered back
      }
    }
  }
}

// The executor only issues: with the queue held back, an allreduce returns
// and the buffer is untouched; the result appears once the queue runs.
TEST(nothing_runs_on_the_host_at_issue) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::vector<float>> bufs = {rankInput(0, 1000), rankInput(1, 1000)};
  std::atomic<int> untouchedAtReturn{0}, returned{0};
  auto errors = runQueued(2, [&](int r, EmulatedQueuedChannel& ch) {
    ch.enqueue([&] {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return release; });
    });
    allreduce(ch, bufs[r].data(), 1000, DataType::Float32, ReduceOp::Sum, 1, opts("ring", 256));
    if (bufs[r] == rankInput(r, 1000)) ++untouchedAtReturn;
    if (++returned == 2) {  // the queues run once both ranks have looked (not before the slower one did)
      std::lock_guard<std::mutex> g(mu);
      release = true;
      cv.notify_all();
    }
  });
  CHECK_EQ(joined(errors), std::string());
  CHECK_EQ(untouchedAtReturn.load(), 2);
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 1000; ++i) CHECK_EQ(bufs[r][i], 3.0f * static_cast<float>(i % 13));
}

// Pacing on a queued channel: W segments of a step per group, so more groups
// than unpaced, the same result.
TEST(pacing_puts_a_window_of_segments_in_each_group) {
  int64_t groups[2];
  for (int paced = 0; paced < 2; ++paced) {
    QueueFabric fabric(2);
    std::vector<std::vector<float>> bufs = {rankInput(0, 4096), rankInput(1, 4096)};
    auto errors = runQueued(
        2,
        [&](int r, EmulatedQueuedChannel& ch) {
          allreduce(ch, bufs[r].data(), 4096, DataType::Float32, ReduceOp::Sum, 1,
                    opts("ring", 1024, paced ? 2048 : 0));
        },
        std::chrono::seconds(10), &fabric);
    CHECK_EQ(joined(errors), std::string());
    for (int64_t i = 0; i < 4096; ++i) CHECK_EQ(bufs[1][i], 3.0f * static_cast<float>(i % 13));
    groups[paced] = fabric.groupsRun(0);
  }
  CHECK_EQ(groups[0], int64_t{2});  // ring of 2: a reduce-scatter step and an allgather step, 8 segments each
  CHECK(groups[1] >= 4);
}

// Two ranks that each send before they receive, in separate groups, deadlock
// NCCL (a send waits for its peer's receive); the emulation reports it
// instead of passing. The same exchange in one batch (one group) runs.
TEST(a_deadlock_of_grouped_calls_is_reported) {
  auto errors = runQueued(
      2,
      [&](int r, EmulatedQueuedChannel& ch) {
        int32_t out = r, in = -1;
        CollectiveOptions o = opts("ring", 64);
        sendTo(ch, &out, 1, DataType::Int32, 1 - r, 0, o);
        recvFrom(ch, &in, 1, DataType::Int32, 1 - r, 0, o);
      },
      std::chrono::milliseconds(300));
  for (const auto& e : errors) CHECK(e.find("stalled") != std::string::npos || e.find("aborted") != std::string::npos);
  CHECK(errors[0].find("stalled") != std::string::npos || errors[1].find("stalled") != std::string::npos);
}

TEST(nccl_without_the_op_or_off_the_queue_is_refused_with_what_to_choose) {
  auto errors = runQueued(2, [&](int r, EmulatedQueuedChannel& ch) {
    int32_t x[4] = {1, 2, 3, 4};
    allreduce(ch, x, 4, DataType::Int32, ReduceOp::BXor, 1, opts("nccl", 64));
  });
  CHECK(errors[0].find("NCCL has no bxor on int32") != std::string::npos);
  CHECK(errors[0].find("choose a scalecomm algorithm") != std::string::npos);
}

TEST_MAIN()
