// The caller's spin choice (comm/caller_spin.h): it follows what the waits
// cost under each spin, and exploring stays a small share of the calls.
#include <cstdint>
#include <functional>

#include "comm/caller_spin.h"
#include "harness.h"

using namespace scalecomm;

namespace {

constexpr int64_t kLong = 200, kShort = 50;

// Runs `calls` calls, each taking what `wait(budget)` says; returns the calls run on the short spin.
int64_t run(CallerSpin& s, int64_t calls, const std::function<int64_t(int64_t)>& wait) {
  int64_t onShort = 0;
  for (int64_t i = 0; i < calls; ++i) {
    const int64_t b = s.budget();
    onShort += b == kShort;
    s.callEnded(wait(b));
  }
  return onShort;
}

// The peer needs the waiter's core: a wait lasts as long as the spin, and then some.
int64_t inTheWay(int64_t budget) { return budget + 30; }
// Busy processes that never block: the long spin catches the late peer, the short one yields a time slice.
int64_t busy(int64_t budget) { return budget == kLong ? 10 : 40; }

constexpr int64_t kExploration = CallerSpin::kExploreCalls;

}  // namespace

TEST(a_spin_that_the_peer_waits_for_is_given_up_after_one_exploration) {
  CallerSpin s(kLong, kShort);
  CHECK_EQ(s.budget(), kLong);  // starts long
  run(s, kExploration, inTheWay);
  CHECK(!s.chosenLong());
  CHECK_EQ(s.changes(), uint64_t{1});
  CHECK_EQ(run(s, CallerSpin::kFirstHold * CallerSpin::kWindowCalls, inTheWay),
           CallerSpin::kFirstHold * CallerSpin::kWindowCalls);  // the hold runs short throughout
}

TEST(the_long_spin_stays_where_it_saves_waiting_and_exploring_stays_rare) {
  CallerSpin s(kLong, kShort);
  const int64_t calls = 10000 * CallerSpin::kWindowCalls;
  const int64_t onShort = run(s, calls, busy);
  CHECK(s.chosenLong());
  CHECK_EQ(s.changes(), uint64_t{0});
  CHECK(s.explorations() > 100);  // it keeps checking
  // Settled, half an exploration of every longest hold and exploration runs short.
  CHECK(onShort * 100 < calls * 4);
}

TEST(a_changed_machine_is_followed_at_the_next_exploration) {
  CallerSpin s(kLong, kShort);
  run(s, 20 * kExploration, inTheWay);
  CHECK(!s.chosenLong());
  // The other job ended and busy processes arrived: the longest hold, then one exploration.
  run(s, CallerSpin::kMaxHold * CallerSpin::kWindowCalls + kExploration, busy);
  CHECK(s.chosenLong());
  CHECK_EQ(s.changes(), uint64_t{2});
}

TEST(waits_that_cost_the_same_under_both_keep_the_long_spin) {
  CallerSpin s(kLong, kShort);
  run(s, 50 * kExploration, [](int64_t) { return int64_t{25}; });
  CHECK(s.chosenLong());
  CHECK_EQ(s.changes(), uint64_t{0});
  run(s, 10 * kExploration, [](int64_t b) { return b == kLong ? int64_t{3} : int64_t{2}; });  // a microsecond: noise
  CHECK_EQ(s.changes(), uint64_t{0});
}

TEST(one_spin_for_both_never_adapts) {
  CallerSpin s(kShort, kShort);
  CHECK(!s.adapts());
  CHECK_EQ(run(s, 10 * kExploration, inTheWay), 10 * kExploration);  // kShort is the only spin
  CHECK_EQ(s.explorations(), uint64_t{0});
  CallerSpin none(0, kShort);  // a crowded machine: no caller spin, nothing to choose
  CHECK_EQ(none.budget(), int64_t{0});
  CHECK(!none.adapts());
}

TEST_MAIN()
