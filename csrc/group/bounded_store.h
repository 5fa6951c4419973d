// scalecomm group: store queries that never hold a caller past its deadline.
//
// Contract: a BoundedStore runs every query on one thread of its own, in
// posting order, so that a store that does not answer (its host process
// stopped, frozen or cut off by a partition; a c10d client blocks until its
// own timeout) holds only that thread. run(fn, deadline) queues fn and waits
// until it has run or the deadline passes: true when fn ran (its Error, if
// any, is rethrown to the caller), false at the deadline (fn stays queued
// and runs when the store answers; whatever it captures must outlive that,
// so it captures by value or shared_ptr). post(fn) queues fn without waiting
// unless a query is queued or running already (false: skipped), which keeps
// periodic queries from piling up behind a store that hangs. busySince()
// says since when the current query has run (never: none). The destructor
// does not wait for a query that hangs: the thread is detached and ends
// after it. Thread safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/deadline.h"
#include "core/store.h"

namespace scalecomm {

class BoundedStore {
 public:
  explicit BoundedStore(std::shared_ptr<Store> store);
  ~BoundedStore();
  bool run(std::function<void(Store&)> fn, const Deadline& deadline);
  bool post(std::function<void(Store&)> fn);
  Clock::time_point busySince() const;

 private:
  struct Job {
    std::function<void(Store&)> fn;
    bool done = false;
    std::exception_ptr error;
  };
  struct Shared {
    std::shared_ptr<Store> store;
    mutable std::mutex mu;
    std::condition_variable cv;  // jobs queued, stop, a job done
    std::deque<std::shared_ptr<Job>> queue;
    bool running = false;
    Clock::time_point since = Clock::time_point::max();
    bool stopping = false;
  };
  static void loop(const std::shared_ptr<Shared>& s);
  std::shared_ptr<Shared> s_;
  std::thread thread_;
};

}  // namespace scalecomm
