// The torch-free Group over loopback links: every collective kind through
// submit(), exact results; numbering; the plan cache (one compile per shape);
// prepared call sites and their interned names;
// where calls run (inline when blocking and idle, else the worker, in issue
// order); poison after a failure; coalesced send/recv; abort; shutdown from
// several threads; what the call watchers see.
#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <iterator>
#include <memory>
#include <random>
#include <thread>

#include "algo/registry.h"
#include "comm/loopback_mesh.h"
#include "core/error.h"
#include "group/flight_recorder.h"
#include "group/group.h"
#include "harness.h"

using namespace scalecomm;

namespace {

struct Mesh {
  LoopbackFabric fabric;
  std::vector<std::shared_ptr<Group>> groups;
  explicit Mesh(int n, GroupConfig cfg = {}, std::shared_ptr<Store> store = nullptr) : fabric(n, 1 << 16) {
    auto comms = loopbackCommunicators(fabric, 0);
    if (cfg.timeoutMs == GroupConfig{}.timeoutMs) cfg.timeoutMs = 20000;
    for (auto& c : comms) groups.push_back(Group::create(std::move(c), cfg, {}, store));
  }
  ~Mesh() {
    for (auto& g : groups) g->shutdown();
  }
};

// Runs fn(rank, group) on one thread per rank.
void onRanks(Mesh& m, const std::function<void(int, Group&)>& fn) {
  const auto errors = sctest::onThreads(static_cast<int>(m.groups.size()), [&](int r) { fn(r, *m.groups[r]); });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
}

// Submits and waits; returns the error text ("" on success).
std::string runCall(Group& g, Call call) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto fut = done->get_future();
  call.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
  g.submit(std::move(call));
  return fut.get();
}

Call allreduceCall(std::vector<float>& v, bool blocking) {
  Call c;
  c.kind = CallKind::Allreduce;
  c.name = "allreduce";
  c.algorithm = "ring";
  c.data = v.data();
  c.count = static_cast<int64_t>(v.size());
  c.dtype = DataType::Float32;
  c.op = ReduceOp::Sum;
  c.blocking = blocking;
  return c;
}

}  // namespace

TEST(every_collective_through_submit_is_exact) {
  for (int n : {1, 2, 3, 4}) {
    Mesh m(n);
    onRanks(m, [&](int rank, Group& g) {
      // allreduce, auto and every named algorithm
      for (const char* algo : {"", "ring", "rhd", "tree", "direct", "ps"}) {
        std::vector<float> v(37, static_cast<float>(rank + 1));
        Call c = allreduceCall(v, true);
        c.algorithm = g.algorithmFor(CallKind::Allreduce, 37 * 4, algo);
        CHECK_EQ(runCall(g, std::move(c)), std::string());
        for (float x : v) CHECK_EQ(x, static_cast<float>(n * (n + 1) / 2));
      }
      // broadcast from the last rank
      std::vector<int32_t> b(11, rank == n - 1 ? 42 : -1);
      Call bc;
      bc.kind = CallKind::Broadcast;
      bc.name = "broadcast";
      bc.algorithm = g.algorithmFor(CallKind::Broadcast, 44);
      bc.data = b.data();
      bc.count = 11;
      bc.dtype = DataType::Int32;
      bc.root = n - 1;
      CHECK_EQ(runCall(g, std::move(bc)), std::string());
      for (int32_t x : b) CHECK_EQ(x, 42);
      // reduce (max) to rank 0
      std::vector<int64_t> red(5, rank * 10);
      Call rc;
      rc.kind = CallKind::Reduce;
      rc.name = "reduce";
      rc.algorithm = "chain";
      rc.data = red.data();
      rc.count = 5;
      rc.dtype = DataType::Int64;
      rc.op = ReduceOp::Max;
      rc.root = 0;
      CHECK_EQ(runCall(g, std::move(rc)), std::string());
      if (rank == 0)
        for (int64_t x : red) CHECK_EQ(x, static_cast<int64_t>((n - 1) * 10));
      // allgather
      std::vector<std::vector<double>> outs(n, std::vector<double>(3, -1));
      outs[rank].assign(3, rank + 0.5);
      Call ag;
      ag.kind = CallKind::Allgather;
      ag.name = "allgather";
      ag.algorithm = "ring";
      for (auto& o : outs) ag.blocks.push_back(o.data());
      ag.count = 3;
      ag.dtype = DataType::Float64;
      CHECK_EQ(runCall(g, std::move(ag)), std::string());
      for (int q = 0; q < n; ++q)
        for (double x : outs[q]) CHECK_EQ(x, q + 0.5);
      // reduce-scatter: block q of rank r holds r + q
      std::vector<float> work(2 * n);
      for (int q = 0; q < n; ++q) work[2 * q] = work[2 * q + 1] = static_cast<float>(rank + q);
      Call rs;
      rs.kind = CallKind::ReduceScatter;
      rs.name = "reduce_scatter";
      rs.algorithm = "ring";
      rs.data = work.data();
      rs.count = 2;
      rs.dtype = DataType::Float32;
      rs.op = ReduceOp::Sum;
      CHECK_EQ(runCall(g, std::move(rs)), std::string());
      CHECK_EQ(work[2 * rank], static_cast<float>(n * (n - 1) / 2 + n * rank));
      // gather and scatter at rank 0
      std::vector<std::vector<int32_t>> blocks(n, std::vector<int32_t>(2, -1));
      blocks[rank].assign(2, 100 + rank);
      Call ga;
      ga.kind = CallKind::Gather;
      ga.name = "gather";
      for (auto& bl : blocks) ga.blocks.push_back(bl.data());
      ga.count = 2;
      ga.dtype = DataType::Int32;
      ga.root = 0;
      CHECK_EQ(runCall(g, std::move(ga)), std::string());
      if (rank == 0)
        for (int q = 0; q < n; ++q) CHECK_EQ(blocks[q][1], 100 + q);
      // all-to-all: rank r sends r * 10 + q to q
      std::vector<int32_t> send(n), recv(n, -1);
      Call a2a;
      a2a.kind = CallKind::Alltoall;
      a2a.name = "all_to_all";
      a2a.dtype = DataType::Int32;
      for (int q = 0; q < n; ++q) send[q] = rank * 10 + q;
      for (int q = 0; q < n; ++q) a2a.blocks.push_back(&send[q]);
      for (int q = 0; q < n; ++q) a2a.blocks.push_back(&recv[q]);
      a2a.sendCounts.assign(n, 1);
      a2a.recvCounts.assign(n, 1);
      a2a.sendCounts[rank] = a2a.recvCounts[rank] = 0;
      recv[rank] = send[rank];
      CHECK_EQ(runCall(g, std::move(a2a)), std::string());
      for (int q = 0; q < n; ++q) CHECK_EQ(recv[q], q * 10 + rank);
      // barrier
      Call bar;
      bar.kind = CallKind::Barrier;
      bar.name = "barrier";
      bar.algorithm = "dissemination";
      CHECK_EQ(runCall(g, std::move(bar)), std::string());
      CHECK_EQ(g.lastSeq(), uint64_t{13});  // 6 allreduces + 7 other collectives: one number each
    });
  }
}

