// The Group's device path on the CPU emulation of a queued channel: calls
// with a device index run on the device's queued channel, after the caller's
// inputs (DeviceSync::begin) and complete only when the queue has run them
// (the group waits for end()'s event); every collective kind, a device batch
// of sends and receives, a batch mixing devices refused, a call captured
// into a graph counts as done once issued, and a peer that never comes
// fails the call with a clear error instead of hanging it. Device memory on
// a host channel (no device channel) is staged in chunks through two host
// slots, with the copies of one chunk issued around the collective of the
// next, exact for every chunking. A compressed call's own body runs on the
// device's queue, and its device-held state snapshots in host form.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/emulated_queues.h"
#include "comm/loopback_mesh.h"
#include "compress/codec.h"
#include "compress/compression_states.h"
#include "core/error.h"
#include "group/group.h"
#include "harness.h"

using namespace scalecomm;

namespace {

// The caller's device work, emulated. The caller writes its inputs after
// submit() and then releases them (as its stream would reach the "ready"
// event); begin() makes the rank's queue wait for that, then lag a little, so
// a group that did not wait for end()'s event would see stale outputs.
struct QueueSync : DeviceSync {
  EmulatedQueuedChannel* ch;
  std::shared_future<void> inputsReady;
  bool capture = false;
  std::atomic<int> begun{0}, ended{0};
  QueueSync(EmulatedQueuedChannel* c, std::shared_future<void> ready, bool capturing = false)
      : ch(c), inputsReady(std::move(ready)), capture(capturing) {}
  void begin(void* stream) override {
    CHECK(stream == ch->stream());
    ++begun;
    ch->enqueue([f = inputsReady] {
      f.wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
  }
  void* end(void*) override {
    ++ended;
    return ch->recordEvent();
  }
  bool capturing() const override { return capture; }
};

struct DeviceMesh {
  QueueFabric queues;
  LoopbackFabric links;
  std::vector<std::shared_ptr<Group>> groups;
  explicit DeviceMesh(int n, std::chrono::milliseconds stall = std::chrono::seconds(10), int64_t timeoutMs = 20000)
      : queues(n, stall), links(n, 1 << 16) {
    GroupConfig cfg;
    cfg.timeoutMs = timeoutMs;
    for (auto& c : loopbackCommunicators(links, 0)) {
      const int r = c->rank();
      groups.push_back(Group::create(std::move(c), cfg, {}, nullptr));
      groups.back()->setDeviceChannels([this, r](int device, const Deadline&) -> QueuedChannel& {
        CHECK_EQ(device, 3);
        return queues.channel(r);
      });
    }
  }
  ~DeviceMesh() {
    for (auto& g : groups) g->shutdown();
  }
};

void onRanks(DeviceMesh& m, const std::function<void(int, Group&)>& fn) {
  const auto errors = sctest::onThreads(static_cast<int>(m.groups.size()), [&](int r) { fn(r, *m.groups[r]); });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
}

// Sets call.done; the future holds the error text once it ran ("" on success).
std::future<std::string> whenDone(Call& call) {
  auto done = std::make_shared<std::promise<std::string>>();
  call.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
  return done->get_future();
}

// Submits `call` on device 3, writes the inputs with `fill` only after
// submit() returned, then releases them; returns the error text once done.
std::string runOnDevice(DeviceMesh& m, int rank, Group& g, Call call, const std::function<void()>& fill) {
  std::promise<void> ready;
  auto sync = std::make_shared<QueueSync>(&m.queues.channel(rank), ready.get_future().share());
  call.deviceIndex = 3;
  call.device = true;
  call.deviceSync = sync;
  auto fut = whenDone(call);
  g.submit(std::move(call));
  fill();
  ready.set_value();
  std::string err = fut.get();
  CHECK_EQ(sync->begun.load(), 1);
  CHECK_EQ(sync->ended.load(), 1);
  return err;
}

// A device buffer the host must not touch, moved through two host slots by
// one copy queue (a thread that runs copies in issue order, each a little
// late, as a copy engine would); every call is logged for the order checks.
class QueueStager final : public Stager {
 public:
  QueueStager(uint8_t* device, int64_t chunk, bool down, bool up)
      : device_(device), chunk_(chunk), down_(down), up_(up), thread_([this] { loop(); }) {
    for (auto& s : slots_) s.assign(static_cast<size_t>(chunk), 0xEE);
  }
  ~QueueStager() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int64_t chunkBytes() const override { return chunk_; }
  void down(int slot, int64_t offset, int64_t bytes) override {
    log.push_back("down " + std::to_string(offset / chunk_));
    downTicket_[slot] = post([=, this] {
      if (down_ && bytes > 0) std::memcpy(slots_[slot].data(), device_ + offset, static_cast<size_t>(bytes));
    });
  }
  void* ready(int slot) override {
    log.push_back("ready " + std::to_string(readies_++));
    waitFor(downTicket_[slot]);
    return slots_[slot].data();
  }
  void up(int slot, int64_t offset, int64_t bytes) override {
    log.push_back("up " + std::to_string(offset / chunk_));
    post([=, this] {
      if (up_ && bytes > 0) std::memcpy(device_ + offset, slots_[slot].data(), static_cast<size_t>(bytes));
    });
  }
  void finish() override {
    log.push_back("finish");
    waitFor(issued_);
  }
  // Chunk k's collective runs between "ready k" and "up k"; the log has the issue order.
  std::vector<std::string> log;

 private:
  int64_t post(std::function<void()> f) {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(f));
    cv_.notify_all();
    return ++issued_;
  }
  void waitFor(int64_t ticket) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return ran_ >= ticket; });
  }
  void loop() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto f = std::move(queue_.front());
      queue_.pop_front();
      g.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      f();
      g.lock();
      ++ran_;
      cv_.notify_all();
    }
  }
  uint8_t* device_;
  int64_t chunk_;
  bool down_, up_;
  std::vector<uint8_t> slots_[2];
  int64_t downTicket_[2] = {0, 0};
  int64_t readies_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int64_t issued_ = 0, ran_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

