#include "group/desync.h"

#include <thread>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

namespace scalecomm {

DesyncProtocol::DesyncProtocol(std::shared_ptr<Store> store, std::string prefix, int rank, int size)
    : prefix_(std::move(prefix)), rank_(rank), size_(size), s_(std::make_shared<Shared>()), store_(std::move(store)) {}

void DesyncProtocol::markBroken(Shared& s, int rank, const std::exception& e) {
  std::lock_guard<std::mutex> g(s.mu);
  if (s.broken.exchange(true)) return;
  s.why = e.what();
  SC_LOG(Info, "rank ", rank, ": the desync report stops asking the store (its server is gone?): ", e.what());
}

int64_t DesyncProtocol::poll(const RankPosition& mine) {
  const int64_t last = s_->lastAnswered.exchange(0);
  if (s_->broken.load()) return last;
  store_.post([s = s_, prefix = prefix_, rank = rank_, where = mine.encode()](Store& store) {
    try {
      const int64_t asked = store.add(prefix + "desync", 0);
      int64_t from;
      {
        std::lock_guard<std::mutex> g(s->mu);
        from = s->answered;
      }
      if (asked <= from) return;
      for (int64_t request = from + 1; request <= asked; ++request)  // several ranks may ask at once
        store.set(strCat(prefix, "desync/", request, "/", rank), where);
      {
        std::lock_guard<std::mutex> g(s->mu);
        s->answered = std::max(s->answered, asked);
      }
      s->lastAnswered.fetch_add(asked - from);
    } catch (const std::exception& e) {
      markBroken(*s, rank, e);
    }
  });
  return last;
}

void DesyncProtocol::askEarly(uint64_t call) {
  if (s_->broken.load()) return;
  {
    std::lock_guard<std::mutex> g(s_->mu);
    if (s_->early.count(call)) return;
    while (s_->early.size() >= 16) s_->early.erase(s_->early.begin());  // old calls' requests
  }
  const bool queued = store_.post([s = s_, prefix = prefix_, rank = rank_, call](Store& store) {
    try {
      const int64_t request = store.add(prefix + "desync", 1);
      std::lock_guard<std::mutex> g(s->mu);
      s->early[call] = request;
    } catch (const std::exception& e) {
      markBroken(*s, rank, e);
    }
  });
  if (queued) {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->early.emplace(call, 0);
  }
}

std::string DesyncProtocol::report(uint64_t call, const RankPosition& mine) {
  const Deadline budget = Deadline::after(kReportBudget);
  const auto silentStore = [&] {
    return strCat("(none: the store did not answer within ", kReportBudget.count(),
                  " ms; its host (rank 0's process under env:// or torchrun, or the agent) may be stopped, "
                  "overloaded or cut off)");
  };
  if (s_->broken.load()) {
    std::lock_guard<std::mutex> g(s_->mu);
    return strCat("(none: the store did not answer: ", s_->why, ")");
  }
  try {
    auto request = std::make_shared<std::atomic<int64_t>>(0);
    {
      std::lock_guard<std::mutex> g(s_->mu);
      auto it = s_->early.find(call);
      if (it != s_->early.end()) request->store(it->second);
    }
    if (request->load() == 0) {
      const bool ran =
          store_.run([request, prefix = prefix_](Store& store) { *request = store.add(prefix + "desync", 1); }, budget);
      if (!ran) return silentStore();
    }
    auto answers = std::make_shared<std::vector<std::string>>(size_);
    std::vector<RankPosition> positions(size_);
    for (int r = 0; r < size_; ++r) positions[r].rank = r;
    positions[rank_] = mine;
    positions[rank_].known = true;
    for (int missing = size_ - 1; missing > 0 && !budget.expired();) {
      std::vector<int> wanted;
      for (int r = 0; r < size_; ++r)
        if (!positions[r].known) wanted.push_back(r);
      const std::string base = strCat(prefix_, "desync/", request->load(), "/");
      const bool ran = store_.run(
          [answers, wanted, base](Store& store) {
            for (int r : wanted) {
              const std::string key = base + std::to_string(r);
              if (store.check({key})) (*answers)[r] = store.get(key, Deadline::after(std::chrono::seconds(1)));
            }
          },
          budget);
      if (!ran) break;
      missing = 0;
      for (int r : wanted) {
        if (!(*answers)[r].empty()) {
          positions[r] = RankPosition::decode(r, (*answers)[r]);
        } else {
          ++missing;
        }
      }
      if (missing > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return desyncReport(positions);
  } catch (const std::exception& e) {
    markBroken(*s_, rank_, e);
    return strCat("(none: the store did not answer: ", e.what(), ")");
  }
}

}  // namespace scalecomm
