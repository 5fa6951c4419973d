// scalecomm algo: alpha-beta cost model of schedules.
//
// Contract: predictSeconds() prices a schedule without running it. Steps are
// aligned across ranks (every schedule numbers them alike), so the predicted
// time is the sum over steps of the slowest rank's cost in that step:
//   cost(rank, step) = alpha                         if the rank talks at all
//                    + overhead * (messages - 1)     per extra message in the step
//                    + beta  * bytes sent by the rank in the step
//                    + gamma * bytes it reduces in the step
// The slowest rank is taken over a sample of ranks (first, second, middle,
// last, and the last of the power-of-two part), which covers the asymmetric
// ranks of every schedule here (rhd's fold ranks, a rooted collective's root).
// Segment pipelining is not modelled (a lower bound for pipelined chains is
// the bandwidth term alone). Pure; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "algo/schedule.h"

namespace scalecomm {

struct CostParams {
  double alpha = 5e-6;         // seconds per message (latency)
  double beta = 1.0 / 12.5e9;  // seconds per byte sent (1 / bandwidth)
  double overhead = 0.5e-6;    // seconds per additional message in a step
  double gamma = 0.0;          // seconds per byte reduced
};

// makeSchedule(rank) builds the schedule of one rank for a world of n ranks.
double predictSeconds(const std::function<Schedule(int)>& makeSchedule, int n, size_t elementBytes,
                      const CostParams& params);

// Allreduce of `bytes` (float32, at least one element per rank) with the named
// algorithm on n ranks.
double predictAllreduceSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params);

// The allreduce algorithm with the lowest predicted time (ties: the first in
// allreduceAlgorithms()). Deterministic: ranks with the same params agree.
std::string chooseAllreduce(int n, int64_t bytes, const CostParams& params);

}  // namespace scalecomm