Call callOf(CallKind kind, const char* name, DataType dtype, int64_t count) {
  Call c;
  c.kind = kind;
  c.name = name;
  c.dtype = dtype;
  c.count = count;
  return c;
}

}  // namespace

TEST(every_collective_on_a_device_runs_on_its_queue_after_the_inputs) {
  for (int n : {1, 2, 3}) {
    DeviceMesh m(n);
    onRanks(m, [&](int rank, Group& g) {
      const float total = static_cast<float>(n * (n + 1) / 2);
      for (const char* algo : {"ring", "rhd", "tree", "direct", "ps", "nccl"}) {
        std::vector<float> v(1001, -1.0f);
        Call c = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, 1001);
        c.op = ReduceOp::Sum;
        c.algorithm = algo;
        c.data = v.data();
        CHECK_EQ(runOnDevice(m, rank, g, std::move(c), [&] { v.assign(1001, static_cast<float>(rank + 1)); }),
                 std::string());
        for (float x : v) CHECK_EQ(x, total);
      }
      for (const char* algo : {"tree", "chain", "nccl"}) {
        std::vector<int32_t> b(77, -1);
        Call bc = callOf(CallKind::Broadcast, "broadcast", DataType::Int32, 77);
        bc.algorithm = algo;
        bc.data = b.data();
        bc.root = n - 1;
        CHECK_EQ(runOnDevice(m, rank, g, std::move(bc), [&] { b.assign(77, rank == n - 1 ? 42 : 0); }), "");
        for (int32_t x : b) CHECK_EQ(x, 42);
        std::vector<int64_t> red(5, -1);
        Call rc = callOf(CallKind::Reduce, "reduce", DataType::Int64, 5);
        rc.algorithm = algo;
        rc.op = ReduceOp::Max;
        rc.data = red.data();
        rc.root = 0;
        CHECK_EQ(runOnDevice(m, rank, g, std::move(rc), [&] { red.assign(5, rank * 10); }), "");
        if (rank == 0)
          for (int64_t x : red) CHECK_EQ(x, static_cast<int64_t>((n - 1) * 10));
      }
      for (const char* algo : {"ring", "nccl"}) {
        std::vector<std::vector<double>> outs(n, std::vector<double>(3, -1));
        Call ag = callOf(CallKind::Allgather, "allgather", DataType::Float64, 3);
        ag.algorithm = algo;
        for (auto& o : outs) ag.blocks.push_back(o.data());
        CHECK_EQ(runOnDevice(m, rank, g, std::move(ag), [&] { outs[rank].assign(3, rank + 0.5); }), "");
        for (int q = 0; q < n; ++q)
          for (double x : outs[q]) CHECK_EQ(x, q + 0.5);
        std::vector<float> work(2 * n, -1.0f);
        Call rs = callOf(CallKind::ReduceScatter, "reduce_scatter", DataType::Float32, 2);
        rs.algorithm = algo;
        rs.op = ReduceOp::Sum;
        rs.data = work.data();
        CHECK_EQ(runOnDevice(m, rank, g, std::move(rs),
                             [&] {
                               for (int q = 0; q < n; ++q) work[2 * q] = work[2 * q + 1] = static_cast<float>(rank + q);
                             }),
                 "");
        CHECK_EQ(work[2 * rank + 1], static_cast<float>(n * (n - 1) / 2 + n * rank));
      }
      std::vector<std::vector<int32_t>> blocks(n, std::vector<int32_t>(2, -1));
      Call ga = callOf(CallKind::Gather, "gather", DataType::Int32, 2);
      for (auto& bl : blocks) ga.blocks.push_back(bl.data());
      ga.root = 0;
      CHECK_EQ(runOnDevice(m, rank, g, std::move(ga), [&] { blocks[rank].assign(2, 100 + rank); }), "");
      if (rank == 0)
        for (int q = 0; q < n; ++q) CHECK_EQ(blocks[q][1], 100 + q);
      std::vector<std::vector<int32_t>> parts(n, std::vector<int32_t>(2, -1));
      Call sc = callOf(CallKind::Scatter, "scatter", DataType::Int32, 2);
      for (auto& bl : parts) sc.blocks.push_back(bl.data());
      sc.root = n - 1;
      CHECK_EQ(runOnDevice(m, rank, g, std::move(sc),
                           [&] {
                             if (rank == n - 1)
                               for (int q = 0; q < n; ++q) parts[q].assign(2, 200 + q);
                           }),
               "");
      CHECK_EQ(parts[rank][0], 200 + rank);
      std::vector<int32_t> send(n, -1), recv(n, -1);
      Call a2a = callOf(CallKind::Alltoall, "all_to_all", DataType::Int32, 0);
      for (int q = 0; q < n; ++q) a2a.blocks.push_back(&send[q]);
      for (int q = 0; q < n; ++q) a2a.blocks.push_back(&recv[q]);
      a2a.sendCounts.assign(n, 1);
      a2a.recvCounts.assign(n, 1);
      a2a.sendCounts[rank] = a2a.recvCounts[rank] = 0;
      CHECK_EQ(runOnDevice(m, rank, g, std::move(a2a),
                           [&] {
                             for (int q = 0; q < n; ++q) send[q] = rank * 10 + q;
                           }),
               "");
      for (int q = 0; q < n; ++q)
        if (q != rank) CHECK_EQ(recv[q], q * 10 + rank);
      if (n > 1) {  // ring of sends and receives, one call each, in an order that cannot deadlock
        std::vector<int16_t> out(9, -1), in(9, -1);
        Call s = callOf(CallKind::Send, "send", DataType::Int16, 9);
        s.data = out.data();
        s.peer = (rank + 1) % n;
        Call r = callOf(CallKind::Recv, "recv", DataType::Int16, 9);
        r.data = in.data();
        r.peer = (rank + n - 1) % n;
        auto fillOut = [&] { out.assign(9, static_cast<int16_t>(rank)); };
        if (rank == 0) {
          CHECK_EQ(runOnDevice(m, rank, g, std::move(s), fillOut), "");
          CHECK_EQ(runOnDevice(m, rank, g, std::move(r), [] {}), "");
        } else {
          CHECK_EQ(runOnDevice(m, rank, g, std::move(r), [] {}), "");
          CHECK_EQ(runOnDevice(m, rank, g, std::move(s), fillOut), "");
        }
        CHECK_EQ(in[8], static_cast<int16_t>((rank + n - 1) % n));
      }
    });
  }
}

