// The Group's compressed allreduce (CallKind::CompressedAllreduce) over
// loopback links, without torch: for every codec every rank gets the same
// bits, equal to the sum of what each rank's codec kept; the state lives in
// the slot the call holds (steps, residuals carried over; forget, restore
// and reset as promised); ranks with different codecs fail naming the codec;
// one rank or an empty buffer stays exact; bad calls are refused at submit;
// a call's exchanges are named apart on the wire; an averaging call divides.
#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "comm/loopback_mesh.h"
#include "comm/wire.h"
#include "core/error.h"
#include "group/group.h"
#include "harness.h"

using namespace scalecomm;
using sctest::gaussian;
using sctest::relativeError;

namespace {

struct Mesh {
  LoopbackFabric fabric;
  std::vector<std::shared_ptr<Group>> groups;
  explicit Mesh(int n) : fabric(n, 1 << 16) {
    GroupConfig cfg;
    cfg.timeoutMs = 20000;
    for (auto& c : loopbackCommunicators(fabric, 0)) groups.push_back(Group::create(std::move(c), cfg));
  }
  ~Mesh() {
    for (auto& g : groups) g->shutdown();
  }
};

// Submits a compressed allreduce of x on g and waits; the error text ("" on
// success). spec "auto": compress=auto's choice (layout: its weights' shapes).
std::string compressed(Group& g, const std::string& spec, std::vector<float>& x, std::shared_ptr<CompressSlot> slot,
                       bool errorFeedback = true, PowerSgdLayout layout = {}, bool average = false) {
  auto c = std::make_shared<CompressedCall>();
  if (spec == "auto")
    c->chooser = g.autoCompression();
  else
    c->site = g.compressedSite(spec);
  c->slot = std::move(slot);
  c->errorFeedback = errorFeedback;
  c->layout = std::move(layout);
  c->average = average;
  Call call;
  call.kind = CallKind::CompressedAllreduce;
  call.algorithm = g.algorithmFor(CallKind::CompressedAllreduce, 4 * static_cast<int64_t>(x.size()));
  call.name = c->chooser ? c->chooser->title(call.algorithm, -1) : c->site->title(call.algorithm);
  call.dtype = DataType::Float32;
  call.count = static_cast<int64_t>(x.size());
  call.data = x.data();
  call.compressed = std::move(c);
  auto done = std::make_shared<std::promise<std::string>>();
  auto fut = done->get_future();
  call.done = [done](const Error* e) { done->set_value(e ? e->what() : ""); };
  g.submit(std::move(call));
  return fut.get();
}

// A loopback link that keeps the header of every message this rank sends
// over it (the byte stream parsed: header, payload, padding).
class RecordingLink : public Link {
 public:
  RecordingLink(std::unique_ptr<Link> inner, std::vector<WireHeader>& sent)
      : Link(inner->peer()), inner_(std::move(inner)), sent_(sent) {}
  size_t trySend(const void* data, size_t bytes) override {
    const size_t n = inner_->trySend(data, bytes);
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n;) {
      if (skip_ > 0) {
        const size_t k = std::min<size_t>(skip_, n - i);
        skip_ -= k;
        i += k;
        continue;
      }
      const size_t k = std::min(sizeof(WireHeader) - have_, n - i);
      std::memcpy(reinterpret_cast<uint8_t*>(&header_) + have_, p + i, k);
      have_ += k;
      i += k;
      if (have_ == sizeof(WireHeader)) {
        sent_.push_back(header_);
        skip_ = paddedMessageBytes(header_.payloadBytes) - sizeof(WireHeader);
        have_ = 0;
      }
    }
    return n;
  }
  size_t tryRecv(RecvConsumer& consumer) override { return inner_->tryRecv(consumer); }
  void checkPeer() override { inner_->checkPeer(); }
  void close() override { inner_->close(); }
  Doorbell* doorbell() override { return inner_->doorbell(); }
  size_t peek(void* out, size_t n) override { return inner_->peek(out, n); }
  const char* kind() const override { return inner_->kind(); }

 private:
  std::unique_ptr<Link> inner_;
  std::vector<WireHeader>& sent_;
  WireHeader header_{};
  size_t have_ = 0;
  uint64_t skip_ = 0;
};

}  // namespace

