#include "group/bounded_store.h"

namespace scalecomm {

BoundedStore::BoundedStore(std::shared_ptr<Store> store) : s_(std::make_shared<Shared>()) {
  s_->store = std::move(store);
  thread_ = std::thread([s = s_] { loop(s); });  // the thread keeps the state alive
}

BoundedStore::~BoundedStore() {
  {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->stopping = true;
    s_->queue.clear();  // queries nobody waits for any more
  }
  s_->cv.notify_all();
  if (!thread_.joinable()) return;
  bool hung;
  {
    std::lock_guard<std::mutex> g(s_->mu);
    hung = s_->running;
  }
  if (hung || std::this_thread::get_id() == thread_.get_id()) {
    thread_.detach();  // it ends once the store answers (or with the process)
  } else {
    thread_.join();
  }
}

bool BoundedStore::run(std::function<void(Store&)> fn, const Deadline& deadline) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  std::unique_lock<std::mutex> g(s_->mu);
  s_->queue.push_back(job);
  s_->cv.notify_all();
  if (!s_->cv.wait_until(g, deadline.at(), [&] { return job->done; })) return false;
  if (job->error) std::rethrow_exception(job->error);
  return true;
}

bool BoundedStore::post(std::function<void(Store&)> fn) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  std::lock_guard<std::mutex> g(s_->mu);
  if (s_->running || !s_->queue.empty()) return false;
  s_->queue.push_back(std::move(job));
  s_->cv.notify_all();
  return true;
}

Clock::time_point BoundedStore::busySince() const {
  std::lock_guard<std::mutex> g(s_->mu);
  return s_->running ? s_->since : Clock::time_point::max();
}

void BoundedStore::loop(const std::shared_ptr<Shared>& s) {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> g(s->mu);
      s->cv.wait(g, [&] { return !s->queue.empty() || s->stopping; });
      if (s->stopping) return;
      job = std::move(s->queue.front());
      s->queue.pop_front();
      s->running = true;
      s->since = Clock::now();
    }
    std::exception_ptr error;
    try {
      job->fn(*s->store);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> g(s->mu);
      s->running = false;
      job->done = true;
      job->error = error;
    }
    s->cv.notify_all();
  }
}

}  // namespace scalecomm