TEST(a_device_ring_sends_each_step_as_one_message_not_host_segments) {
  // Segments inside a queued group overlap nothing: each would only be one more
  // transport operation (on a shared H200, 256 KiB segments made ring over NCCL
  // 14x slower than NCCL's own allreduce at 4-256 MiB).
  const int n = 2;
  const int64_t count = int64_t{2} << 20;  // 8 MiB: 16 host segments per step
  DeviceMesh m(n);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> v(static_cast<size_t>(count), -1.0f);
    Call c = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, count);
    c.op = ReduceOp::Sum;
    c.algorithm = "ring";
    c.data = v.data();
    const int64_t groups = m.queues.groupsRun(rank), messages = m.queues.messagesRun(rank);
    CHECK_EQ(runOnDevice(m, rank, g, std::move(c), [&] { v.assign(v.size(), static_cast<float>(rank + 1)); }), "");
    for (float x : {v.front(), v[v.size() / 2], v.back()}) CHECK_EQ(x, 3.0f);
    // Two steps (reduce-scatter, allgather), each one send and one receive.
    CHECK_EQ(m.queues.groupsRun(rank) - groups, int64_t{2});
    CHECK_EQ(m.queues.messagesRun(rank) - messages, int64_t{4});
  });
}

namespace {

// A state held "on the device": the residual in the emulated device memory.
struct EmulatedDeviceState final : CompressState::OnDevice {
  std::vector<float> residual;
  void copyTo(CompressState& host) const override { host.residual = residual; }
};

}  // namespace