// A compressed call runs several exchanges under its seq (a codec's rounds,
// auto's decision). A rank that finished one starts the next while a peer
// may still wait in it and look at its peers' windows and links for a
// post of its own exchange: the next one must not pass for it. So every
// message a rank sends under one (seq, part) belongs to one exchange: the
// same collective, dtype and element count.
TEST(each_exchange_of_a_compressed_call_is_named_apart_from_the_next) {
  const int ranks = 3;
  const int64_t n = 4096;
  LoopbackFabric fabric(ranks, 1 << 16);
  std::vector<std::vector<std::vector<WireHeader>>> sent(ranks, std::vector<std::vector<WireHeader>>(ranks));
  std::vector<std::shared_ptr<Group>> groups;
  GroupConfig cfg;
  cfg.timeoutMs = 20000;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::unique_ptr<Link>> links(ranks);
    for (int q = 0; q < ranks; ++q)
      if (q != r) links[q] = std::make_unique<RecordingLink>(fabric.link(r, q), sent[r][q]);
    groups.push_back(Group::create(std::make_unique<Communicator>(r, ranks, std::move(links), 0), cfg));
  }
  // auto up to and past its first decision (a dense sum, then the decision's
  // two small allreduces); PowerSGD's two rounds on a 64 x 64 weight.
  const PowerSgdLayout layout = {{n, 64}};
  const auto errors = sctest::onThreads(ranks, [&](int r) {
    Group& g = *groups[r];
    for (int call = 0; call < 8; ++call) {
      std::vector<float> x = gaussian(n, 10 * call + r);
      const std::string e = compressed(g, "auto", x, g.compressionStates().slot("auto"), true, layout);
      if (!e.empty()) throw sctest::Failure{e};
    }
    std::vector<float> x = gaussian(n, r);
    const std::string e = compressed(g, "powersgd:2", x, g.compressionStates().slot("psgd"), true, layout);
    if (!e.empty()) throw sctest::Failure{e};
  });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
  for (auto& g : groups) g->shutdown();
  int exchanges = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int q = 0; q < ranks; ++q) {
      std::map<std::pair<uint64_t, uint8_t>, WireHeader> first;
      for (const WireHeader& h : sent[r][q]) {
        if (isLeave(h)) continue;
        const auto [it, fresh] = first.emplace(std::make_pair(h.seq, h.part), h);
        exchanges += fresh;
        const WireHeader& f = it->second;
        if (f.collective != h.collective || f.dtype != h.dtype || f.totalCount != h.totalCount)
          throw sctest::Failure{strCat("rank ", r, " sent rank ", q, " two exchanges under seq ", h.seq, " part ",
                                       int{h.part}, ": ", f.totalCount, " elements of ",
                                       dataTypeName(static_cast<DataType>(f.dtype)), ", then ", h.totalCount, " of ",
                                       dataTypeName(static_cast<DataType>(h.dtype)))};
      }
    }
  }
  CHECK(exchanges > 9 * ranks);  // more than one exchange per call on some link: decisions and rounds seen
}

// average: the sum divided by the ranks, by auto running none (in its sum's
// own pass) and by a codec (after it).
TEST(an_averaging_call_divides_the_sum_by_the_ranks) {
  const int ranks = 3;
  const int64_t n = 2000;
  Mesh m(ranks);
  for (const char* spec : {"auto", "fp16"}) {
    std::vector<std::vector<float>> x(ranks);
    for (int r = 0; r < ranks; ++r) x[r] = gaussian(n, r);
    std::vector<float> mean(static_cast<size_t>(n), 0.f);
    for (int64_t i = 0; i < n; ++i) mean[i] = (x[0][i] + x[1][i] + x[2][i]) / 3;
    const auto errors = sctest::onThreads(ranks, [&](int r) {
      Group& g = *m.groups[r];
      const std::string e = compressed(g, spec, x[r], g.compressionStates().slot(spec), false, {}, true);
      if (!e.empty()) throw sctest::Failure{e};
    });
    for (const auto& e : errors) CHECK_EQ(e, std::string());
    for (int r = 0; r < ranks; ++r) CHECK(relativeError(x[r], mean) < (std::string(spec) == "auto" ? 1e-6 : 2e-3));
  }
}