TEST(plans_are_compiled_once_per_shape) {
  Mesh m(3);
  onRanks(m, [&](int rank, Group& g) {
    for (int step = 0; step < 100; ++step) {
      for (size_t count : {1000, 333}) {  // two DDP buckets
        std::vector<float> v(count, 1.0f);
        CHECK_EQ(runCall(g, allreduceCall(v, step % 2 == 0)), std::string());
        CHECK_EQ(v[count - 1], 3.0f);
      }
    }
    const auto c = g.counters();
    CHECK_EQ(c.plans.misses, uint64_t{2});
    CHECK_EQ(c.plans.hits, uint64_t{198});
    CHECK_EQ(c.plans.entries, uint64_t{2});
  });
}

TEST(labels_are_interned_and_outlive_whoever_made_them) {
  CHECK(Label() == Label(""));
  CHECK(Label().empty());
  const Label a("allreduce:ring");
  Label b;
  std::thread([&] { b = Label(std::string("allreduce:") + "ring"); }).join();
  CHECK(a == b);               // the same text from another thread: the same entry
  CHECK_EQ(a.key(), b.key());  // equal keys, so stats and hash maps merge them
  CHECK(a != Label("allreduce:rhd"));
  CHECK_EQ(std::string("x:") + a, std::string("x:allreduce:ring"));
  CHECK_EQ(strCat(a), std::string("allreduce:ring"));
}

