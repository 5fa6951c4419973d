// scalecomm group: the desync report's protocol over the store.
//
// Contract: a call that times out asks every rank where it is; each rank's
// watchdog answers with its position (group/flight_recorder.h), and the
// report names the rank(s) that lag. Keys, under the group's store prefix:
// "desync" counts requests; "desync/<request>/<rank>" holds rank's answer.
// Every store query runs on a BoundedStore (group/bounded_store.h), so a
// store that does not answer (its host stopped or cut off) never holds the
// watchdog or a timing-out call past its bound:
// - poll(mine) (watchdog, every kPollInterval) queues answering every
//   request not answered yet, unless a query is still pending; it returns
//   the number of requests the previous poll answered (the watchdog dumps
//   its flight recorder for them).
// - askEarly(call) (watchdog) queues a request for a call that is within
//   leadFor(timeout) of its timeout, once per call, so that the answers are
//   in when the call times out.
// - report(call, mine) (the timing-out call) makes the request now unless
//   askEarly made one, then collects the answers for at most kReportBudget:
//   the timeout's error comes that much after the timeout at most, with
//   "did not answer" for ranks that have not.
// Once a query fails (the store's server is gone) every method is a no-op
// and report() says why. Thread safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "group/bounded_store.h"
#include "group/flight_recorder.h"

namespace scalecomm {

class DesyncProtocol {
 public:
  static constexpr auto kPollInterval = std::chrono::milliseconds(250);
  static constexpr auto kReportBudget = std::chrono::milliseconds(300);
  // How long before its timeout a call's request is made: half the timeout, at most 3 s.
  static std::chrono::milliseconds leadFor(int64_t timeoutMs) {
    return std::chrono::milliseconds(std::min<int64_t>(timeoutMs / 2, 3000));
  }

  DesyncProtocol(std::shared_ptr<Store> store, std::string prefix, int rank, int size);
  int64_t poll(const RankPosition& mine);
  void askEarly(uint64_t call);
  std::string report(uint64_t call, const RankPosition& mine);
  bool broken() const { return s_->broken.load(); }

 private:
  struct Shared {
    std::mutex mu;
    int64_t answered = 0;                  // requests this rank answered (mu)
    std::atomic<int64_t> lastAnswered{0};  // how many the last poll answered
    std::map<uint64_t, int64_t> early;     // call -> its request (0: asked, not numbered yet) (mu)
    std::atomic<bool> broken{false};
    std::string why;  // the failed query's error (mu)
  };
  static void markBroken(Shared& s, int rank, const std::exception& e);
  std::string prefix_;
  int rank_, size_;
  std::shared_ptr<Shared> s_;
  BoundedStore store_;  // last: its thread may still run queries that use s_
};

}  // namespace scalecomm
