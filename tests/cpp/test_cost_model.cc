// The cost model reproduces the textbook alpha-beta formulas of each algorithm.
#include <cmath>

#include "algo/cost_model.h"
#include "algo/probe.h"
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

TEST(pipelined_tree_prices_fill_plus_stream) {
  CostParams c;
  c.alpha = 1e-6;
  c.beta = 1e-9;
  c.overhead = 0;
  c.segmentBytes = 4000;
  // n = 7: a full binary tree of depth 2, so 4 steps; an inner node receives
  // 2N and sends N going up, receives N and sends 2N going down. Fill: every
  // step's busiest rank moves 2 segments; then the inner node streams the rest
  // of its 3N each way.
  const double bytes = 4.0 * 1e6, seg = 4000;
  const double fill = 4 * (c.alpha + 2 * seg * c.beta);
  const double rest = (3 * bytes - 3 * seg) * c.beta;
  CHECK(near(predictAllreduceSeconds("tree", 7, static_cast<int64_t>(bytes), c), fill + rest));
  // Without pipelining the tree pays every byte at every level.
  c.segmentBytes = 0;
  CHECK(near(predictAllreduceSeconds("tree", 7, static_cast<int64_t>(bytes), c), 4 * (c.alpha + 2 * bytes * c.beta)));
}

TEST(ps_servers_and_hier_hosts_follow_their_formulas) {
  CostParams c;
  c.alpha = 1e-6;
  c.beta = 1e-9;
  c.overhead = 0;
  const int n = 8;
  const double bytes = 4.0 * 8 * 1000;
  // central server: receives and sends (n-1) N
  CHECK(
      near(predictAllreduceSeconds("ps", n, static_cast<int64_t>(bytes), c), 2 * (c.alpha + (n - 1) * bytes * c.beta)));
  AlgoParams sharded;
  sharded.psServers = n;  // equals direct
  CHECK(near(predictAllreduceSeconds("ps", n, static_cast<int64_t>(bytes), c, sharded),
             predictAllreduceSeconds("direct", n, static_cast<int64_t>(bytes), c)));
  // hier, 2 hosts of 4 with free shared memory: only the leaders' ring of 2 costs.
  AlgoParams hosts;
  for (int r = 0; r < n; ++r) hosts.hostOf.push_back(r / 4);
  c.intraAlpha = 0;
  c.intraBeta = 0;
  CHECK(near(predictAllreduceSeconds("hier", n, static_cast<int64_t>(bytes), c, hosts),
             2 * (c.alpha + bytes / 2 * c.beta)));
  CHECK_EQ(chooseAllreduce(n, static_cast<int64_t>(bytes), c, hosts, {"ring", "hier"}), std::string("hier"));
  // The 4 ranks of a host share its link: rhd's first exchange (distance 4)
  // puts all of them on it at once with N/2 each (2N per host), where hier's
  // leader sends N/2: hier is cheaper, as measured on the emulated cluster.
  CHECK(near(predictAllreduceSeconds("rhd", n, static_cast<int64_t>(bytes), c, hosts),
             2 * (c.alpha + 4 * bytes / 2 * c.beta)));
  CHECK_EQ(chooseAllreduce(n, static_cast<int64_t>(bytes), c, hosts), std::string("hier"));
}

TEST(near_ties_go_to_ring_and_latency_bound_sizes_do_not) {
  CostParams c;  // 1 Gbit/s-like link, 30 us latency
  c.alpha = 30e-6;
  c.beta = 8e-9;
  c.segmentBytes = 256 << 10;
  const int64_t big = 16 << 20, small = 4 << 10;
  // rhd is predicted (slightly) cheaper at 16 MiB on 4 ranks, within the margin
  CHECK(predictAllreduceSeconds("rhd", 4, big, c) <= predictAllreduceSeconds("ring", 4, big, c));
  CHECK(predictAllreduceSeconds("ring", 4, big, c) <= predictAllreduceSeconds("rhd", 4, big, c) * (1 + kRingMargin));
  CHECK_EQ(chooseAllreduce(4, big, c), std::string("ring"));
  // 4 KiB: latency-bound, rhd's log n steps are clearly cheaper than ring's 2(n-1)
  CHECK(predictAllreduceSeconds("ring", 8, small, c) > predictAllreduceSeconds("rhd", 8, small, c) * (1 + kRingMargin));
  CHECK(chooseAllreduce(8, small, c) != std::string("ring"));
}

TEST(shared_windows_price_their_copies_at_the_window_rate) {
  // One host of 2: links at 1 GB/s, copies on the windows at 20 GB/s. The
  // window rate, not the links', prices `shared` inside the window; above
  // it the buffer streams from memory, a copy at half a link byte; unset,
  // a copy is half a link byte everywhere.
  CostParams c;
  c.alpha = c.intraAlpha = 3e-6;
  c.beta = c.intraBeta = 1e-9;
  c.overhead = 0;
  c.windowAlpha = 1e-6;
  c.windowBeta = 1 / 20e9;
  AlgoParams algo;
  algo.hostOf = {0, 0};
  algo.windowBytes = 512 << 10;
  const int64_t small = 64 << 10, big = 2 << 20;
  CHECK(near(predictAllreduceSeconds("shared", 2, small, c, algo), 1e-6 + 3 * small * c.windowBeta));
  CHECK(near(predictAllreduceSeconds("shared", 2, big, c, algo), 5 * 1e-6 + 0.75 * big * c.intraBeta));
  CHECK_EQ(chooseAllreduce(2, small, c, algo), std::string("shared"));
  c.windowBeta = -1;
  CHECK(near(predictAllreduceSeconds("shared", 2, small, c, algo), 1e-6 + 3 * small * c.intraBeta / 2));
  CHECK_EQ(chooseAllreduce(2, small, c, algo), std::string("ring"));
}

TEST(a_disturbed_probe_cannot_price_window_copies_at_nothing) {
  // Links at 10 GB/s. Undisturbed, the copies take the call less the flag
  // round; a flag round timed slower than the whole call (a descheduled
  // rank) leaves the copies at the ceiling's rate, not at nothing.
  const double beta = 1 / 10e9, copies = 3 * (128 << 10);
  CHECK(near(windowCopySeconds(14e-6, 2e-6, copies, beta), 12e-6 / copies));
  CHECK(near(windowCopySeconds(9e-6, 11e-6, copies, beta), beta / kWindowCopyCeiling));
  CHECK(near(windowCopySeconds(2.1e-6, 2e-6, copies, beta), beta / kWindowCopyCeiling));
}

TEST(scales_to_65536_ranks) {
  CostParams c;
  c.segmentBytes = 256 << 10;
  for (const char* a : {"ring", "rhd", "tree", "direct", "ps"})
    CHECK(predictAllreduceSeconds(a, 65536, 256 << 20, c) > 0);
}

TEST_MAIN()