TEST(prepared_call_sites_are_made_once_and_name_their_algorithm) {
  GroupConfig cfg;
  cfg.autotune = "model";  // picks at submit (online: see the tuner's test)
  Mesh m(2, cfg);
  onRanks(m, [&](int, Group& g) {
    const Group::Prepared& ar = g.prepare(CallKind::Allreduce, "allreduce", 4096);
    CHECK(ar.algorithm == g.algorithmFor(CallKind::Allreduce, 4096));
    CHECK_EQ(ar.title.str(), "allreduce:" + ar.algorithm.str());
    CHECK(&g.prepare(CallKind::Allreduce, "allreduce", 4096) == &ar);  // a hit returns the same site
    const Label kept = ar.title;
    // Broadcast and reduce name their schedule; barrier and allgather only the MPI passthrough.
    CHECK_EQ(g.prepare(CallKind::Broadcast, "broadcast", 64).title.str(),
             "broadcast:" + g.algorithmFor(CallKind::Broadcast, 64).str());
    const Group::Prepared& bar = g.prepare(CallKind::Barrier, "barrier", 0);
    CHECK_EQ(bar.title.str(), bar.algorithm == "mpi" ? std::string("barrier:mpi") : std::string("barrier"));
    // Bounded: thousands of message sizes under auto re-prepare; earlier titles stay valid.
    for (int64_t bytes = 8; bytes < 8 * 6000; bytes += 8) g.prepare(CallKind::Allreduce, "allreduce", bytes);
    CHECK_EQ(kept.str(), "allreduce:" + g.algorithmFor(CallKind::Allreduce, 4096).str());
    // Calls named by one site add up in stats() under its title.
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v(16, 1.0f);
      Call c = allreduceCall(v, true);
      c.name = kept;
      c.algorithm = g.algorithmFor(CallKind::Allreduce, 64);
      CHECK_EQ(runCall(g, std::move(c)), std::string());
    }
    CHECK_EQ(g.stats().at(kept.str()).calls, uint64_t{3});
  });
}

TEST(plan_cache_is_bounded_and_evicts_least_recently_used) {
  PlanCache cache(2);
  int built = 0;
  auto build = [&] {
    ++built;
    return Schedule{};
  };
  PlanKey a{CollectiveKind::Allreduce, &ringAlgorithm(), 10, DataType::Float32, -1, false, 4},
      b{CollectiveKind::Allreduce, &ringAlgorithm(), 20, DataType::Float32, -1, false, 4},
      c{CollectiveKind::Allreduce, &ringAlgorithm(), 30, DataType::Float32, -1, false, 4};
  cache.obtain(a, 2, build);
  cache.obtain(b, 2, build);
  cache.obtain(a, 2, build);  // a is now the most recent
  cache.obtain(c, 2, build);  // evicts b
  cache.obtain(a, 2, build);
  CHECK_EQ(built, 3);
  cache.obtain(b, 2, build);
  CHECK_EQ(built, 4);
  CHECK_EQ(cache.counters().evictions, uint64_t{2});
  CHECK_EQ(cache.counters().entries, uint64_t{2});
}

TEST(blocking_calls_run_inline_when_idle_and_async_ones_on_the_worker_in_order) {
  Mesh m(2);
  onRanks(m, [&](int rank, Group& g) {
    const auto caller = std::this_thread::get_id();
    std::vector<float> v(8, 1.0f);
    std::thread::id ranOn;
    bool callerWaits = false;
    Call c = allreduceCall(v, true);
    c.before = [&] {
      ranOn = std::this_thread::get_id();
      callerWaits = CallerWaits::active();
    };
    CHECK_EQ(runCall(g, std::move(c)), std::string());
    CHECK(ranOn == caller);
    CHECK(callerWaits);  // its waits spin through the poll window: nothing else of the caller's runs
    CHECK(!CallerWaits::active());
    CHECK_EQ(g.counters().inlineCalls, uint64_t{1});
    // The automatic spin: 50 us on the worker and the poll window inline, or none on a crowded machine.
    const Communicator& comm = g.communicator();
    CHECK_EQ(comm.callerSpinMicros(), comm.spinMicros() > 0 ? Link::kDefaultPollMicros : int64_t{0});
    // Inline calls feed the choice between the caller's two spins: one exploration's worth of calls finishes one.
    if (comm.callerSpin().adapts()) {
      CHECK_EQ(comm.callerSpin().explorations(), uint64_t{0});
      std::vector<float> zeros(8, 0.0f);
      for (int i = 1; i < CallerSpin::kExploreCalls; ++i)
        CHECK_EQ(runCall(g, allreduceCall(zeros, true)), std::string());
      CHECK_EQ(comm.callerSpin().explorations(), uint64_t{1});
    }
    // Async calls go to the worker; a blocking call behind them waits its turn there.
    std::vector<std::vector<float>> bufs(20, std::vector<float>(64, 1.0f));
    std::vector<int> order;
    std::mutex mu;
    std::vector<std::future<std::string>> results;
    std::atomic<bool> workerWaitsAsCaller{false};
    for (int i = 0; i < 20; ++i) {
      Call a = allreduceCall(bufs[i], i == 19);
      a.after = [&, i] {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);
        if (CallerWaits::active()) workerWaitsAsCaller = true;
      };
      auto p = std::make_shared<std::promise<std::string>>();
      results.push_back(p->get_future());
      a.done = [p](const Error* e) { p->set_value(e ? e->what() : ""); };
      g.submit(std::move(a));
    }
    for (auto& r : results) CHECK_EQ(r.get(), std::string());
    for (int i = 0; i < 20; ++i) CHECK_EQ(order[i], i);
    for (auto& b : bufs) CHECK_EQ(b[63], 2.0f);
    CHECK(g.counters().workerCalls >= 19);
    CHECK(!workerWaitsAsCaller);  // the worker's waits overlap the caller's work: they yield
  });
}

