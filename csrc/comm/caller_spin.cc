#include "comm/caller_spin.h"

#include <algorithm>

namespace scalecomm {

void CallerSpin::callEnded(int64_t micros) {
  if (!adapts()) return;
  ++calls_;
  if (exploring_) {
    blockUs_ += static_cast<double>(micros);
    if (calls_ % kBlockCalls == 0) {  // a block ends: its sum goes to the spin it ran
      const int block = calls_ / kBlockCalls - 1;
      blocks_[runningLong_ ? 1 : 0][block / 2] = blockUs_;
      blockUs_ = 0;
    }
    if (calls_ == kExploreCalls) {
      decide();
    } else {
      runningLong_ = (calls_ / kBlockCalls) % 2 == 0 ? chosenLong_ : !chosenLong_;  // blocks alternate
    }
  } else if (calls_ == hold_ * kWindowCalls) {
    exploring_ = true;
    calls_ = 0;
    runningLong_ = chosenLong_;
  }
}

namespace {

// The median of n values (n even: the mean of the middle two); reorders them.
double median(double* v, int n) {
  std::sort(v, v + n);
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

void CallerSpin::decide() {
  ++explorations_;
  // Medians of the blocks' sums: a time slice lost to another process in one
  // block is noise, not the spin's cost; so is a gain of a microsecond a call.
  constexpr int n = kExploreCalls / kBlockCalls / 2;
  const double chosen = median(blocks_[chosenLong_ ? 1 : 0], n);
  const double other = median(blocks_[chosenLong_ ? 0 : 1], n);
  if (other < kSwitchRatio * chosen && chosen - other > kMinGainMicros * kBlockCalls) {
    chosenLong_ = !chosenLong_;
    ++changes_;
    hold_ = kFirstHold;
  } else {
    hold_ = std::min(2 * hold_, kMaxHold);
  }
  exploring_ = false;
  calls_ = 0;
  runningLong_ = chosenLong_;
}

}  // namespace scalecomm