TEST(auto_on_a_device_runs_the_transports_own_collective_where_it_takes_the_call) {
  // NCCL's own allreduce, called through scalecomm, ran 1.03-1.14x faster than
  // ProcessGroupNCCL on a shared H200 and faster than our ring over NCCL from
  // 1 MiB: auto (and a host-only choice) on device memory runs it. Where NCCL
  // has no such reduction (int16) the collective's default schedule runs.
  const int n = 2;
  DeviceMesh m(n);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> warm(8, 1.0f);  // the channel's first call makes it (its start is a group of its own)
    Call w = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, 8);
    w.op = ReduceOp::Sum;
    w.algorithm = "ring";
    w.data = warm.data();
    CHECK_EQ(runOnDevice(m, rank, g, std::move(w), [] {}), "");
    for (const char* algo : {"auto", "mpi", ""}) {
      std::vector<float> v(1001, -1.0f);
      Call c = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, 1001);
      c.op = ReduceOp::Sum;
      c.algorithm = algo;
      c.data = v.data();
      const int64_t groups = m.queues.groupsRun(rank);
      CHECK_EQ(runOnDevice(m, rank, g, std::move(c), [&] { v.assign(1001, static_cast<float>(rank + 1)); }), "");
      for (float x : v) CHECK_EQ(x, 3.0f);
      CHECK_EQ(m.queues.groupsRun(rank) - groups, int64_t{0});  // native: no send/recv groups
      std::vector<int16_t> w(1001, -1);
      Call d = callOf(CallKind::Allreduce, "allreduce", DataType::Int16, 1001);
      d.op = ReduceOp::Sum;
      d.algorithm = algo;
      d.data = w.data();
      CHECK_EQ(runOnDevice(m, rank, g, std::move(d), [&] { w.assign(1001, static_cast<int16_t>(rank + 1)); }), "");
      for (int16_t x : w) CHECK_EQ(x, int16_t{3});
      CHECK_EQ(m.queues.groupsRun(rank) - groups, int64_t{2});  // the ring's two steps
    }
  });
}