TEST(a_failure_poisons_the_group_and_later_calls_fail_with_its_reason) {
  Mesh m(2);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> v(rank == 0 ? 10 : 12, 1.0f);  // mismatched counts
    const std::string err = runCall(g, allreduceCall(v, true));
    CHECK(err.find("elements") != std::string::npos);
    CHECK(g.poisoned());
    std::vector<float> w(4, 1.0f);
    try {
      g.submit(allreduceCall(w, true));
      CHECK(false);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("unusable after an earlier failure") != std::string::npos);
    }
  });
}

// A watcher's log of one group's calls: "q<id>:<name>" (r when it started
// at once), "s<id>:<algorithm>", "e<id>" or "f<id>" for failed, "x<id>"
// for explain, "F" for failed(), "stop".
struct LogWatcher : CallWatcher {
  std::mutex mu;
  std::vector<std::string> log;
  void add(std::string s) {
    std::lock_guard<std::mutex> g(mu);
    log.push_back(std::move(s));
  }
  void queued(uint64_t id, const WatchedCall& call, Clock::time_point, const std::string* running) override {
    add(strCat(running ? "r" : "q", id, ":", call.name, "#", call.number));
  }
  void started(uint64_t id, const std::string& algorithm, Clock::time_point) override {
    add(strCat("s", id, ":", algorithm));
  }
  void ended(uint64_t id, const std::string& error, Clock::time_point) override {
    add(strCat(error.empty() ? "e" : "f", id));
  }
  std::string explain(uint64_t id, const Error&) override {
    add(strCat("x", id));
    return " [explained by the watcher]";
  }
  void failed(const std::string&) override { add("F"); }
  void stop() override { add("stop"); }
};

TEST(every_call_reaches_the_watchers_in_issue_order_and_failures_are_explained) {
  Mesh m(2);
  std::vector<std::shared_ptr<LogWatcher>> watchers;
  for (auto& g : m.groups) {
    watchers.push_back(std::make_shared<LogWatcher>());
    g->addWatcher(watchers.back());
  }
  std::vector<std::string> errors(2);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> v(6, 1.0f);
    CHECK_EQ(runCall(g, allreduceCall(v, true)), std::string());   // inline: queued and started at once
    CHECK_EQ(runCall(g, allreduceCall(v, false)), std::string());  // on the worker
    std::vector<float> w(rank == 0 ? 10 : 12, 1.0f);               // mismatched counts
    errors[rank] = runCall(g, allreduceCall(w, false));
  });
  for (auto& g : m.groups) g->shutdown();
  for (int r = 0; r < 2; ++r) {
    CHECK(errors[r].find("elements") != std::string::npos);
    CHECK(errors[r].find("[explained by the watcher]") != std::string::npos);
    const std::vector<std::string> want{"r1:allreduce#1",
                                        "e1",
                                        "q2:allreduce#2",
                                        "s2:ring",
                                        "e2",
                                        "q3:allreduce#3",
                                        "s3:ring",
                                        "x3",
                                        "f3",
                                        "F",
                                        "stop"};
    CHECK_EQ(watchers[r]->log.size(), want.size());
    for (size_t i = 0; i < want.size() && i < watchers[r]->log.size(); ++i) CHECK_EQ(watchers[r]->log[i], want[i]);
  }
}

TEST(point_to_point_numbering_and_coalesced_batches) {
  Mesh m(2);
  onRanks(m, [&](int rank, Group& g) {
    const int peer = 1 - rank;
    // A batch in which both ranks receive first, then send: progresses together.
    std::vector<int32_t> out(3, rank + 7), in(3, -1);
    g.startCoalescing();
    Call r;
    r.kind = CallKind::Recv;
    r.name = "recv";
    r.data = in.data();
    r.count = 3;
    r.dtype = DataType::Int32;
    r.peer = peer;
    r.tag = 5;
    std::atomic<int> partsDone{0};
    r.done = [&](const Error* e) { partsDone += e == nullptr; };
    g.submit(std::move(r));
    Call s;
    s.kind = CallKind::Send;
    s.name = "send";
    s.data = out.data();
    s.count = 3;
    s.dtype = DataType::Int32;
    s.peer = peer;
    s.tag = 5;
    s.done = [&](const Error* e) { partsDone += e == nullptr; };
    CHECK_EQ(g.submit(std::move(s)), uint64_t{1});  // the first message to that peer
    Call batch;
    batch.name = "batch_isend_irecv";
    auto p = std::make_shared<std::promise<std::string>>();
    auto fut = p->get_future();
    batch.done = [p](const Error* e) { p->set_value(e ? e->what() : ""); };
    CHECK_EQ(g.endCoalescing(std::move(batch)), uint64_t{1});
    CHECK_EQ(fut.get(), std::string());
    CHECK_EQ(partsDone.load(), 2);
    CHECK_EQ(in[2], peer + 7);
    CHECK_EQ(g.lastSeq(), uint64_t{0});  // point-to-point takes no group number
    // A bad peer is refused before anything is numbered.
    Call bad;
    bad.kind = CallKind::Send;
    bad.name = "send";
    bad.peer = 5;
    try {
      g.submit(std::move(bad));
      CHECK(false);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("peer rank 5 is out of range") != std::string::npos);
    }
  });
}

