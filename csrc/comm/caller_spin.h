// scalecomm comm: the spin of waits on a blocking call's own thread, chosen
// by how long its calls take under each.
//
// Contract:
// - budget() is the spin, in microseconds, of a caller's wait before it
//   yields and sleeps (Communicator::idle): `longUs` or `shortUs`. A long
//   spin catches a peer that arrives a little late without handing the core
//   to other work (busy processes that never block); it delays the peer
//   when the peer needs that core (another job's ranks that also spin).
// - Which one is measured, not guessed: an exploration runs kExploreCalls
//   calls alternating the two spins in blocks of kBlockCalls (the chosen one
//   first) and sums each block's call time (callEnded() is told every
//   call's length). Blocks, not single calls: a long spin's cost falls on
//   the calls after it (the peer it kept off the core arrives late to the
//   next one); short blocks, so both spins see the same mix of sizes. The
//   other spin becomes the choice when the median of its blocks is under
//   kSwitchRatio of the chosen one's and at least kMinGainMicros a call
//   less (one time slice lost to another process is one block's noise).
// - The choice then holds for kFirstHold windows of kWindowCalls calls,
//   doubled by each exploration that keeps it (up to kMaxHold), back to
//   kFirstHold when it changes; then the next exploration. Once settled,
//   the other spin runs on kExploreCalls / 2 of every kMaxHold *
//   kWindowCalls + kExploreCalls calls (3 %).
// - Starts on `longUs`, exploring. longUs <= shortUs: nothing adapts and
//   budget() is longUs.
// - Not thread-safe: one thread at a time (the one executing the group's
//   calls, under its exec lock).
#pragma once

#include <cstdint>

namespace scalecomm {

class CallerSpin {
 public:
  static constexpr int kWindowCalls = 128;
  static constexpr int kExploreCalls = 512;
  static constexpr int kBlockCalls = 32;
  static constexpr double kSwitchRatio = 0.8;
  static constexpr double kMinGainMicros = 2;
  static constexpr int kFirstHold = 4;
  static constexpr int kMaxHold = 64;

  CallerSpin(int64_t longUs = 0, int64_t shortUs = 0) : longUs_(longUs), shortUs_(shortUs) {}

  int64_t budget() const { return adapts() && !runningLong_ ? shortUs_ : longUs_; }
  bool adapts() const { return longUs_ > shortUs_; }
  // The choice between explorations (true: longUs).
  bool chosenLong() const { return !adapts() || chosenLong_; }
  void callEnded(int64_t micros);
  // How many times the choice changed, and explorations finished.
  uint64_t changes() const { return changes_; }
  uint64_t explorations() const { return explorations_; }

 private:
  void decide();

  int64_t longUs_, shortUs_;
  bool chosenLong_ = true;
  bool runningLong_ = true;  // the spin this call runs
  bool exploring_ = true;
  int calls_ = 0;              // in this exploration or hold
  int hold_ = kFirstHold / 2;  // windows; doubled by each exploration that keeps the choice
  double blockUs_ = 0;         // this block's
  // This exploration's blocks' call microseconds: [short, long][block]
  double blocks_[2][kExploreCalls / kBlockCalls / 2] = {};
  uint64_t changes_ = 0, explorations_ = 0;
};

}  // namespace scalecomm