TEST(every_codec_sums_what_each_rank_kept_and_its_state_lives_in_the_slot) {
  const int ranks = 3;
  const int64_t n = 3000;
  Mesh m(ranks);
  for (const CodecEntry& entry : codecRegistry()) {
    static const char* args[] = {"", ":0.1", ":8", ":2"};
    const std::string spec = std::string(entry.name) + args[static_cast<int>(entry.arg)];
    std::vector<std::shared_ptr<CompressSlot>> slots;
    for (int r = 0; r < ranks; ++r) slots.push_back(m.groups[r]->compressionStates().slot("w:" + spec));
    for (int step = 0; step < 2; ++step) {  // the second call starts from the residuals (and PowerSGD's Q)
      std::vector<std::vector<float>> x(ranks), out(ranks), before(ranks);
      for (int r = 0; r < ranks; ++r) {
        x[r] = out[r] = gaussian(n, 100 * step + r);
        before[r] = slots[r]->state.residual;
      }
      const auto errors = sctest::onThreads(ranks, [&](int r) {
        const std::string e = compressed(*m.groups[r], spec, out[r], slots[r]);
        if (!e.empty()) throw sctest::Failure{e};
      });
      for (const auto& e : errors) CHECK_EQ(e, std::string());
      std::vector<float> kept(static_cast<size_t>(n), 0.f);
      for (int r = 0; r < ranks; ++r) {
        CHECK(out[r] == out[0]);
        CHECK_EQ(slots[r]->state.steps, static_cast<uint64_t>(step + 1));
        CHECK_EQ(slots[r]->state.residual.size(), static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          kept[i] += x[r][i] + (before[r].empty() ? 0.f : before[r][i]) - slots[r]->state.residual[i];
      }
      const bool cast = entry.name == std::string("fp16") || entry.name == std::string("bf16");
      if (relativeError(out[0], kept) > (cast ? 1e-2 : 1e-4)) {
        throw sctest::Failure{spec + ": not the sum of what the ranks kept (relative error " +
                              std::to_string(relativeError(out[0], kept)) + ")"};
      }
    }
    // The group's snapshot holds what the slot holds.
    const auto snap = m.groups[0]->compressionStates().snapshot();
    CHECK(snap.count("w:" + spec) == 1);
    CHECK(snap.at("w:" + spec).residual == slots[0]->state.residual);
  }
}

TEST(forget_restore_and_reset_keep_a_held_slot_true) {
  CompressionStates states;
  auto held = states.slot("a");
  CHECK(states.slot("a") == held);
  CHECK(states.snapshot().empty());  // nothing in it yet
  held->state.residual = {1.f, 2.f};
  held->state.steps = 3;
  CHECK_EQ(states.snapshot().at("a").steps, static_cast<uint64_t>(3));
  // restore: the held slot sees the restored state; keys not restored are emptied.
  auto other = states.slot("b");
  other->state.steps = 9;
  std::map<std::string, CompressState> saved;
  saved["a"].residual = {5.f};
  saved["a"].steps = 7;
  states.restore(saved);
  CHECK(held->state.residual == std::vector<float>{5.f});
  CHECK_EQ(held->state.steps, static_cast<uint64_t>(7));
  CHECK_EQ(other->state.steps, static_cast<uint64_t>(0));
  CHECK_EQ(states.snapshot().size(), static_cast<size_t>(1));
  // reset empties in place.
  states.reset();
  CHECK(held->state.residual.empty());
  CHECK(states.snapshot().empty());
  // forget: the next slot of the key is a new, empty one.
  held->state.steps = 1;
  states.forget("a");
  CHECK(states.slot("a") != held);
  CHECK_EQ(states.slot("a")->state.steps, static_cast<uint64_t>(0));
}

TEST(ranks_with_different_codecs_fail_naming_the_codec) {
  Mesh m(2);
  const char* specs[] = {"topk:0.1", "topk:0.2"};
  std::vector<std::string> errors(2);
  const auto thrown = sctest::onThreads(2, [&](int r) {
    std::vector<float> x = gaussian(1000, r);
    errors[r] = compressed(*m.groups[r], specs[r], x, m.groups[r]->compressionStates().slot("k"));
  });
  for (const auto& e : thrown) CHECK_EQ(e, std::string());
  for (int r = 0; r < 2; ++r) {
    if (errors[r].find("allreduce with codec " + std::string(specs[r])) == std::string::npos)
      throw sctest::Failure{"rank " + std::to_string(r) + ": " + errors[r]};
  }
}

TEST(one_rank_or_an_empty_buffer_stays_exact_and_bad_calls_are_refused_at_submit) {
  {
    Mesh m(1);
    std::vector<float> x = gaussian(100, 1), want = x;
    auto slot = m.groups[0]->compressionStates().slot("k");
    CHECK_EQ(compressed(*m.groups[0], "sign", x, slot), std::string());
    CHECK(x == want);
    CHECK(slot->state.residual.empty());
  }
  Mesh m(2);
  const auto errors = sctest::onThreads(2, [&](int r) {
    Group& g = *m.groups[r];
    std::vector<float> empty;
    CHECK_EQ(compressed(g, "topk:0.1", empty, g.compressionStates().slot("e")), std::string());
    // No slot: refused before it is numbered, and the group stays usable.
    Call call;
    call.kind = CallKind::CompressedAllreduce;
    call.name = "allreduce:ring:topk:0.1";
    call.dtype = DataType::Float32;
    std::vector<float> x(10, 1.f);
    call.data = x.data();
    call.count = 10;
    bool refused = false;
    try {
      g.submit(std::move(call));
    } catch (const Error& e) {
      refused = e.kind() == ErrorKind::InvalidArgument && std::string(e.what()).find("slot") != std::string::npos;
    }
    CHECK(refused);
    bool badSpec = false;
    try {
      g.compressedSite("topk");
    } catch (const Error& e) {
      badSpec = std::string(e.what()).find("topk:0.01") != std::string::npos;
    }
    CHECK(badSpec);
    std::vector<float> y(64, static_cast<float>(r + 1));
    CHECK_EQ(compressed(g, "fp16", y, g.compressionStates().slot("f"), false), std::string());
    for (float v : y) CHECK_EQ(v, 3.f);
  });
  for (const auto& e : errors) CHECK_EQ(e, std::string());
}

TEST_MAIN()