TEST(a_refused_call_inside_a_batch_abandons_it_and_gives_its_numbers_back) {
  Mesh m(2);
  onRanks(m, [&](int rank, Group& g) {
    const int peer = 1 - rank;
    std::vector<int32_t> buf(2, rank);
    auto p2p = [&](CallKind kind) {
      Call c;
      c.kind = kind;
      c.name = kind == CallKind::Send ? "send" : "recv";
      c.data = buf.data();
      c.count = 2;
      c.dtype = DataType::Int32;
      c.peer = peer;
      return c;
    };
    g.startCoalescing();
    std::string partError;
    Call s = p2p(CallKind::Send);
    s.done = [&](const Error* e) { partError = e ? e->what() : ""; };
    CHECK_EQ(g.submit(std::move(s)), uint64_t{1});
    Call bar;
    bar.kind = CallKind::Barrier;
    bar.name = "barrier";
    try {
      g.submit(std::move(bar));
      CHECK(false);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidArgument);
      CHECK(std::string(e.what()).find("the batch was abandoned") != std::string::npos);
    }
    CHECK(!g.coalescing());
    CHECK(partError.find("only send and recv can be coalesced") != std::string::npos);
    // Nothing was sent and the numbers were given back: the next exchange is message 1 again.
    std::vector<int32_t> in(2, -1);
    Call r = p2p(CallKind::Recv);
    r.data = in.data();
    if (rank == 0) {
      CHECK_EQ(runCall(g, p2p(CallKind::Send)), std::string());
      CHECK_EQ(runCall(g, std::move(r)), std::string());
    } else {
      CHECK_EQ(runCall(g, std::move(r)), std::string());
      CHECK_EQ(runCall(g, p2p(CallKind::Send)), std::string());
    }
    CHECK_EQ(in[1], peer);
    // A part with a bad argument abandons the batch too (the group does not stay coalescing).
    g.startCoalescing();
    Call bad = p2p(CallKind::Send);
    bad.count = -1;
    try {
      g.submit(std::move(bad));
      CHECK(false);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("count is -1") != std::string::npos);
    }
    CHECK(!g.coalescing());
  });
}

TEST(abort_wakes_a_waiting_call_and_shutdown_from_two_threads_is_safe) {
  Mesh m(2);
  auto& g = *m.groups[0];
  std::vector<float> v(16, 1.0f);
  auto p = std::make_shared<std::promise<std::string>>();
  auto fut = p->get_future();
  Call c = allreduceCall(v, false);  // rank 1 never joins
  c.done = [p](const Error* e) { p->set_value(e ? e->what() : ""); };
  g.submit(std::move(c));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  g.abort("test abort");
  CHECK(fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
  CHECK(!fut.get().empty());
  std::thread a([&] { g.shutdown(); });
  std::thread b([&] { g.shutdown(); });
  a.join();
  b.join();
  CHECK(g.isShutDown());
}

TEST(size_limited_algorithms_are_refused_before_any_communication) {
  {  // pairwise serves groups of at most 2 ranks: refused when the group is made
    LoopbackFabric fabric(3, 1 << 16);
    auto comms = loopbackCommunicators(fabric, 0);
    GroupConfig cfg;
    cfg.algorithm = "pairwise";
    try {
      Group::create(std::move(comms[0]), cfg);
      CHECK(false);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidArgument);
      CHECK(std::string(e.what()).find("at most 2 ranks") != std::string::npos);
    }
  }
  GroupConfig cfg;
  cfg.algorithm = "pairwise";
  Mesh m(2, cfg);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> small(kLinkBufferFloor / 4, 1.0f), big(kLinkBufferFloor / 4 + 1, 1.0f);
    Call c = allreduceCall(small, true);
    c.algorithm = g.algorithmFor(CallKind::Allreduce, kLinkBufferFloor);
    CHECK_EQ(c.algorithm, std::string("pairwise"));
    CHECK_EQ(runCall(g, std::move(c)), std::string());
    CHECK_EQ(small.back(), 2.0f);
    Call b = allreduceCall(big, true);
    b.algorithm = "pairwise";
    try {
      g.submit(std::move(b));
      CHECK(false);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::InvalidArgument);
      CHECK(std::string(e.what()).find("at most 4032 bytes") != std::string::npos);
    }
    CHECK_EQ(g.lastSeq(), uint64_t{1});  // nothing numbered for the refused call
    CHECK(!g.poisoned());
  });
}

