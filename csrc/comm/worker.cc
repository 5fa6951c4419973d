#include "comm/worker.h"

#include <sched.h>

#include <chrono>

#include "core/error.h"

namespace scalecomm {

Worker::Worker(int64_t spinMicros) : s_(std::make_shared<Shared>()) {
  s_->spinMicros = spinMicros;
  thread_ = std::thread([s = s_] { loop(s); });  // the thread keeps the state alive
}

Worker::~Worker() { stop(); }

void Worker::post(std::function<void()> job) {
  bool wake;
  {
    std::lock_guard<std::mutex> g(s_->mu);
    SC_CHECK(!s_->stopping, "job posted to a stopped worker");
    s_->queue.push_back(std::move(job));
    s_->unfinished.fetch_add(1, std::memory_order_relaxed);
    s_->queued.fetch_add(1, std::memory_order_release);
    wake = s_->sleeping;
  }
  if (wake) s_->cv.notify_one();
}

void Worker::stop() {
  {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->stopping = true;
  }
  s_->cv.notify_one();
  if (!thread_.joinable()) return;
  if (onWorkerThread()) {
    thread_.detach();  // it drains the queue and ends on its own
  } else {
    thread_.join();
  }
}

void Worker::loop(const std::shared_ptr<Shared>& s) {
  for (;;) {
    // Spin a little for the next job before paying for a sleep and a wakeup.
    auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(s->spinMicros);
    // Yield while spinning: the thread that will post the next job (or that waits
    // for the one just finished) may need this core.
    while (s->queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spinUntil) {
      sched_yield();
    }
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> g(s->mu);
      s->sleeping = true;
      s->cv.wait(g, [&] { return !s->queue.empty() || s->stopping; });
      s->sleeping = false;
      if (s->queue.empty()) return;  // stopping and drained
      job = std::move(s->queue.front());
      s->queue.pop_front();
      s->queued.fetch_sub(1, std::memory_order_relaxed);
    }
    job();
    job = nullptr;  // its captures go before the job counts as finished
    s->unfinished.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace scalecomm
