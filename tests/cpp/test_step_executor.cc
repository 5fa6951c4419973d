// The step executor (GPU path's schedule runner) on the CPU: every rank is a
// thread with a queue standing in for its CUDA stream; the transport's grouped
// exchange and the reducer's work are queued closures run in issue order after
// runSteps() returns, as NCCL calls and kernels are on a stream. A grouped
// exchange completes only when all its sends were received (rendezvous), so a
// schedule whose steps would deadlock under NCCL deadlocks here too (and times
// out). Results are checked against closed forms for every allreduce algorithm,
// world sizes 1-6, odd counts, Sum/Avg/Max, plus allgather and reduce-scatter.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "algo/barrier.h"
#include "algo/chain.h"
#include "algo/collectives.h"
#include "algo/direct.h"
#include "algo/hier.h"
#include "algo/registry.h"
#include "algo/ring.h"
#include "algo/step_executor.h"
#include "algo/tree.h"
#include "comm/reducer.h"
#include "core/error.h"
#include "harness.h"

using namespace scalecomm;

namespace {

using Queue = std::vector<std::function<void()>>;  // one rank's "stream"

// Messages between ranks: FIFO per (src, dst); a send counts as done when the
// receiver took it.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues;
  std::map<std::pair<int, int>, uint64_t> posted, taken;

  template <typename Pred>
  void waitFor(Pred pred, std::unique_lock<std::mutex>& g, const char* what) {
    if (!cv.wait_for(g, std::chrono::seconds(10), pred)) throw std::runtime_error(std::string("deadlock: ") + what);
  }
};

class QueuedTransport : public StepTransport {
 public:
  QueuedTransport(int rank, Mailbox& box, Queue& queue) : rank_(rank), box_(box), queue_(queue) {}
  void exchange(const std::vector<StepOp>& ops) override {
    queue_.push_back([this, ops] {
      std::unique_lock<std::mutex> g(box_.mu);
      std::map<int, uint64_t> mine;  // per peer: the post count my sends must see taken
      for (const auto& op : ops) {
        if (!op.send) continue;
        const auto* p = static_cast<const uint8_t*>(op.data);
        box_.queues[{rank_, op.peer}].emplace_back(p, p + op.bytes);  // read when the queue runs
        mine[op.peer] = ++box_.posted[{rank_, op.peer}];
      }
      box_.cv.notify_all();
      for (const auto& op : ops) {
        if (op.send) continue;
        auto& q = box_.queues[{op.peer, rank_}];
        box_.waitFor([&] { return !q.empty(); }, g, "receive");
        if (static_cast<int64_t>(q.front().size()) != op.bytes) throw std::runtime_error("message size mismatch");
        if (op.bytes > 0) std::memcpy(op.data, q.front().data(), q.front().size());
        q.pop_front();
        ++box_.taken[{op.peer, rank_}];
        box_.cv.notify_all();
      }
      for (const auto& [peer, n] : mine) {
        box_.waitFor([&, peer = peer, n = n] { return box_.taken[{rank_, peer}] >= n; }, g, "send");
      }
    });
  }
  void* scratch(int64_t bytes) override {
    scratch_.assign(static_cast<size_t>(bytes), 0xEE);
    return scratch_.data();
  }

 private:
  int rank_;
  Mailbox& box_;
  Queue& queue_;
  std::vector<uint8_t> scratch_;
};

// Queues host reductions; src is read when the queue runs (as a kernel would).
class QueuedReducer : public Reducer {
 public:
  explicit QueuedReducer(Queue& q) : q_(q) {}
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    q_.push_back([=] { reduceInto(dst, src, count, dtype, op); });
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    q_.push_back([=] { divideInPlace(data, count, dtype, divisor); });
  }
  void fence() override {}

 private:
  Queue& q_;
};

std::vector<uint8_t*> blocksOf(std::vector<float>& buf, const std::vector<int64_t>& counts) {
  std::vector<uint8_t*> ptrs;
  auto* p = reinterpret_cast<uint8_t*>(buf.data());
  for (int64_t c : counts) {
    ptrs.push_back(p);
    p += c * sizeof(float);
  }
  return ptrs;
}

// Runs one schedule per rank through runSteps on queued streams; returns errors.
std::vector<std::string> runQueued(int n, const std::function<Schedule(int)>& scheduleOf,
                                   std::vector<std::vector<float>>& bufs, const StepRun& run) {
  Mailbox box;
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        Queue queue;
        QueuedTransport transport(r, box, queue);
        QueuedReducer reducer(queue);
        Schedule s = scheduleOf(r);
        runSteps(s, blocksOf(bufs[r], s.blockCounts), run, transport, reducer);
        for (auto& task : queue) task();  // the "stream" runs after issue
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

float input(int rank, int64_t i) { return static_cast<float>((rank + 1) * 3 + (i % 17)); }

}  // namespace