TEST(a_compressed_call_with_its_own_body_runs_it_on_the_device_queue_and_its_state_snapshots_in_host_form) {
  // The body stands in for the torch adapter's codecs on a CUDA stream: its
  // work is queued on the device's queue, in order with the payload's
  // allreduce, and its error-feedback residual lives "on the device".
  for (int n : {2, 3}) {
    DeviceMesh m(n);
    onRanks(m, [&](int rank, Group& g) {
      const int64_t count = 1001;
      const std::unique_ptr<Codec> fp16 = makeCodec(CodecSpec::parse("fp16"));
      std::shared_ptr<CompressSlot> slot = g.compressionStates().slot("bucket0");
      std::vector<float> v(count, -1.0f);
      for (int step = 0; step < 2; ++step) {
        auto c = std::make_shared<CompressedCall>();
        c->site = g.compressedSite("fp16");
        c->slot = slot;
        c->errorFeedback = true;
        EmulatedQueuedChannel& queue = m.queues.channel(rank);
        c->body = [&, count](CompressState& state, const CompressComms& comms) {
          CHECK_EQ(comms.size, n);
          if (!state.device) state.device = std::make_shared<EmulatedDeviceState>();
          auto* dev = static_cast<EmulatedDeviceState*>(state.device.get());
          auto payload = std::make_shared<std::vector<uint8_t>>(2 * count);
          queue.enqueue([&, dev, payload, count] {
            dev->residual.resize(count, 0.f);
            fp16->encode(v.data(), dev->residual.data(), count, payload->data(), 0, rank);
          });
          comms.allreduce(payload->data(), count, DataType::Float16, ReduceOp::Sum);
          queue.enqueue([&, payload, count] {
            std::fill(v.begin(), v.end(), 0.f);
            fp16->decodeAdd(v.data(), count, payload->data(), 0);
          });
          state.steps += 1;
        };
        Call call = callOf(CallKind::CompressedAllreduce, "allreduce:ring:fp16", DataType::Float32, count);
        call.algorithm = "ring";
        call.data = v.data();
        call.compressed = std::move(c);
        // 1 + 2^-11 is half a float16 step above 1: step 0 sends 1 and keeps 2^-11.
        const float value = 1.0f + std::ldexp(1.0f, -11);
        CHECK_EQ(runOnDevice(m, rank, g, std::move(call), [&] { v.assign(count, value); }), "");
        // Step 1 sends the residual too: 1 + 2^-10 is a float16.
        const float sent = step == 0 ? 1.0f : 1.0f + std::ldexp(1.0f, -10);
        float sum = 0.f;  // summed in float16, as the payloads are
        for (int q = 0; q < n; ++q) sum = fp16ToFloat(floatToFp16(sum + sent));
        for (float x : {v.front(), v.back()}) CHECK_EQ(x, sum);
      }
      CHECK_EQ(slot->state.steps, uint64_t{2});
      CHECK(slot->state.residual.empty());  // held on the device
      const auto snap = g.compressionStates().snapshot();
      CHECK_EQ(snap.count("bucket0"), size_t{1});
      const CompressState& host = snap.at("bucket0");
      CHECK(!host.device);
      CHECK_EQ(host.residual.size(), static_cast<size_t>(count));
      CHECK_EQ(host.residual[0], 0.0f);  // step 1 sent all of it
    });
  }
}

