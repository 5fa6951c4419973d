#include "group/flight_recorder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/timeline.h"

namespace scalecomm {

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* stateName(FlightEntry::State s) {
  switch (s) {
    case FlightEntry::State::Queued: return "queued";
    case FlightEntry::State::Running: return "running";
    case FlightEntry::State::Done: return "done";
    case FlightEntry::State::Failed: return "failed";
  }
  return "?";
}

// "0-2, 5" for {0, 1, 2, 5}.
std::string rankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += strCat(out.empty() ? "" : ", ", ranks[i]);
    if (j > i) out += strCat(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string RankPosition::encode() const { return strCat(inside ? "in" : "idle", "|", number, "|", name, "|", state); }

RankPosition RankPosition::decode(int rank, const std::string& text) {
  RankPosition p;
  p.rank = rank;
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, '|');) parts.push_back(item);
  if (parts.size() != 4) return p;
  p.known = true;
  p.inside = parts[0] == "in";
  p.number = std::strtoull(parts[1].c_str(), nullptr, 10);
  p.name = parts[2];
  p.state = parts[3];
  return p;
}

std::string RankPosition::describe() const {
  if (!known) return strCat("rank ", rank, " did not answer (its process is gone or stuck outside scalecomm)");
  if (number == 0) return strCat("rank ", rank, " has not called any collective");
  if (inside) return strCat("rank ", rank, " is in seq ", number, " ", name, " (", state, ")");
  return strCat("rank ", rank, " is idle after seq ", number, " ", name);
}

namespace {

template <size_t N>
void copyName(char (&out)[N], const std::string& in) {
  const size_t n = std::min(in.size(), N - 1);
  std::memcpy(out, in.data(), n);
  out[n] = '\0';
}

}  // namespace

