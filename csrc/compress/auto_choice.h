// scalecomm compress: what compress="auto" keeps per tensor key
// (CompressState::choice; compress/auto_select.h decides it).
//
// Contract: plain data, copied with the key's state (a checkpoint's
// snapshot). Candidate indices are into autoCandidates().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scalecomm {

// What one decision saw and chose (kept per key; pyscalecomm.compress.choices()).
struct AutoDecision {
  uint64_t step = 0;                   // the key's calls when it was made
  int choice = 0;                      // index into autoCandidates()
  std::vector<double> predicted;       // seconds per candidate, the ranks' maximum
  std::vector<double> residual;        // |e| / |x| per candidate, the ranks' maximum (0: not run)
  double linkAlpha = 0, linkBeta = 0;  // the link fit when deciding, the ranks' maximum
  std::string reason;
};

// Per key: the current candidate and what it was chosen from.
struct AutoChoice {
  int64_t elements = 0;  // the tensor's; another size starts afresh
  uint64_t calls = 0;    // on this key since it started afresh
  int current = 0;
  bool decided = false;
  uint64_t changes = 0;
  std::vector<double> codecSeconds;     // this rank's measured encode + decode per candidate
  std::vector<double> measuredSeconds;  // this rank's time per call of each candidate that ran (EWMA; 0: never)
  std::vector<double> residual;         // this rank's last |e| / |x| per candidate (0: not run)
  double commSeconds = 0;               // the current candidate's communication per call (EWMA)
  double commAtDecision = 0;            // ... when it was last decided
  uint64_t sinceSwitch = 0;             // calls of the current candidate since it was chosen
  bool probeNext = false;               // the ranks agreed the link drifted: the next call runs none
  AutoDecision last;
};

}  // namespace scalecomm