TEST(a_compressed_body_allgathers_its_payloads_on_the_device_queue_with_the_groups_algorithm) {
  // The codecs that do not sum (top-k here) allgather their payloads: on a
  // device, over its queued channel, with the call's algorithm (nccl: the
  // transport's own allgather).
  for (const char* algo : {"ring", "nccl"}) {
    for (int n : {2, 3}) {
      DeviceMesh m(n);
      onRanks(m, [&](int rank, Group& g) {
        const int64_t count = 1000;
        const std::unique_ptr<Codec> topk = makeCodec(CodecSpec::parse("topk:0.01"));
        const int64_t b = topk->payloadBytes(count);
        std::vector<float> v(count, 0.0f);
        auto c = std::make_shared<CompressedCall>();
        c->site = g.compressedSite("topk:0.01");
        c->slot = g.compressionStates().slot("k");
        EmulatedQueuedChannel& queue = m.queues.channel(rank);
        c->body = [&, count, b](CompressState& state, const CompressComms& comms) {
          auto all = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(comms.size * b));
          queue.enqueue(
              [&, all, count, b] { topk->encode(v.data(), nullptr, count, all->data() + rank * b, 0, rank); });
          comms.allgatherBytes(all->data(), b);
          queue.enqueue([&, all, count, b] {
            std::fill(v.begin(), v.end(), 0.f);
            for (int q = 0; q < n; ++q) topk->decodeAdd(v.data(), count, all->data() + q * b, 0);
          });
          state.steps += 1;
        };
        Call call = callOf(CallKind::CompressedAllreduce, "allreduce:ring:topk:0.01", DataType::Float32, count);
        call.algorithm = algo;
        call.data = v.data();
        call.compressed = std::move(c);
        // Rank r's ten largest values sit at 10r..10r+9: the sum keeps every rank's.
        CHECK_EQ(runOnDevice(m, rank, g, std::move(call),
                             [&] {
                               for (int64_t i = 0; i < count; ++i) v[i] = 0.001f * static_cast<float>(i % 7);
                               for (int j = 0; j < 10; ++j) v[10 * rank + j] = 100.0f + static_cast<float>(rank);
                             }),
                 "");
        for (int q = 0; q < n; ++q)
          for (int j = 0; j < 10; ++j) CHECK_EQ(v[10 * q + j], 100.0f + static_cast<float>(q));
        CHECK_EQ(v[999], 0.0f);  // not among any rank's top ten
      });
    }
  }
}

