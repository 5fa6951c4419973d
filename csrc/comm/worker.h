// scalecomm comm: the group's worker thread.
//
// Contract: jobs posted from any thread run one at a time, in posting order, on
// one dedicated thread; this is what makes collectives asynchronous to the
// caller yet ordered as issued. After a job the thread spins briefly
// (spinMicros) for the next one before sleeping, which keeps back-to-back small
// collectives fast. stop() runs every job already posted, then joins (jobs must
// end on their own: collectives are bounded by their deadline). stop() or the
// destructor may also run on the worker thread itself (a job dropped the last
// reference to the owner, e.g. Python's garbage collector ran in a future
// callback): the thread cannot join itself, so it is detached and drains the
// queue on state it shares with the Worker, which stays alive until the thread
// ends. A job must not throw (wrap it); post() after stop() is an internal
// error. idle(): nothing queued or running (a job counts until it and its
// captures are destroyed).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace scalecomm {

class Worker {
 public:
  explicit Worker(int64_t spinMicros);
  ~Worker();
  void post(std::function<void()> job);
  void stop();
  bool idle() const { return s_->unfinished.load(std::memory_order_acquire) == 0; }
  size_t queued() const { return s_->queued.load(std::memory_order_acquire); }
  // Meaningful until stop() (a stopped worker's thread is joined or detached).
  bool onWorkerThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct Shared {
    int64_t spinMicros;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    std::atomic<size_t> queued{0};
    std::atomic<size_t> unfinished{0};  // queued + running
    bool sleeping = false;
    bool stopping = false;
  };
  static void loop(const std::shared_ptr<Shared>& s);
  std::shared_ptr<Shared> s_;
  std::thread thread_;
};

}  // namespace scalecomm
