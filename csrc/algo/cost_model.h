// scalecomm algo: alpha-beta cost model of schedules.
//
// Contract: predictSeconds() prices a schedule without running it. Steps are
// aligned across ranks (every schedule numbers them alike). For one rank and
// step, with s and r the bytes it sends and receives (each direction of a
// full-duplex link is serialised) and q the bytes it reduces:
//   fill(rank, step) = alpha                        if the rank talks at all
//                    + overhead * (messages - 1)    per extra peer in the step
//                    + beta * max(min(s, seg), min(r, seg)) + gamma * min(q, seg)
//   rest(rank)       = the larger of its send and receive totals (+ gamma q)
//                      beyond what the fill already counted
//   T = sum over steps of the slowest rank's fill + the largest rest.
// That is: the first segment crosses every step one after another (latency
// and pipeline fill), and then the busiest rank streams the remainder of its
// bytes (bandwidth). With seg = infinity (segmentBytes 0) this is the classic
// bulk-synchronous sum of step costs; ring and rhd price the same either way,
// pipelined trees and chains price as they run. Links between ranks on the
// same host use intraAlpha / intraBeta when they are set (>= 0) and the
// AlgoParams give a host map. The slowest rank is taken over a sample of
// ranks (first, second, middle, last, the rhd fold boundary, the first rank
// of the second host, the first two ranks of every tree level) that covers
// the asymmetric ranks of every schedule here (fold ranks, roots, servers,
// leaders, tree levels). Pure; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "algo/schedule.h"

namespace scalecomm {

struct CostParams {
  double alpha = 5e-6;         // seconds per message (latency)
  double beta = 1.0 / 12.5e9;  // seconds per byte sent (1 / bandwidth)
  double overhead = 0.5e-6;    // seconds per additional message in a step
  double gamma = 0.0;          // seconds per byte reduced
  double intraAlpha = -1;      // same-host links; < 0: as alpha
  double intraBeta = -1;       // same-host links; < 0: as beta
  int64_t segmentBytes = 0;    // pipelining unit; 0: none (bulk-synchronous)
  double windowAlpha = -1;     // one flag round on the shared windows (algo/shared.h); < 0: as intraAlpha
  double windowBeta = -1;      // seconds per byte copied on the shared windows; < 0: half of intraBeta (or beta)
  double call = 0;             // seconds every allreduce pays once, whatever its schedule (dispatch, plan lookup)
};

// CostParams' time terms by name: the tuning cache's "model" line and the
// Python API's dicts (segmentBytes comes from the group's configuration).
inline constexpr std::pair<const char*, double CostParams::*> kModelFields[] = {
    {"alpha", &CostParams::alpha},
    {"beta", &CostParams::beta},
    {"overhead", &CostParams::overhead},
    {"gamma", &CostParams::gamma},
    {"intra_alpha", &CostParams::intraAlpha},
    {"intra_beta", &CostParams::intraBeta},
    {"window_alpha", &CostParams::windowAlpha},
    {"window_beta", &CostParams::windowBeta},
    {"call", &CostParams::call},
};
// The field named `name` in kModelFields, or nullptr.
inline double* modelField(CostParams& c, const std::string& name) {
  for (const auto& [n, member] : kModelFields)
    if (name == n) return &(c.*member);
  return nullptr;
}

// makeSchedule(rank) builds the schedule of one rank for a world of n ranks.
double predictSeconds(const std::function<Schedule(int)>& makeSchedule, int n, size_t elementBytes,
                      const CostParams& params, const AlgoParams& algo = {});

// Allreduce of `bytes` (float32, at least one element per rank) with the named
// algorithm on n ranks, plus params.call.
double predictAllreduceSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params,
                               const AlgoParams& algo = {});

// Broadcast (reduce prices alike) of `bytes` from rank 0: "chain" or "tree".
double predictRootedSeconds(const std::string& algorithm, int n, int64_t bytes, const CostParams& params);

// The algorithm with the lowest predicted time among `candidates` (ties: the
// first), except that ring wins when it is predicted within kRingMargin of
// the best. Deterministic: ranks with the same inputs agree.
constexpr double kRingMargin = 0.05;
std::string chooseAllreduce(int n, int64_t bytes, const CostParams& params, const AlgoParams& algo = {},
                            const std::vector<std::string>& candidates = {});
std::string chooseRooted(int n, int64_t bytes, const CostParams& params);

}  // namespace scalecomm