TEST(a_compressed_call_of_device_memory_without_its_own_body_is_refused_before_it_runs) {
  DeviceMesh m(1);
  Group& g = *m.groups[0];
  std::vector<float> v(8, 1.0f);
  auto c = std::make_shared<CompressedCall>();
  c->site = g.compressedSite("fp16");
  c->slot = g.compressionStates().slot("k");
  Call call = callOf(CallKind::CompressedAllreduce, "allreduce:ring:fp16", DataType::Float32, 8);
  call.data = v.data();
  call.compressed = std::move(c);
  call.deviceIndex = 3;
  call.device = true;
  std::string err;
  try {
    g.submit(std::move(call));
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK(err.find("needs its own body") != std::string::npos);
}

TEST(a_device_batch_of_sends_and_receives_runs_as_one_group) {
  const int n = 3;
  DeviceMesh m(n);
  onRanks(m, [&](int rank, Group& g) {
    // Every rank receives from both neighbours first, then sends to both: one
    // grouped exchange (NCCL needs it grouped: issued one by one, it would deadlock).
    std::vector<float> left(4, -1.0f), right(4, -1.0f), out(4, -1.0f);
    std::vector<std::promise<void>> ready(4);
    std::vector<std::shared_ptr<QueueSync>> syncs;
    std::atomic<int> partsDone{0};
    g.startCoalescing();
    auto part = [&](CallKind kind, void* data, int peer) {
      Call c = callOf(kind, kind == CallKind::Send ? "send" : "recv", DataType::Float32, 4);
      c.data = data;
      c.peer = peer;
      c.deviceIndex = 3;
      c.device = true;
      syncs.push_back(std::make_shared<QueueSync>(&m.queues.channel(rank), ready[syncs.size()].get_future().share()));
      c.deviceSync = syncs.back();
      c.done = [&](const Error* e) { partsDone += e == nullptr; };
      g.submit(std::move(c));
    };
    part(CallKind::Recv, left.data(), (rank + n - 1) % n);
    part(CallKind::Recv, right.data(), (rank + 1) % n);
    part(CallKind::Send, out.data(), (rank + 1) % n);
    part(CallKind::Send, out.data(), (rank + n - 1) % n);
    Call batch;
    batch.name = "batch_isend_irecv";
    auto fut = whenDone(batch);
    g.endCoalescing(std::move(batch));
    out.assign(4, static_cast<float>(rank));
    for (auto& p : ready) p.set_value();
    CHECK_EQ(fut.get(), std::string());
    CHECK_EQ(partsDone.load(), 4);
    for (const auto& s : syncs) {
      CHECK_EQ(s->begun.load(), 1);
      CHECK_EQ(s->ended.load(), 1);
    }
    CHECK_EQ(left[3], static_cast<float>((rank + n - 1) % n));
    CHECK_EQ(right[3], static_cast<float>((rank + 1) % n));
  });
}

TEST(a_batch_mixing_devices_is_refused_and_nothing_is_sent) {
  DeviceMesh m(2);
  auto& g = *m.groups[0];
  std::vector<float> a(2), b(2);
  std::promise<void> ready;
  g.startCoalescing();
  Call d = callOf(CallKind::Send, "send", DataType::Float32, 2);
  d.data = a.data();
  d.peer = 1;
  d.deviceIndex = 3;
  d.device = true;
  d.deviceSync = std::make_shared<QueueSync>(&m.queues.channel(0), ready.get_future().share());
  std::string partError;
  d.done = [&](const Error* e) { partError = e ? e->what() : ""; };
  g.submit(std::move(d));
  Call h = callOf(CallKind::Recv, "recv", DataType::Float32, 2);
  h.data = b.data();
  h.peer = 1;
  try {
    g.submit(std::move(h));
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::InvalidArgument);
    const std::string what = e.what();
    CHECK(what.find("recv (rank 0): this batch_isend_irecv part is on the host but the first part is on device 3") !=
          std::string::npos);
    CHECK(what.find("none of it was sent") != std::string::npos);
  }
  CHECK(!g.coalescing());
  CHECK(partError.find("the batch was abandoned") != std::string::npos);
}

TEST(a_call_captured_into_a_graph_is_done_once_issued) {
  const int n = 2;
  DeviceMesh m(n);
  onRanks(m, [&](int rank, Group& g) {
    std::vector<float> v(100, -1.0f);
    Call c = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, 100);
    c.op = ReduceOp::Sum;
    c.algorithm = "ring";
    c.data = v.data();
    std::promise<void> ready;
    auto sync = std::make_shared<QueueSync>(&m.queues.channel(rank), ready.get_future().share(), /*capturing=*/true);
    c.deviceIndex = 3;
    c.deviceSync = sync;
    auto fut = whenDone(c);
    g.submit(std::move(c));
    // Done while the queue still waits for the inputs: the group did not wait for the work.
    const bool doneFirst = fut.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    if (!doneFirst) {  // a group that waited: let it finish (the queue writes into v), then fail
      ready.set_value();
      fut.wait();
    }
    CHECK(doneFirst);
    CHECK_EQ(fut.get(), std::string());
    CHECK_EQ(v[0], -1.0f);
    v.assign(100, static_cast<float>(rank + 1));
    ready.set_value();
    m.queues.channel(rank).synchronize(Deadline::after(std::chrono::seconds(10)));
    for (float x : v) CHECK_EQ(x, 3.0f);
  });
}

