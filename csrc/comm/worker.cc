#include "comm/worker.h"

#include <sched.h>

#include <chrono>

#include "core/error.h"

namespace scalecomm {

Worker::Worker(int64_t spinMicros) : spinMicros_(spinMicros), thread_([this] { loop(); }) {}

Worker::~Worker() { stop(); }

void Worker::post(std::function<void()> job) {
  bool wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    SC_CHECK(!stopping_, "job posted to a stopped worker");
    queue_.push_back(std::move(job));
    unfinished_.fetch_add(1, std::memory_order_relaxed);
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) cv_.notify_one();
}

void Worker::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Worker::loop() {
  for (;;) {
    // Spin a little for the next job before paying for a sleep and a wakeup.
    auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(spinMicros_);
    // Yield while spinning: the thread that will post the next job (or that waits
    // for the one just finished) may need this core.
    while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spinUntil) {
      sched_yield();
    }
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> g(mu_);
      sleeping_ = true;
      cv_.wait(g, [&] { return !queue_.empty() || stopping_; });
      sleeping_ = false;
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    job();
    job = nullptr;  // its captures go before the job counts as finished
    unfinished_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace scalecomm
