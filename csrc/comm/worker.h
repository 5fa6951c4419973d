// scalecomm comm: the group's worker thread.
//
// Contract: jobs posted from any thread run one at a time, in posting order, on
// one dedicated thread; this is what makes collectives asynchronous to the
// caller yet ordered as issued. After a job the thread spins briefly
// (spinMicros) for the next one before sleeping, which keeps back-to-back small
// collectives fast. stop() runs every job already posted, then joins (jobs must
// end on their own: collectives are bounded by their deadline). A job must not
// throw (wrap it); post() after stop() is an internal error. idle(): nothing
// queued or running (a job counts until it and its captures are destroyed).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace scalecomm {

class Worker {
 public:
  explicit Worker(int64_t spinMicros);
  ~Worker();
  void post(std::function<void()> job);
  void stop();
  bool idle() const { return unfinished_.load(std::memory_order_acquire) == 0; }

 private:
  void loop();
  int64_t spinMicros_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<size_t> queued_{0};
  std::atomic<size_t> unfinished_{0};  // queued + running
  bool sleeping_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace scalecomm