// Ranks 0 and 1 wait in an allreduce that rank 2 never calls. A rank whose
// call times out says that rank 2 lags and where it is (asked through the
// store, answered by rank 2's watchdog while its thread does something
// else). The first to time out closes its links, so the other either timed
// out as well (it entered the call at about the same time) or fails on the
// closed link, naming the rank that closed it: which one is the scheduler's
// choice, but at least one timeout and nothing else.
TEST(a_timeout_names_the_lagging_rank) {
  GroupConfig cfg;
  cfg.timeoutMs = 600;
  Mesh m(3, cfg, std::make_shared<MemoryStore>());
  std::vector<std::string> errors(3);
  onRanks(m, [&](int r, Group& g) {
    std::vector<float> v(8, 1.0f);
    CHECK_EQ(runCall(g, allreduceCall(v, true)), std::string());  // seq 1: everyone
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // busy elsewhere
      return;
    }
    errors[r] = runCall(g, allreduceCall(v, true));  // seq 2: rank 2 never comes
  });
  int timedOut = 0;
  for (int r : {0, 1}) {
    if (errors[r].find("Timed out after 600 ms") == std::string::npos) {
      CHECK(errors[r].find(strCat("was closed by rank ", 1 - r)) != std::string::npos);
      continue;
    }
    ++timedOut;
    CHECK(errors[r].find("Desync report: rank(s) 2 lag: rank 2 is idle after seq 1 allreduce") != std::string::npos);
    CHECK(errors[r].find("rank(s) 0, 1 are further ahead (rank 0 is in seq 2 allreduce") != std::string::npos);
  }
  CHECK(timedOut >= 1);
}

// Sends and receives posted without waiting (the worker's in-flight
// messages): a ring whose messages are 8x what a link buffers completes on
// every rank, because each rank's posted send and receive progress together;
// a collective after them finds the links at a message boundary.
TEST(posted_sends_and_receives_around_a_ring_progress_together) {
  for (int n : {2, 3}) {
    Mesh m(n);  // loopback links of 64 KiB
    onRanks(m, [&](int rank, Group& g) {
      const int64_t count = 128 << 10;  // 512 KiB of float32
      const int right = (rank + 1) % n, left = (rank + n - 1) % n;
      std::vector<float> mine(count), got(count, -1.0f);
      for (int64_t i = 0; i < count; ++i) mine[i] = static_cast<float>(rank * 1000 + i % 997);
      std::vector<std::future<std::string>> results;
      for (int round = 0; round < 2; ++round) {
        for (CallKind kind : {CallKind::Send, CallKind::Recv}) {
          auto done = std::make_shared<std::promise<std::string>>();
          results.push_back(done->get_future());
          Call c;
          c.kind = kind;
          c.name = kind == CallKind::Send ? "send" : "recv";
          c.data = kind == CallKind::Send ? mine.data() : got.data();
          c.count = count;
          c.dtype = DataType::Float32;
          c.peer = kind == CallKind::Send ? right : left;
          c.tag = round;
          c.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
          g.submit(std::move(c));
        }
      }
      for (auto& r : results) CHECK_EQ(r.get(), std::string());
      for (int64_t i = 0; i < count; i += 4099) CHECK_EQ(got[i], static_cast<float>(left * 1000 + i % 997));
      std::vector<float> v(5, 1.0f);
      CHECK_EQ(runCall(g, allreduceCall(v, false)), std::string());
      CHECK_EQ(v[0], static_cast<float>(n));
    });
  }
}

TEST(desync_verdicts) {
  auto at = [](int rank, bool inside, uint64_t n, const char* state) {
    RankPosition p;
    p.rank = rank;
    p.known = true;
    p.inside = inside;
    p.number = n;
    p.name = "allreduce";
    p.state = state;
    return RankPosition::decode(rank, p.encode());  // through the store's text form
  };
  const std::string same = desyncReport({at(0, true, 7, "running 3 s"), at(1, true, 7, "running 3 s")});
  CHECK(same.find("no rank lags: all are at seq 7 allreduce") != std::string::npos);
  RankPosition gone;
  gone.rank = 2;
  const std::string silent = desyncReport({at(0, true, 7, "running"), at(1, true, 7, "running"), gone});
  CHECK(silent.find("rank(s) 2 did not answer") != std::string::npos);
  const std::string lag = desyncReport(
      {at(0, true, 9, "running"), at(1, true, 9, "queued"), at(2, true, 8, "running"), at(3, false, 7, "idle")});
  CHECK(lag.find(
            "rank(s) 3 lag: rank 3 is idle after seq 7 allreduce; rank(s) 0-2 are further ahead (rank 0 is in seq 9") !=
        std::string::npos);
}