TEST(a_peer_that_never_comes_fails_the_device_call_instead_of_hanging_it) {
  DeviceMesh m(2, std::chrono::milliseconds(1500));
  auto& g = *m.groups[0];
  std::vector<float> v(64, 1.0f);
  Call c = callOf(CallKind::Allreduce, "allreduce", DataType::Float32, 64);
  c.op = ReduceOp::Sum;
  c.algorithm = "ring";
  c.data = v.data();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = runOnDevice(m, 0, g, std::move(c), [] {});
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
  CHECK(err.find("allreduce") != std::string::npos);
  CHECK(err.find("stalled") != std::string::npos);
  CHECK(g.poisoned());
}

TEST(staged_device_memory_moves_in_overlapped_chunks_and_is_exact) {
  constexpr int64_t kChunk = 64;  // 16 floats
  for (int n : {1, 2, 3}) {
    DeviceMesh m(n);
    onRanks(m, [&](int rank, Group& g) {
      for (int64_t count : {0, 1, 15, 16, 17, 100}) {
        const int64_t chunks = std::max<int64_t>(1, (count + 15) / 16);
        for (int kind = 0; kind < 4; ++kind) {
          // allreduce (ring, rhd), broadcast from the last rank, reduce (max) to rank 0
          const bool allreduce = kind < 2, broadcast = kind == 2;
          std::vector<float> device(static_cast<size_t>(count));
          for (int64_t i = 0; i < count; ++i) device[i] = static_cast<float>((i % 7) * (rank + 1));
          const int root = broadcast ? n - 1 : 0;
          const bool down = allreduce || !broadcast || rank == root,
                     up = allreduce || (broadcast ? rank != root : rank == root);
          auto stager = std::make_shared<QueueStager>(reinterpret_cast<uint8_t*>(device.data()), kChunk, down, up);
          Call c = callOf(allreduce   ? CallKind::Allreduce
                          : broadcast ? CallKind::Broadcast
                                      : CallKind::Reduce,
                          allreduce   ? "allreduce"
                          : broadcast ? "broadcast"
                                      : "reduce",
                          DataType::Float32, count);
          c.algorithm = kind == 0 ? "ring" : kind == 1 ? "rhd" : broadcast ? "tree" : "chain";
          c.op = allreduce ? ReduceOp::Sum : broadcast ? ReduceOp::None : ReduceOp::Max;
          c.root = allreduce ? -1 : root;
          c.data = device.data();
          c.device = true;
          c.stager = stager;
          auto fut = whenDone(c);
          g.submit(std::move(c));
          CHECK_EQ(fut.get(), std::string());
          for (int64_t i = 0; i < count; ++i) {
            const float base = static_cast<float>(i % 7);
            const float want = allreduce   ? base * static_cast<float>(n * (n + 1) / 2)
                               : broadcast ? base * static_cast<float>(root + 1)
                               : rank == 0 ? base * static_cast<float>(n)
                                           : base * static_cast<float>(rank + 1);  // a non-root keeps its input
            CHECK_EQ(device[i], want);
          }
          // Issue order: chunk k+1 goes down before chunk k runs; chunk k-1 came
          // up before chunk k+1 goes down into its slot; every chunk comes up.
          const auto& log = stager->log;
          const auto at = [&](const std::string& e) { return std::find(log.begin(), log.end(), e) - log.begin(); };
          CHECK_EQ(static_cast<int64_t>(log.size()), 3 * chunks + 1);
          CHECK_EQ(log.back(), std::string("finish"));
          for (int64_t k = 0; k < chunks; ++k) {
            const std::string d = "down " + std::to_string(k), r = "ready " + std::to_string(k),
                              u = "up " + std::to_string(k);
            CHECK(at(d) < at(r) && at(r) < at(u));
            if (k + 1 < chunks) CHECK(at("down " + std::to_string(k + 1)) < at(r));
            if (k >= 1 && k + 1 < chunks)
              CHECK(at("up " + std::to_string(k - 1)) < at("down " + std::to_string(k + 1)));
          }
        }
      }
    });
  }
}

TEST_MAIN()
