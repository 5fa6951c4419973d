#include "comm/emulated_queues.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/error.h"

namespace scalecomm {

namespace {

// One posted message of a running group.
struct Posted {
  int rank;  // who posted it
  int peer;
  bool send;
  void* data;
  int64_t bytes;
  bool done = false;
  std::string error;
};

// A native collective in progress: every rank's call, then the results.
struct NativeRound {
  std::vector<NativeCall> calls;
  std::vector<char> posted;
  int arrived = 0, computed = 0, left = 0;
};

}  // namespace

struct QueueFabric::State {
  State(int n, std::chrono::milliseconds s)
      : n(n), stall(s), sends(n * n), recvs(n * n), aborted(n, 0), groups(n, 0), ops(n, 0), nativeSeq(n, 0) {}
  int n;
  std::chrono::milliseconds stall;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Posted*>> sends, recvs;  // per ordered pair src * n + dst
  std::vector<char> aborted;                      // per rank (guarded by mu)
  bool closing = false;
  std::vector<int64_t> groups;
  std::vector<int64_t> ops;  // messages (sends and receives) in those groups
  std::vector<uint64_t> nativeSeq;
  std::map<uint64_t, NativeRound> rounds;
  std::vector<std::unique_ptr<EmulatedQueuedChannel>> channels;

  // Matches the heads of the pair's queues; called with mu held.
  void match(int src, int dst) {
    auto& s = sends[src * n + dst];
    auto& r = recvs[src * n + dst];
    while (!s.empty() && !r.empty()) {
      Posted* a = s.front();
      Posted* b = r.front();
      s.pop_front();
      r.pop_front();
      if (a->bytes != b->bytes) {
        const std::string what = strCat("rank ", src, " sent ", a->bytes, " bytes to rank ", dst, ", which expected ",
                                        b->bytes, " (NCCL would corrupt memory or hang here)");
        a->error = b->error = what;
      } else if (a->bytes > 0) {
        std::memcpy(b->data, a->data, static_cast<size_t>(a->bytes));
      }
      a->done = b->done = true;
    }
  }

