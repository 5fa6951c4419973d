// The cost model reproduces the textbook alpha-beta formulas of each algorithm.
#include <cmath>

#include "algo/cost_model.h"
#include "harness.h"

using namespace scalecomm;

static bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

TEST(ring_rhd_direct_match_closed_forms) {
  CostParams c;
  c.alpha = 2e-6;
  c.beta = 1e-9;
  c.overhead = 1e-7;
  for (int n : {2, 4, 8, 64, 1024}) {
    const double bytes = 4.0 * n * 1000;  // divisible into n float32 chunks
    const double ring = predictAllreduceSeconds("ring", n, static_cast<int64_t>(bytes), c);
    CHECK(near(ring, 2.0 * (n - 1) * (c.alpha + bytes / n * c.beta)));
    const double rhd = predictAllreduceSeconds("rhd", n, static_cast<int64_t>(bytes), c);
    CHECK(near(rhd, 2.0 * std::log2(n) * c.alpha + 2.0 * (n - 1) / n * bytes * c.beta));
    const double direct = predictAllreduceSeconds("direct", n, static_cast<int64_t>(bytes), c);
    CHECK(near(direct, 2.0 * (c.alpha + (n - 2) * c.overhead + (n - 1) * bytes / n * c.beta)));
  }
}

TEST(rhd_fold_costs_extra_steps_for_non_powers_of_two) {
  CostParams c;
  c.alpha = 1e-6;
  c.beta = 0;
  c.overhead = 0;
  // n = 6: p = 4, fold + 2 + 2 + unfold = 6 steps of alpha
  CHECK(near(predictAllreduceSeconds("rhd", 6, 4 * 6000, c), 6e-6));
}

TEST(scales_to_65536_ranks) {
  CostParams c;
  for (const char* a : {"ring", "rhd", "direct"}) CHECK(predictAllreduceSeconds(a, 65536, 256 << 20, c) > 0);
}

TEST_MAIN()
