// scalecomm compress: what compress="auto" keeps per tensor key
// (CompressState::choice; compress/auto_select.h decides it).
//
// Contract: plain data, copied with the key's state (a checkpoint's
// snapshot). Candidate indices are into autoCandidates().
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace scalecomm {

// The last kSize samples of a time. low() is their lower quartile: a call
// that waited for a late peer (its backward still running) shows the wait,
// not the link or the codec; the calls on which this rank arrived last do not.
struct TimeWindow {
  static constexpr int kSize = 8;
  double v[kSize] = {};
  int count = 0, next = 0;
  void add(double seconds) {
    v[next] = seconds;
    next = (next + 1) % kSize;
    count = std::min(count + 1, kSize);
  }
  double low() const { return lowOfLast(count); }  // 0: no sample
  // The lower quartile of the last m samples (all where fewer): two windows
  // compared on as many samples each, since the quartile of more samples
  // reaches further into a time's fast tail.
  double lowOfLast(int m) const {
    m = std::min(m, count);
    if (m <= 0) return 0;
    double s[kSize];
    for (int j = 0; j < m; ++j) s[j] = v[(next - 1 - j + kSize) % kSize];
    std::nth_element(s, s + (m - 1) / 4, s + m);
    return s[(m - 1) / 4];
  }
  void clear() { count = next = 0; }
};

// What one decision saw and chose (kept per key; pyscalecomm.compress.choices()).
struct AutoDecision {
  uint64_t step = 0;              // the key's calls when it was made
  int choice = 0;                 // index into autoCandidates()
  std::vector<double> predicted;  // seconds per call per candidate, agreed by the ranks
  std::vector<double> residual;   // <e, w> / |w|^2 per candidate (least-served weight), ranks' max (< 0: not measured)
  std::vector<double> period;     // seconds between the key's calls per candidate, the ranks' maximum (0: unknown)
  double linkAlpha = 0, linkBeta = 0;  // the link fit when deciding, the ranks' minimum
  std::string reason;

  // Per candidate on the key: its agreed time per call and, where known,
  // its step ("none 4.1 ms (step 25.5 ms), bf16 ...").
  std::string numbers() const;
};

// One candidate on one key, as this rank saw it.
struct AutoCandidate {
  double codecSeconds = 0;    // encode + decode (timed alone at the first call, then in place)
  TimeWindow total;           // time per call while it ran on this link (forgetCalls(): a new trial, drift)
  TimeWindow comm;            // ... of which communication
  TimeWindow period;          // seconds from one of the key's calls to the next while it ran: the step it makes
  double noneAtRead = 0;      // none's agreed time per call when a decision first read these times (0: not yet)
  double residual = -1;       // the last <e, w> / |w|^2, the least-served weight's (< 0: not measured)
  uint64_t losses = 0;        // trials it lost since the link last drifted
  uint64_t retryAt = 0;       // not chosen again before this call of the key (back-off after a lost trial)
  int lostTo = -1;            // chosen over it at its last lost trial (0: none; -1: the step guard, or no loss)
  bool hasRun = false;        // it ran a call on the key (the same calls on every rank)
  std::vector<float> replay;  // before it first runs: its error feedback replayed at the guard's sample

  void forgetCalls() {
    total.clear();
    comm.clear();
  }
};

// Per key: the current candidate and what it was chosen from.
struct AutoChoice {
  int64_t elements = 0;      // the tensor's; another size starts afresh
  int64_t factorValues = 0;  // floats PowerSGD sends per call on this key (0: no layout, not a candidate)
  uint64_t calls = 0;        // on this key since it started afresh
  int current = 0;
  int previous = -1;  // the codec the current one replaced (its periods kept: its step); -1: none, or none ran
  bool decided = false;
  uint64_t changes = 0;
  std::vector<AutoCandidate> candidates;
  double commAtDecision = 0;  // the current candidate's communication time (low, the ranks' least): the drift reference
  double commNow = 0;         // ... at the last decision
  int commMoved = 0;          // +1 / -1: it had moved 2x up / down at the last decision (drift, if again)
  uint64_t checkAt = 0;       // an extra decision at this call of the key: a trial's end, or a lead to check (0: none)
  bool onTrial = false;       // the current candidate was just switched to; checkAt judges it
  bool flushNext = false;     // the next call runs none: it sends what the codec that ran left in the residual
  int pending = -1;           // a candidate that led at the last decision; switched to if it leads again
  bool probeNext = false;     // the ranks agreed the link drifted: the next call runs none
  int noneCallsLeft = 0;      // after drift: calls that run none (its step measured) before the decision
  double lastEntry = 0;       // when the key's last call began (steady clock, seconds)
  int lastRan = -1;           // the candidate that call ran (-1: no call yet)
  bool lastWarm = true;       // that call was a warm-up, whose period is not a step (AutoSelection::run)
  // This rank's input on the key, summed over its calls with a decay of
  // 1 - 1/kAutoWindowCalls per call, at the sample's elements
  // (forEachSampleRun): the recent gradient a codec's residual is measured
  // against (compress/auto_guard.h).
  std::vector<float> window;
  AutoDecision last;
};

}  // namespace scalecomm