  // Waits (mu held through `g`) until pred() or this rank is aborted or the
  // stall timeout passes; describes the stall through `what`.
  template <typename Pred, typename What>
  void wait(std::unique_lock<std::mutex>& g, int rank, Pred pred, What what) {
    const auto until = std::chrono::steady_clock::now() + stall;
    while (!pred()) {
      if (aborted[rank] || closing) fail(ErrorKind::Aborted, "scalecomm emulated queue (rank ", rank, "): aborted");
      if (cv.wait_until(g, until) == std::cv_status::timeout && !pred()) {
        fail(ErrorKind::Timeout, "scalecomm emulated queue (rank ", rank, "): stalled for ", stall.count(),
             " ms: ", what(), " (the grouped calls deadlock, as NCCL's would)");
      }
    }
  }
};

// One rank's queue: a thread running closures in issue order.
class EmulatedQueuedChannel::Stream {
 public:
  explicit Stream(int rank) : rank_(rank), thread_([this] { loop(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `always`: runs even after an error (releasing memory; a failed device
  // stream's allocations go back to the driver too).
  uint64_t push(std::function<void()> f, bool always = false) {
    std::lock_guard<std::mutex> g(mu_);
    items_.push_back({std::move(f), always});
    cv_.notify_all();
    return ++issued_;
  }
  // Waits until the item numbered `ticket` ran; false at the deadline.
  bool waitFor(uint64_t ticket, const Deadline& deadline) {
    std::unique_lock<std::mutex> g(mu_);
    while (ran_ < ticket) {
      if (deadline.expired()) return false;
      cv_.wait_for(g, std::chrono::milliseconds(5));
    }
    return true;
  }
  std::optional<Error> error() {
    std::lock_guard<std::mutex> g(mu_);
    return error_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> g(mu_);
    while (true) {
      cv_.wait(g, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;
      auto [f, always] = std::move(items_.front());
      items_.pop_front();
      const bool skip = error_.has_value() && !always;
      g.unlock();
      std::optional<Error> failed;
      if (!skip) {
        try {
          f();
        } catch (const Error& e) {
          failed = e;
        } catch (const std::exception& e) {
          failed = Error(ErrorKind::Internal, e.what());
        }
      }
      g.lock();
      if (failed && !error_) error_ = failed;
      ++ran_;
      cv_.notify_all();
    }
  }
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, bool>> items_;
  uint64_t issued_ = 0, ran_ = 0;
  bool stop_ = false;
  std::optional<Error> error_;
  std::thread thread_;  // last: starts after the rest is built
};

class EmulatedQueuedChannel::QueueReducer final : public Reducer {
 public:
  explicit QueueReducer(Stream& s) : s_(s) {}
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    s_.push([=] { reduceInto(dst, src, count, dtype, op); });
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    s_.push([=] { divideInPlace(data, count, dtype, divisor); });
  }
  void scale(void* data, int64_t count, DataType dtype, double factor) override {
    s_.push([=] { scaleInPlace(data, count, dtype, factor); });
  }
  void fence() override {}

 private:
  Stream& s_;
};

QueueFabric::QueueFabric(int n, std::chrono::milliseconds stallTimeout)
    : state_(std::make_unique<State>(n, stallTimeout)) {
  state_->channels.resize(n);
}

QueueFabric::~QueueFabric() {
  {
    std::lock_guard<std::mutex> g(state_->mu);
    state_->closing = true;
  }
  state_->cv.notify_all();
  state_->channels.clear();  // joins the queues
}

int QueueFabric::worldSize() const { return state_->n; }

EmulatedQueuedChannel& QueueFabric::channel(int rank) {
  SC_CHECK(rank >= 0 && rank < state_->n);
  auto& c = state_->channels[rank];
  if (!c) c = std::make_unique<EmulatedQueuedChannel>(*state_, rank, state_->n);
  return *c;
}

int64_t QueueFabric::groupsRun(int rank) const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->groups[rank];
}

int64_t QueueFabric::messagesRun(int rank) const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->ops[rank];
}

EmulatedQueuedChannel::EmulatedQueuedChannel(QueueFabric::State& fabric, int rank, int size)
    : QueuedChannel(rank, size),
      fabric_(fabric),
      stream_(std::make_unique<Stream>(rank)),
      reducer_(std::make_unique<QueueReducer>(*stream_)) {}

EmulatedQueuedChannel::~EmulatedQueuedChannel() {
  releaseScratch();
  stream_.reset();  // runs (or skips) what is queued, then joins
}

Reducer& EmulatedQueuedChannel::reducer() { return *reducer_; }
void* EmulatedQueuedChannel::stream() const { return stream_.get(); }
void EmulatedQueuedChannel::enqueue(std::function<void()> f) { stream_->push(std::move(f)); }

void* EmulatedQueuedChannel::recordEvent() {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(stream_->push([] {})));
}

void EmulatedQueuedChannel::waitEvent(void* event, const Deadline& deadline, const char* what) {
  if (!stream_->waitFor(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(event)), deadline)) {
    abort();
    fail(ErrorKind::Timeout, "scalecomm ", what, " (rank ", rank(), "): timed out waiting for the queued work");
  }
  if (auto e = stream_->error())
    throw Error(e->kind(), strCat("scalecomm ", what, " (rank ", rank(), "): ", e->what()));
}

void EmulatedQueuedChannel::synchronize(const Deadline& deadline) { waitEvent(recordEvent(), deadline, "synchronize"); }

void EmulatedQueuedChannel::abort() {
  {
    std::lock_guard<std::mutex> g(fabric_.mu);
    fabric_.aborted[rank()] = 1;
  }
  fabric_.cv.notify_all();
}

void EmulatedQueuedChannel::issueGroup(const std::vector<QueuedOp>& ops) {
  const int r = rank();
  stream_->push([this, ops, r] {
    QueueFabric::State& f = fabric_;
    std::vector<Posted> posted;
    posted.reserve(ops.size());
    for (const QueuedOp& op : ops) posted.push_back({r, op.peer, op.send, op.data, op.bytes, false, {}});
    std::unique_lock<std::mutex> g(f.mu);
    const int64_t group = ++f.groups[r];
    f.ops[r] += static_cast<int64_t>(posted.size());
    for (Posted& p : posted) {
      (p.send ? f.sends[r * f.n + p.peer] : f.recvs[p.peer * f.n + r]).push_back(&p);
      if (p.send) {
        f.match(r, p.peer);
      } else {
        f.match(p.peer, r);
      }
    }
    f.cv.notify_all();
    auto unmatched = [&] {
      std::string text;
      for (const Posted& p : posted) {
        if (!p.done)
          text += strCat(text.empty() ? "" : ", ", p.send ? "send of " : "receive of ", p.bytes,
                         p.send ? " B to rank " : " B from rank ", p.peer);
      }
      return strCat("group ", group, " waits for ", text);
    };
    try {
      f.wait(
          g, r, [&] { return std::all_of(posted.begin(), posted.end(), [](const Posted& p) { return p.done; }); },
          unmatched);
    } catch (...) {
      for (Posted& p : posted) {  // nothing may point at this frame any more
        auto& q = p.send ? f.sends[r * f.n + p.peer] : f.recvs[p.peer * f.n + r];
        q.erase(std::remove(q.begin(), q.end(), &p), q.end());
      }
      f.aborted[r] = 1;  // a stalled queue is as good as aborted: peers' waits on it end too
      f.cv.notify_all();
      throw;
    }
    for (const Posted& p : posted)
      if (!p.error.empty()) fail(ErrorKind::Io, p.error);
  });
}

void* EmulatedQueuedChannel::allocScratch(int64_t bytes) {
  auto* p = new uint8_t[static_cast<size_t>(bytes)];
  std::memset(p, 0xEE, static_cast<size_t>(bytes));  // never-received bytes stand out
  return p;
}

void EmulatedQueuedChannel::freeScratch(void* p) {
  stream_->push([p] { delete[] static_cast<uint8_t*>(p); }, /*always=*/true);
}

bool EmulatedQueuedChannel::hasNative(CollectiveKind kind, DataType dtype, ReduceOp op) const {
  return ncclNativeTakes(kind, dtype, op);
}

void EmulatedQueuedChannel::native(const NativeCall& call) {
  if (!hasNative(call.kind, call.dtype, call.op)) QueuedChannel::native(call);
  const int r = rank(), n = size();
  const uint64_t seq = ++fabric_.nativeSeq[r];
  stream_->push([this, call, r, n, seq] {
    QueueFabric::State& f = fabric_;
    std::unique_lock<std::mutex> g(f.mu);
    NativeRound& round = f.rounds[seq];
    if (round.calls.empty()) {
      round.calls.resize(n);
      round.posted.assign(n, 0);
    }
    round.calls[r] = call;
    round.posted[r] = 1;
    ++round.arrived;
    f.cv.notify_all();
    f.wait(g, r, [&] { return round.arrived == n; }, [&] { return strCat("native ", collectiveName(call.kind)); });
    for (const NativeCall& c : round.calls) {
      if (c.kind != call.kind || c.count != call.count || c.dtype != call.dtype || c.op != call.op ||
          c.root != call.root) {
        fail(ErrorKind::Io, "native ", collectiveName(call.kind),
             ": ranks disagree on the collective, count, dtype, op or root (NCCL would hang or corrupt memory)");
      }
    }
    g.unlock();
    // Every queue is inside this round: read the peers' inputs, then write ours after all have read.
    const size_t es = elementSize(call.dtype);
    const size_t block = static_cast<size_t>(call.count) * es;
    auto input = [&](int q) { return static_cast<const uint8_t*>(round.calls[q].send); };
    std::vector<uint8_t> out;
    auto reduceAll = [&](size_t offset) {
      std::vector<uint8_t> acc(input(0) + offset, input(0) + offset + block);
      for (int q = 1; q < n; ++q) reduceInto(acc.data(), input(q) + offset, call.count, call.dtype, call.op);
      if (call.op == ReduceOp::Avg) divideInPlace(acc.data(), call.count, call.dtype, n);
      return acc;
    };
    switch (call.kind) {
      case CollectiveKind::Allreduce: out = reduceAll(0); break;
      case CollectiveKind::Reduce:
        if (r == call.root) out = reduceAll(0);
        break;
      case CollectiveKind::Broadcast: out.assign(input(call.root), input(call.root) + block); break;
      case CollectiveKind::Allgather:
        for (int q = 0; q < n; ++q) out.insert(out.end(), input(q), input(q) + block);
        break;
      case CollectiveKind::ReduceScatter: out = reduceAll(block * static_cast<size_t>(r)); break;
      default: SC_CHECK(false);
    }
    g.lock();
    ++round.computed;
    f.cv.notify_all();
    f.wait(g, r, [&] { return round.computed == n; }, [&] { return strCat("native ", collectiveName(call.kind)); });
    if (!out.empty()) std::memcpy(call.recv, out.data(), out.size());
    if (++round.left == n) f.rounds.erase(seq);
  });
}

}  // namespace scalecomm
