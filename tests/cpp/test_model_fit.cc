// Re-fitting the cost model (select/model_fit.h): it recovers parameters from
// times the model itself produced, lowers the error on measured-like times,
// and round-trips through the tuning cache.
#include <cmath>

#include "harness.h"
#include "select/model_fit.h"

using namespace scalecomm;

namespace {

AlgoParams oneHost(int n, int64_t window) {
  AlgoParams a;
  a.hostOf.assign(n, 0);
  a.windowBytes = window;
  return a;
}

std::vector<FitSample> samplesOf(const CostParams& truth, int n, const AlgoParams& algo) {
  std::vector<FitSample> out;
  for (const char* a : {"ring", "rhd", "tree", "dbtree", "direct", "shared"})
    for (int64_t bytes = 8; bytes <= (int64_t{64} << 20); bytes *= 8)
      out.push_back({a, bytes, predictAllreduceSeconds(a, n, bytes, truth, algo)});
  return out;
}

}  // namespace

TEST(the_fit_recovers_the_parameters_that_made_the_times) {
  const int n = 3;
  const AlgoParams algo = oneHost(n, 262144);
  CostParams truth;
  truth.alpha = 8e-6;
  truth.beta = 1 / 2e9;
  truth.overhead = 3e-6;
  truth.gamma = 1 / 8e9;
  truth.intraAlpha = 8e-6;
  truth.intraBeta = 1 / 2e9;
  truth.windowAlpha = 6e-6;
  truth.windowBeta = 1 / 7e9;  // not half a link byte: the probe's windows run at their own rate
  truth.call = 15e-6;
  CostParams probe = truth;  // what a short probe would say: too little latency, too much bandwidth cost
  probe.alpha = probe.intraAlpha = 2e-6;
  probe.beta = probe.intraBeta = 1 / 1e9;
  probe.windowBeta = 1 / 2e9;
  probe.gamma = 0;
  probe.call = 0;
  const auto samples = samplesOf(truth, n, algo);
  const ModelFit fit = fitCostParams(samples, n, probe, algo);
  CHECK_EQ(fit.samples, static_cast<int>(samples.size()));
  CHECK(fit.medianErrorBefore > 0.3);
  CHECK(fit.medianErrorAfter < 0.03);
  CHECK(fit.medianErrorAfter <= medianRelativeError(samples, n, fit.params, algo) + 1e-12);
  // Every algorithm's own times, not just the median over all of them.
  for (const char* a : {"ring", "rhd", "direct", "shared"}) {
    std::vector<FitSample> own;
    for (const FitSample& x : samples)
      if (x.algorithm == a) own.push_back(x);
    CHECK(medianRelativeError(own, n, fit.params, algo) < 0.05);
  }
}

TEST(a_fitted_cache_round_trips_its_model_layout_and_sizes) {
  const int n = 2;
  TuningTable t;
  t.world = n;
  t.hasCosts = true;
  t.costs.alpha = t.costs.intraAlpha = 2e-6;
  t.costs.beta = t.costs.intraBeta = 1e-9;
  t.hasLayout = true;
  t.layout = oneHost(n, 262144);
  TunerEntry e;
  e.bytes = 1 << 20;
  e.size = 1000000;
  e.algorithm = "ring";
  e.median = e.lo = e.hi = 400e-6;
  e.measured = {{"ring", 400e-6}, {"rhd", 450e-6}, {"shared", 500e-6}};
  t.allreduce.push_back(e);
  const ModelFit fit = fitTuning(t);
  CHECK(fit.medianErrorAfter < fit.medianErrorBefore);
  const TuningTable back = TuningTable::parse(t.str(), "test");
  CHECK(back.hasCosts && back.hasLayout);
  CHECK_EQ(back.layout.windowBytes, int64_t{262144});
  CHECK(back.layout.hostOf == t.layout.hostOf);
  CHECK_EQ(back.allreduce[0].size, int64_t{1000000});
  for (const auto& [name, member] : kModelFields)
    CHECK(std::fabs(back.costs.*member - t.costs.*member) <= 1e-9 * std::fabs(t.costs.*member) + 1e-18);
  // The samples are taken at the size measured, not the bucket's bound.
  CHECK_EQ(tuningSamples(back)[0].bytes, int64_t{1000000});
}

TEST_MAIN()