TEST(every_allreduce_algorithm_runs_on_queued_streams) {
  for (const std::string& algo : allreduceAlgorithms()) {
    for (int n = 1; n <= 6; ++n) {
      if (!allreduceServes(algo, n)) continue;
      for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{1001}}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
          std::vector<std::vector<float>> bufs(n, std::vector<float>(count));
          for (int r = 0; r < n; ++r)
            for (int64_t i = 0; i < count; ++i) bufs[r][i] = input(r, i);
          AlgoParams params;
          for (int r = 0; r < n; ++r) params.hostOf.push_back(r / 2);  // hier: 2 ranks per host
          params.psServers = std::min(2, n);
          const bool avg = op == ReduceOp::Avg;
          StepRun run{DataType::Float32, op, avg ? n : 1};
          auto errors =
              runQueued(n, [&](int r) { return allreduceSchedule(algo, r, n, count, avg, params); }, bufs, run);
          for (int r = 0; r < n; ++r) {
            if (!errors[r].empty()) throw sctest::Failure{algo + " n=" + std::to_string(n) + ": " + errors[r]};
            for (int64_t i = 0; i < count; ++i) {
              float want = 0;
              for (int q = 0; q < n; ++q) want = op == ReduceOp::Max ? std::max(want, input(q, i)) : want + input(q, i);
              if (avg) want /= n;
              if (bufs[r][i] != want) {
                throw sctest::Failure{algo + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                                      " op=" + reduceOpName(op) + " rank " + std::to_string(r) + " element " +
                                      std::to_string(i) + ": " + std::to_string(bufs[r][i]) +
                                      " != " + std::to_string(want)};
              }
            }
          }
        }
      }
    }
  }
}

TEST(allgather_and_reduce_scatter_run_on_queued_streams) {
  for (int n = 2; n <= 5; ++n) {
    const int64_t per = 7;
    std::vector<std::vector<float>> bufs(n, std::vector<float>(per * n, -1.0f));
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < per; ++i) bufs[r][r * per + i] = input(r, i);
    auto errors = runQueued(n, [&](int r) { return ringAllgather(r, n, per); }, bufs, StepRun{DataType::Float32});
    for (int r = 0; r < n; ++r) {
      CHECK_EQ(errors[r], std::string());
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < per; ++i) CHECK_EQ(bufs[r][q * per + i], input(q, i));
    }
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < per * n; ++i) bufs[r][i] = input(r, i);
    errors = runQueued(n, [&](int r) { return ringReduceScatter(r, n, per, false); }, bufs, StepRun{DataType::Float32});
    for (int r = 0; r < n; ++r) {
      CHECK_EQ(errors[r], std::string());
      for (int64_t i = 0; i < per; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += input(q, r * per + i);
        CHECK_EQ(bufs[r][r * per + i], want);
      }
    }
  }
}

TEST(tree_broadcast_runs_and_chain_broadcast_is_refused) {
  const int n = 5;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(9, 0.0f));
  for (int64_t i = 0; i < 9; ++i) bufs[2][i] = input(2, i);
  auto errors = runQueued(n, [&](int r) { return treeBroadcast(r, n, 2, 9); }, bufs, StepRun{DataType::Float32});
  for (int r = 0; r < n; ++r) {
    CHECK_EQ(errors[r], std::string());
    for (int64_t i = 0; i < 9; ++i) CHECK_EQ(bufs[r][i], input(2, i));
  }
  // chain receives and forwards the same block within one step (the CPU plan
  // pipelines it by segment); a grouped exchange cannot, so it is refused.
  errors = runQueued(n, [&](int r) { return chainBroadcast(r, n, 2, 9); }, bufs, StepRun{DataType::Float32});
  CHECK(errors[3].find("sends block 0 and also writes it") != std::string::npos);
}

TEST(a_step_may_send_a_block_before_reducing_into_it_but_not_after) {
  // Two ranks swap block 0 and reduce what they receive into it. Sending first
  // is what a grouped exchange does (sends read the block before reductions
  // run); listing the reduction first asks for the other order: refused.
  auto swap = [](bool sendFirst) {
    return [sendFirst](int r) {
      Schedule s;
      s.algorithm = sendFirst ? "send-then-reduce" : "reduce-then-send";
      s.blockCounts = {6};
      ScheduleOp send{OpKind::Send, 1 - r, 0}, reduce{OpKind::RecvReduce, 1 - r, 0};
      s.steps.push_back({sendFirst ? std::vector<ScheduleOp>{send, reduce} : std::vector<ScheduleOp>{reduce, send}});
      return s;
    };
  };
  std::vector<std::vector<float>> bufs(2, std::vector<float>(6));
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < 6; ++i) bufs[r][i] = input(r, i);
  auto errors = runQueued(2, swap(true), bufs, StepRun{DataType::Float32});
  for (int r = 0; r < 2; ++r) {
    CHECK_EQ(errors[r], std::string());
    for (int64_t i = 0; i < 6; ++i) CHECK_EQ(bufs[r][i], input(0, i) + input(1, i));
  }
  errors = runQueued(2, swap(false), bufs, StepRun{DataType::Float32});
  for (int r = 0; r < 2; ++r) CHECK(errors[r].find("reduce-then-send step 0 sends block 0") != std::string::npos);
}

TEST(scratch_is_sized_for_the_largest_step) {
  Schedule s = allreduceSchedule("direct", 0, 4, 40, false);
  // direct: the owner of a block receive-reduces it from the 3 others in one step.
  CHECK_EQ(stepScratchBytes(s, DataType::Float32), int64_t{3 * 10 * 4});
  CHECK_EQ(stepScratchBytes(allreduceSchedule("ring", 0, 4, 40, false), DataType::Float32), int64_t{10 * 4});
}

TEST_MAIN()
