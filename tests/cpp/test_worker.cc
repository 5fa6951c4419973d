// The group's worker thread: order, stop() draining the queue, and the owner
// destroyed from inside one of its own jobs (no std::terminate, the jobs
// queued behind it still run).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "comm/worker.h"
#include "harness.h"

using namespace scalecomm;

namespace {

bool waitFor(const std::function<bool()>& done, int ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST(jobs_run_in_posting_order_and_stop_drains_the_queue) {
  std::vector<int> order;
  {
    Worker w(10);
    for (int i = 0; i < 100; ++i) w.post([&order, i] { order.push_back(i); });
    w.stop();
    CHECK(w.idle());
  }
  CHECK_EQ(order.size(), size_t{100});
  for (int i = 0; i < 100; ++i) CHECK_EQ(order[i], i);
}

TEST(the_owner_may_be_destroyed_by_one_of_its_own_jobs) {
  auto owner = std::make_unique<Worker>(0);
  Worker* w = owner.get();
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  std::atomic<bool> sawItself{false};
  // Hold the thread until everything is queued, then destroy the Worker from
  // its own thread with one more job behind it.
  w->post([&] {
    while (!release.load()) std::this_thread::yield();
  });
  w->post([&] {
    sawItself = owner->onWorkerThread();
    owner.reset();
    ran.fetch_add(1);
  });
  w->post([&] { ran.fetch_add(1); });
  CHECK(!w->onWorkerThread());
  release = true;
  CHECK(waitFor([&] { return ran.load() == 2; }));
  CHECK(sawItself.load());
  CHECK(owner == nullptr);
}

TEST_MAIN()
