// The Group's compressed allreduce (CallKind::CompressedAllreduce) over
// loopback links, without torch: for every codec every rank gets the same
// bits, equal to the sum of what each rank's codec kept; the state lives in
// the slot the call holds (steps, residuals carried over; forget, restore
// and reset as promised); ranks with different codecs fail naming the codec;
// one rank or an empty buffer stays exact; bad calls are refused at submit.
#include <future>
#include <map>
#include <string>
#include <vector>

#include "comm/loopback_mesh.h"
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

// Submits a compressed allreduce of x on g and waits; the error text ("" on success).
std::string compressed(Group& g, const std::string& spec, std::vector<float>& x, std::shared_ptr<CompressSlot> slot,
                       bool errorFeedback = true) {
  auto c = std::make_shared<CompressedCall>();
  c->site = g.compressedSite(spec);
  c->slot = std::move(slot);
  c->errorFeedback = errorFeedback;
  Call call;
  call.kind = CallKind::CompressedAllreduce;
  call.algorithm = g.algorithmFor(CallKind::CompressedAllreduce, 4 * static_cast<int64_t>(x.size()));
  call.name = c->site->title(call.algorithm);
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

}  // namespace

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
