#include "select/model_fit.h"

#include <algorithm>
#include <cmath>

#include "algo/registry.h"

namespace scalecomm {

namespace {

std::vector<FitSample> usable(const std::vector<FitSample>& samples, int n, const AlgoParams& algo) {
  std::vector<FitSample> out;
  for (const FitSample& s : samples)
    if (s.seconds > 0 && findAllreduceAlgorithm(s.algorithm) != nullptr &&
        allreduceServes(s.algorithm, n, s.bytes, algo))
      out.push_back(s);
  return out;
}

double meanLogError(const std::vector<FitSample>& samples, int n, const CostParams& p, const AlgoParams& algo) {
  double sum = 0;
  for (const FitSample& s : samples) {
    const double t = predictAllreduceSeconds(s.algorithm, n, s.bytes, p, algo);
    sum += t > 0 ? std::fabs(std::log(t / s.seconds)) : 50.0;
  }
  return samples.empty() ? 0 : sum / static_cast<double>(samples.size());
}

}  // namespace

double medianRelativeError(const std::vector<FitSample>& samples, int n, const CostParams& params,
                           const AlgoParams& algo) {
  std::vector<double> e;
  for (const FitSample& s : usable(samples, n, algo))
    e.push_back(std::fabs(predictAllreduceSeconds(s.algorithm, n, s.bytes, params, algo) - s.seconds) / s.seconds);
  if (e.empty()) return 0;
  std::sort(e.begin(), e.end());
  const size_t m = e.size() / 2;
  return e.size() % 2 ? e[m] : (e[m - 1] + e[m]) / 2;
}

ModelFit fitCostParams(const std::vector<FitSample>& all, int n, const CostParams& start, const AlgoParams& algo) {
  const std::vector<FitSample> samples = usable(all, n, algo);
  ModelFit fit;
  fit.params = start;
  fit.samples = static_cast<int>(samples.size());
  fit.medianErrorBefore = medianRelativeError(samples, n, start, algo);
  if (samples.empty()) return fit;
  CostParams& p = fit.params;
  // Zero or unset terms start from a small share of their neighbours, so a
  // multiplicative search can grow them (or shrink them back towards zero).
  const double alpha0 = start.alpha > 0 ? start.alpha : 1e-6;
  const double beta0 = start.beta > 0 ? start.beta : 1e-9;
  if (p.alpha <= 0) p.alpha = alpha0;
  if (p.beta <= 0) p.beta = beta0;
  if (p.overhead <= 0) p.overhead = alpha0;
  if (p.gamma <= 0) p.gamma = beta0 / 4;
  if (p.call <= 0) p.call = alpha0 / 2;
  std::vector<double*> terms = {&p.call, &p.alpha, &p.beta, &p.overhead, &p.gamma};
  if (start.intraAlpha >= 0) {
    if (p.intraAlpha <= 0) p.intraAlpha = alpha0;
    terms.push_back(&p.intraAlpha);
  }
  if (start.intraBeta >= 0) {
    if (p.intraBeta <= 0) p.intraBeta = beta0;
    terms.push_back(&p.intraBeta);
  }
  if (start.windowAlpha >= 0) {
    if (p.windowAlpha <= 0) p.windowAlpha = alpha0;
    terms.push_back(&p.windowAlpha);
  }
  if (start.windowBeta >= 0) {
    if (p.windowBeta <= 0) p.windowBeta = beta0 / 2;
    terms.push_back(&p.windowBeta);
  }
  double best = meanLogError(samples, n, p, algo);
  for (double factor : {8.0, 2.0, 1.25, 1.05}) {
    for (int pass = 0; pass < 40; ++pass) {
      bool moved = false;
      for (double* x : terms) {
        for (double f : {factor, 1.0 / factor}) {
          const double old = *x;
          *x = old * f;
          const double e = meanLogError(samples, n, p, algo);
          if (e < best - 1e-12) {
            best = e;
            moved = true;
          } else {
            *x = old;
          }
        }
      }
      if (!moved) break;
    }
  }
  fit.medianErrorAfter = medianRelativeError(samples, n, p, algo);
  return fit;
}

std::vector<FitSample> tuningSamples(const TuningTable& table) {
  std::vector<FitSample> out;
  for (const TunerEntry& e : table.allreduce)
    for (const auto& [name, median] : e.measured) out.push_back({name, e.size > 0 ? e.size : e.bytes, median});
  return out;
}

ModelFit fitTuning(TuningTable& table) {
  const int n = table.world > 0 ? table.world : std::max<int>(1, static_cast<int>(table.layout.hostOf.size()));
  ModelFit fit = fitCostParams(tuningSamples(table), n, table.costs, table.layout);
  table.costs = fit.params;
  table.hasCosts = true;
  return fit;
}

}  // namespace scalecomm