void FlightRecorder::queued(uint64_t id, const std::string& name, uint64_t number, bool collective, uint64_t bytes,
                            int64_t timeoutMs, Clock::time_point now, const std::string* running) {
  if (ring_.empty() || id == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  nextId_ = id + 1;
  FlightEntry& e = ring_[(id - 1) % ring_.size()];
  e.id = id;
  e.number = number;
  e.collective = collective;
  copyName(e.name, name);
  e.algorithm[0] = '\0';
  if (running) copyName(e.algorithm, *running);
  e.bytes = bytes;
  e.timeoutMs = timeoutMs;
  e.state = running ? FlightEntry::State::Running : FlightEntry::State::Queued;
  e.queuedAt = now;
  e.startedAt = running ? now : Clock::time_point();
  e.endedAt = Clock::time_point();
  e.error.clear();
}

FlightEntry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || ring_.empty()) return nullptr;
  FlightEntry& e = ring_[(id - 1) % ring_.size()];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id, const std::string& algorithm, Clock::time_point now) {
  if (id == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  if (FlightEntry* e = find(id)) {
    e->state = FlightEntry::State::Running;
    copyName(e->algorithm, algorithm);
    e->startedAt = now;
  }
}

void FlightRecorder::ended(uint64_t id, const std::string& error, Clock::time_point now) {
  if (id == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  if (FlightEntry* e = find(id)) {
    e->state = error.empty() ? FlightEntry::State::Done : FlightEntry::State::Failed;
    if (!error.empty()) e->error = error;
    e->endedAt = now;
  }
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<FlightEntry> out;
  visitLocked([&](const FlightEntry& e) { out.push_back(e); });
  return out;
}

RankPosition FlightRecorder::position(int rank) const {
  std::lock_guard<std::mutex> g(mu_);
  RankPosition p;
  p.rank = rank;
  p.known = true;
  p.state = "idle";
  // The oldest collective not finished; else the first one that failed (the
  // rank stopped there: later calls on a poisoned group fail without running);
  // else the last one done.
  visitLocked([&](const FlightEntry& e) {
    if (!e.collective || p.inside) return;  // nothing after the first unfinished or failed one counts
    p.number = e.number;
    p.name = e.name;
    switch (e.state) {
      case FlightEntry::State::Done: return;
      case FlightEntry::State::Failed: p.state = "failed"; break;
      case FlightEntry::State::Queued: p.state = "queued"; break;
      case FlightEntry::State::Running:
        p.state = strCat("running ", static_cast<int64_t>(seconds(Clock::now() - e.startedAt) * 10) / 10.0, " s");
        break;
    }
    p.inside = true;
  });
  return p;
}

std::string FlightRecorder::overdue(std::chrono::milliseconds grace) const {
  std::lock_guard<std::mutex> g(mu_);
  const auto now = Clock::now();
  std::string late;
  visitLocked([&](const FlightEntry& e) {
    if (late.empty() && e.state == FlightEntry::State::Running && e.timeoutMs > 0 &&
        now - e.startedAt > std::chrono::milliseconds(e.timeoutMs) + grace) {
      late = strCat(e.name, " seq ", e.number, " has run ", static_cast<int64_t>(seconds(now - e.startedAt)),
                    " s, past its timeout of ", e.timeoutMs, " ms");
    }
  });
  return late;
}

uint64_t FlightRecorder::nearTimeout(std::chrono::milliseconds (*lead)(int64_t timeoutMs)) const {
  std::lock_guard<std::mutex> g(mu_);
  const auto now = Clock::now();
  uint64_t id = 0;
  visitLocked([&](const FlightEntry& e) {
    if (id == 0 && e.state == FlightEntry::State::Running && e.timeoutMs > 0 &&
        now - e.startedAt >= std::chrono::milliseconds(e.timeoutMs) - lead(e.timeoutMs))
      id = e.id;
  });
  return id;
}

std::string FlightRecorder::json(int rank, int size, const std::string& group, const std::string& why) const {
  const RankPosition where = position(rank);
  std::vector<FlightEntry> entries = snapshot();
  std::ostringstream out;
  out << "{\"rank\": " << rank << ", \"size\": " << size << ", \"group\": " << jsonString(group)
      << ", \"why\": " << jsonString(why) << ", \"position\": " << jsonString(where.encode()) << ", \"entries\": [";
  const char* sep = "\n  ";
  const auto at = [&](Clock::time_point t) { return t == Clock::time_point() ? -1.0 : seconds(t - origin_); };
  for (const FlightEntry& e : entries) {
    out << sep << "{\"id\": " << e.id << ", \"seq\": " << e.number
        << ", \"collective\": " << (e.collective ? "true" : "false") << ", \"name\": " << jsonString(e.name)
        << ", \"algorithm\": " << jsonString(e.algorithm) << ", \"bytes\": " << e.bytes << ", \"state\": \""
        << stateName(e.state) << "\", \"queued_s\": " << at(e.queuedAt) << ", \"started_s\": " << at(e.startedAt)
        << ", \"ended_s\": " << at(e.endedAt) << ", \"error\": " << jsonString(e.error) << "}";
    sep = ",\n  ";
  }
  out << "\n]}\n";
  return out.str();
}

std::string desyncReport(const std::vector<RankPosition>& positions) {
  // Progress of a rank: idle after seq n (2n + 1) is ahead of inside seq n
  // (2n) and behind inside seq n + 1 (2n + 2).
  std::map<uint64_t, std::vector<int>> byProgress;
  std::vector<int> silent;
  for (const RankPosition& p : positions) {
    if (!p.known) {
      silent.push_back(p.rank);
      continue;
    }
    byProgress[p.inside ? 2 * p.number : 2 * p.number + 1].push_back(p.rank);
  }
  std::string out;
  if (!silent.empty()) out = strCat("rank(s) ", rankList(silent), " did not answer (gone, or stuck outside scalecomm)");
  if (byProgress.size() > 1) {
    const auto& [lagAt, lagging] = *byProgress.begin();
    std::vector<int> ahead;
    for (auto it = std::next(byProgress.begin()); it != byProgress.end(); ++it) {
      ahead.insert(ahead.end(), it->second.begin(), it->second.end());
    }
    std::string where;
    for (const RankPosition& p : positions) {
      if (p.known && p.rank == lagging.front()) where = p.describe();
    }
    std::string front;
    for (const RankPosition& p : positions) {
      if (p.known && p.rank == std::prev(byProgress.end())->second.front()) front = p.describe();
    }
    out += strCat(out.empty() ? "" : "; ", "rank(s) ", rankList(lagging), " lag: ", where, "; rank(s) ",
                  rankList(ahead), " are further ahead (", front,
                  "): the lagging rank(s) have not called the collective the others wait in");
  } else if (!byProgress.empty() && silent.empty()) {
    const RankPosition* first = nullptr;
    for (const RankPosition& p : positions) {
      if (p.known) first = first ? first : &p;
    }
    out = strCat("no rank lags: all are at seq ", first->number, first->inside ? " " + first->name : "",
                 "; the collective itself is stuck (a slow or broken link, or a peer that stopped inside it)");
  }
  std::string detail;
  for (const RankPosition& p : positions) detail += "\n  " + p.describe();
  return out + detail;
}

}  // namespace scalecomm
