// scalecomm select: re-fitting the cost model's parameters to measured times.
//
// Contract: fitCostParams() returns the CostParams (algo/cost_model.h) whose
// allreduce predictions come closest to the samples, starting from `start`:
// a coordinate search in log space over every parameter the predictions of
// this world depend on (call, alpha, beta, overhead, gamma, and intraAlpha,
// intraBeta, windowAlpha, windowBeta where `start` sets them, i.e. >= 0),
// minimising the mean |log(predicted / measured)| (a median-like fit: one
// outlier moves it little). Parameters stay positive. Deterministic: the same samples give
// the same parameters on every rank and machine. Errors are reported as the
// median of |predicted - measured| / measured. Pure; any thread. Cost: about
// 2,000 evaluations of the samples' predictions (well under a second for a
// tuning cache's few dozen samples at a handful of ranks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/cost_model.h"
#include "algo/schedule.h"
#include "select/selection.h"

namespace scalecomm {

struct FitSample {
  std::string algorithm;
  int64_t bytes = 0;
  double seconds = 0;  // measured (the slowest rank's time of one call)
};

struct ModelFit {
  CostParams params;
  double medianErrorBefore = 0;  // of `start` on the samples
  double medianErrorAfter = 0;   // of `params`
  int samples = 0;               // used (positive times, algorithms that serve their size)
};

// The median |predicted - measured| / measured of `params` on the samples.
double medianRelativeError(const std::vector<FitSample>& samples, int n, const CostParams& params,
                           const AlgoParams& algo);

ModelFit fitCostParams(const std::vector<FitSample>& samples, int n, const CostParams& start,
                       const AlgoParams& algo = {});

// A tuning cache's samples: every candidate's agreed median in every
// measured bucket, at the size measured there (the bucket's bound where the
// size is unknown).
std::vector<FitSample> tuningSamples(const TuningTable& table);
// Fits the cache's model to its own samples (its world, layout and costs as
// the start) and stores the result as its costs.
ModelFit fitTuning(TuningTable& table);

}  // namespace scalecomm