// A call stuck where its own deadline cannot see it (here a before-hook that
// sleeps) is aborted by the watchdog shortly after timeout + grace.
TEST(the_watchdog_sees_a_call_stuck_past_its_timeout) {
  GroupConfig cfg;
  cfg.timeoutMs = 300;
  Mesh m(1, cfg);
  std::vector<float> v(4, 1.0f);
  Call c = allreduceCall(v, false);
  std::atomic<bool> release{false};
  c.before = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!release && !m.groups[0]->state()->poisoned() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  const auto start = std::chrono::steady_clock::now();
  auto done = std::make_shared<std::promise<std::string>>();
  auto fut = done->get_future();
  c.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
  m.groups[0]->submit(std::move(c));
  CHECK(fut.wait_for(std::chrono::seconds(15)) == std::future_status::ready);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(took < 10.0);
  CHECK(m.groups[0]->state()->poisoned());
  CHECK(m.groups[0]->state()->reason().find("scalecomm watchdog (rank 0): allreduce seq 1 has run") !=
        std::string::npos);
  release = true;
}

// Random arguments for every collective (the same draw on every rank, so the
// ranks agree on whether it is valid): each call either raises
// InvalidArgument at submit, leaving the group usable, or returns the exact
// result. Never a crash, a hang or a write outside the buffers (the ASan
// build runs this too).
TEST(random_arguments_give_an_error_at_submit_or_the_exact_result) {
  const int n = 3;
  Mesh m(n);
  const CallKind kinds[] = {CallKind::Allreduce,     CallKind::Broadcast, CallKind::Reduce,  CallKind::Allgather,
                            CallKind::ReduceScatter, CallKind::Gather,    CallKind::Scatter, CallKind::Alltoall};
  const DataType dtypes[] = {DataType::Float32, DataType::Int64, DataType::BFloat16, DataType::UInt8};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::BAnd, ReduceOp::Avg, ReduceOp::PremulSum};
  // INT64_MAX / 2 + 1 elements of 2 or more bytes overflow 64 bits (1-byte
  // dtypes draw -2 instead: a raw-pointer API cannot know a buffer's size).
  const int64_t counts[] = {-2, 0, 1, 5, 33, INT64_MAX / 2 + 1};
  const int roots[] = {-1, 0, 2, 3, 99};
  std::atomic<int> valid{0}, invalid{0};
  onRanks(m, [&](int rank, Group& g) {
    std::mt19937 gen(20261124);  // the same draws on every rank
    for (int iter = 0; iter < 300; ++iter) {
      auto pick = [&](const auto& options) { return options[gen() % std::size(options)]; };
      Call c;
      c.kind = pick(kinds);
      c.name = "random";
      c.dtype = pick(dtypes);
      c.op = pick(ops);
      c.count = pick(counts);
      if (c.count > 1000 && elementSize(c.dtype) == 1) c.count = -2;
      c.root = pick(roots);
      const bool dropBlock = gen() % 10 == 0, nullData = gen() % 10 == 0, badSplit = gen() % 6 == 0;
      const int64_t split = static_cast<int64_t>(gen() % 3);
      c.algorithm = c.kind == CallKind::Allreduce                                 ? "ring"
                    : c.kind == CallKind::Broadcast || c.kind == CallKind::Reduce ? "chain"
                                                                                  : "";
      c.blocking = true;
      // The valid outcome, from the draw alone.
      const bool rooted = c.kind == CallKind::Broadcast || c.kind == CallKind::Reduce || c.kind == CallKind::Gather ||
                          c.kind == CallKind::Scatter;
      const bool reduces =
          c.kind == CallKind::Allreduce || c.kind == CallKind::Reduce || c.kind == CallKind::ReduceScatter;
      const bool blocky = c.kind == CallKind::Allgather || c.kind == CallKind::Gather || c.kind == CallKind::Scatter ||
                          c.kind == CallKind::Alltoall;
      bool ok = c.kind == CallKind::Alltoall ? !badSplit : c.count >= 0 && c.count < 1000;
      if (rooted && (c.root < 0 || c.root >= n)) ok = false;
      if (reduces && !reduceOpSupports(c.op, c.dtype)) ok = false;
      if (blocky && dropBlock) ok = false;
      if (!blocky && nullData && c.count > 0) ok = false;
      if (c.kind == CallKind::Alltoall && nullData && split > 0) ok = false;
      // Buffers sized for the valid shapes (a huge count is refused before any byte moves).
      const size_t es = elementSize(c.dtype);
      const int64_t elems = c.count >= 0 && c.count < 1000 ? c.count : 0;
      const int64_t total = c.kind == CallKind::ReduceScatter ? elems * n : elems;
      std::vector<uint8_t> data(static_cast<size_t>(total) * es + 1);
      std::vector<std::vector<uint8_t>> blocks(2 * n,
                                               std::vector<uint8_t>(static_cast<size_t>(elems + split) * es + 1));
      for (int64_t i = 0; i < total; ++i) sctest::storeValue(data.data(), i, c.dtype, rank + 1);
      if (c.kind == CallKind::Allgather || c.kind == CallKind::Gather) {
        for (int64_t i = 0; i < elems; ++i) sctest::storeValue(blocks[rank].data(), i, c.dtype, rank + 1);
      }
      if (c.kind == CallKind::Scatter && rank == c.root) {
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; i < elems; ++i) sctest::storeValue(blocks[q].data(), i, c.dtype, q + 1);
      }
      if (c.kind == CallKind::Alltoall) {
        c.count = 0;
        for (int q = 0; q < n; ++q) {
          c.sendCounts.push_back(q == rank ? 0 : split);
          c.recvCounts.push_back(q == rank ? 0 : split);
          for (int64_t i = 0; i < split; ++i) sctest::storeValue(blocks[q].data(), i, c.dtype, rank * 10 + q);
        }
        if (badSplit) {  // negative on every rank: one send and one receive split
          c.sendCounts[(rank + 1) % n] = -1;
          c.recvCounts[(rank + n - 1) % n] = -1;
        }
        for (int q = 0; q < 2 * n; ++q) c.blocks.push_back(nullData && q != rank ? nullptr : blocks[q].data());
      } else if (blocky) {
        for (int q = 0; q < n; ++q) c.blocks.push_back(blocks[q].data());
      }
      if (dropBlock && !c.blocks.empty()) c.blocks.pop_back();
      if (!blocky) c.data = nullData ? nullptr : data.data();
      std::string error;
      try {
        error = runCall(g, c);
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::InvalidArgument);
        error = e.what();
      }
      if (!ok) {
        if (error.empty()) throw sctest::Failure{strCat("iteration ", iter, ": an invalid call succeeded")};
        CHECK(!g.poisoned());
        if (rank == 0) ++invalid;
        continue;
      }
      if (!error.empty()) throw sctest::Failure{strCat("iteration ", iter, ": a valid call failed: ", error)};
      if (rank == 0) ++valid;
      // The exact result: rank r contributed r + 1 everywhere.
      const double sum = n * (n + 1) / 2.0;
      auto reduced = [&] {
        switch (c.op) {
          case ReduceOp::Max: return static_cast<double>(n);
          case ReduceOp::BAnd: return static_cast<double>(1 & 2 & 3);
          case ReduceOp::Avg: return isInteger(c.dtype) ? std::trunc(sum / n) : sum / n;
          default: return sum;
        }
      };
      auto expect = [&](const void* p, int64_t i, double want) {
        const double got = sctest::loadValue(p, i, c.dtype);
        if (got != want) {
          throw sctest::Failure{strCat("iteration ", iter, " kind ", static_cast<int>(c.kind), " rank ", rank,
                                       " element ", i, ": got ", got, ", want ", want)};
        }
      };
      for (int64_t i = 0; i < elems; ++i) {
        switch (c.kind) {
          case CallKind::Allreduce: expect(data.data(), i, reduced()); break;
          case CallKind::Broadcast: expect(data.data(), i, c.root + 1); break;
          case CallKind::Reduce:
            if (rank == c.root) expect(data.data(), i, reduced());
            break;
          case CallKind::ReduceScatter: expect(data.data(), rank * elems + i, reduced()); break;
          case CallKind::Allgather:
            for (int q = 0; q < n; ++q) expect(blocks[q].data(), i, q + 1);
            break;
          case CallKind::Gather:
            if (rank == c.root)
              for (int q = 0; q < n; ++q)
                if (q != rank) expect(blocks[q].data(), i, q + 1);
            break;
          case CallKind::Scatter:
            if (rank != c.root) expect(blocks[rank].data(), i, rank + 1);
            break;
          default: break;
        }
      }
      if (c.kind == CallKind::Alltoall) {
        for (int q = 0; q < n; ++q)
          for (int64_t i = 0; q != rank && i < split; ++i) expect(blocks[n + q].data(), i, q * 10 + rank);
      }
    }
  });
  CHECK(valid > 40);
  CHECK(invalid > 40);
}

TEST_MAIN()
