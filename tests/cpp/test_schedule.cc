// Schedule and plan math, checked by a symbolic simulation of all ranks: every
// contribution reaches every rank exactly once, blocks cover the buffer, each
// link's send sequence matches the receiver's, and nothing deadlocks.
#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "algo/barrier.h"
#include "algo/chain.h"
#include "algo/collectives.h"
#include "algo/direct.h"
#include "algo/ordered.h"
#include "algo/plan.h"
#include "algo/registry.h"
#include "algo/ring.h"
#include "algo/tree.h"
#include "core/error.h"
#include "harness.h"
#include "select/selection.h"

using namespace scalecomm;

namespace {

using Value = std::vector<int>;  // per-rank contribution counts of one cell

struct Msg {
  int step;
  int block;
  int64_t segment, count;
  Value value;
};

// Runs all ranks' plans symbolically. cells[r][block][segment] holds values.
// Returns false on deadlock.
bool simulate(const std::vector<Plan>& plans, std::vector<std::vector<std::vector<Value>>>& cells) {
  const int n = static_cast<int>(plans.size());
  std::map<std::pair<int, int>, std::deque<Msg>> wire;
  std::vector<std::vector<size_t>> sh(n, std::vector<size_t>(n, 0)), rh(n, std::vector<size_t>(n, 0));
  std::vector<size_t> lh(n, 0);
  std::vector<std::vector<bool>> done(n);
  for (int r = 0; r < n; ++r) done[r].assign(plans[r].tasks.size(), false);
  auto ready = [&](int r, const Task& t) {
    for (int d : t.deps)
      if (!done[r][d]) return false;
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      const Plan& p = plans[r];
      for (int q = 0; q < n; ++q) {
        while (sh[r][q] < p.sendQueue[q].size()) {
          int id = p.sendQueue[q][sh[r][q]];
          const Task& t = p.tasks[id];
          if (!ready(r, t)) break;
          wire[{r, q}].push_back({t.step, t.wireBlock, t.segment, t.count, cells[r][t.block][t.segment]});
          done[r][id] = true;
          ++sh[r][q];
          progress = true;
        }
        while (rh[r][q] < p.recvQueue[q].size()) {
          int id = p.recvQueue[q][rh[r][q]];
          const Task& t = p.tasks[id];
          auto& w = wire[{q, r}];
          if (!ready(r, t) || w.empty()) break;
          Msg m = w.front();
          w.pop_front();
          CHECK_EQ(m.step, t.step);  // steps travel in headers: both ends number them alike
          CHECK_EQ(m.block, t.wireBlock);
          CHECK_EQ(m.segment, t.segment);
          CHECK_EQ(m.count, t.count);
          Value& v = cells[r][t.block][t.segment];
          if (t.kind == OpKind::Recv) {
            v = m.value;
          } else {
            for (int i = 0; i < n; ++i) v[i] += m.value[i];
          }
          done[r][id] = true;
          ++rh[r][q];
          progress = true;
        }
      }
      while (lh[r] < p.localQueue.size() && ready(r, p.tasks[p.localQueue[lh[r]]])) {
        done[r][p.localQueue[lh[r]++]] = true;
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    for (bool d : done[r])
      if (!d) return false;
  for (auto& [k, q] : wire) CHECK(q.empty());
  return true;
}

std::vector<std::vector<std::vector<Value>>> initCells(const std::vector<Plan>& plans, int64_t seg,
                                                       const std::function<Value(int r, int b)>& init) {
  std::vector<std::vector<std::vector<Value>>> cells(plans.size());
  for (size_t r = 0; r < plans.size(); ++r) {
    for (size_t b = 0; b < plans[r].blockCounts.size(); ++b) {
      int64_t segs = (plans[r].blockCounts[b] + seg - 1) / seg;
      cells[r].push_back(std::vector<Value>(segs, init(static_cast<int>(r), static_cast<int>(b))));
    }
  }
  return cells;
}

Value unit(int n, int i) {
  Value v(n, 0);
  if (i >= 0) v[i] = 1;
  return v;
}

const int kWorlds[] = {1, 2, 3, 4, 5, 7, 8, 13};

std::vector<int64_t> countsFor(int n) { return {0, 1, n - 1 > 0 ? n - 1 : 1, n, n + 1, 7 * n + 3, 1000}; }

// The parameter variants worth covering per algorithm: host maps for hier
// (blocked, interleaved, one rank per host), server counts for ps.
std::vector<AlgoParams> paramsFor(const std::string& algo, int n) {
  std::vector<AlgoParams> out;
  if (algo == "hier") {
    out.push_back({});
    AlgoParams blocked, interleaved, spread;
    for (int r = 0; r < n; ++r) {
      blocked.hostOf.push_back(r / 2);
      interleaved.hostOf.push_back(r % 3);
      spread.hostOf.push_back(r);
    }
    out.insert(out.end(), {blocked, interleaved, spread});
  } else if (algo == "ps") {
    for (int s : {1, 2, n}) {
      AlgoParams p;
      p.psServers = std::min(s, n);
      out.push_back(p);
    }
  } else {
    out.push_back({});
  }
  return out;
}

}  // namespace

TEST(split_even_covers_the_buffer) {
  for (int n : kWorlds) {
    for (int64_t c : countsFor(n)) {
      auto parts = splitEven(c, n);
      int64_t sum = 0;
      for (auto p : parts) {
        sum += p;
        CHECK(p == c / n || p == c / n + 1);
      }
      CHECK_EQ(sum, c);
    }
  }
}

TEST(every_allreduce_algorithm_reduces_every_chunk_exactly_once) {
  for (const std::string& algo : allreduceAlgorithms()) {
    for (int n : kWorlds) {
      if (!allreduceServes(algo, n)) continue;
      for (int64_t count : countsFor(n)) {
        for (int64_t seg : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{1} << 40}) {
          for (bool finalize : {false, true}) {
            for (const AlgoParams& params : paramsFor(algo, n)) {
              const int64_t pace = (count + seg + n) % 3;  // 0 (unpaced), 1 or 2 segments ahead
              std::vector<Plan> plans;
              for (int r = 0; r < n; ++r) {
                plans.push_back(compilePlan(allreduceSchedule(algo, r, n, count, finalize, params), n, seg, pace));
              }
              auto cells = initCells(plans, seg, [&](int r, int) { return unit(n, r); });
              if (!simulate(plans, cells)) {
                throw sctest::Failure{strCat(algo, " deadlocks at n=", n, " count=", count, " pace=", pace)};
              }
              Value all(n, 1);
              for (int r = 0; r < n; ++r)
                for (auto& block : cells[r])
                  for (auto& v : block) {
                    if (v != all) throw sctest::Failure{strCat(algo, " n=", n, " count=", count, " rank ", r)};
                  }
            }
          }
        }
      }
    }
  }
}

TEST(auto_measures_hier_only_where_a_host_holds_several_ranks) {
  // With one host, or one rank per host, hier runs its flat form: a
  // candidate that only lengthens auto's exploration.
  auto hasHier = [](std::vector<int> hostOf) {
    AlgoParams p;
    p.hostOf = std::move(hostOf);
    const auto names = autoAllreduceCandidates(static_cast<int>(p.hostOf.size()), 1 << 20, p);
    return std::find(names.begin(), names.end(), "hier") != names.end();
  };
  CHECK(hasHier({0, 0, 1, 1}));
  CHECK(hasHier({0, 1, 2, 2}));
  CHECK(!hasHier({0, 1, 2, 3}));
  CHECK(!hasHier({0, 0, 0, 0}));
}

// The double binary tree's point: no rank is inner in both trees, so none
// moves an inner node's 3N (a single tree's inner ranks do from 5 ranks on).
TEST(double_tree_moves_at_most_twice_the_buffer_per_rank) {
  const int64_t count = 1000;
  for (int n = 1; n <= 24; ++n) {
    int64_t worstTree = 0;
    for (int r = 0; r < n; ++r) {
      auto moved = [&](const Schedule& s) {
        int64_t sent = 0, received = 0;
        for (const auto& step : s.steps) {
          for (const auto& op : step.ops) {
            if (op.kind == OpKind::Send) sent += s.blockCounts[op.block];
            if (op.kind == OpKind::Recv || op.kind == OpKind::RecvReduce) received += s.blockCounts[op.block];
          }
        }
        return std::max(sent, received);
      };
      CHECK(moved(doubleTreeAllreduce(r, n, count, false)) <= 2 * count);
      worstTree = std::max(worstTree, moved(treeAllreduce(r, n, count, false)));
    }
    if (n >= 5) CHECK_EQ(worstTree, 3 * count);
  }
}

TEST(ring_allgather_delivers_every_block_to_every_rank) {
  for (int n : kWorlds) {
    for (int64_t per : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{333}}) {
      for (int64_t seg : {int64_t{1}, int64_t{4}, int64_t{1} << 30}) {
        std::vector<Plan> plans;
        for (int r = 0; r < n; ++r) plans.push_back(compilePlan(ringAllgather(r, n, per), n, seg, (per + n) % 3));
        auto cells = initCells(plans, seg, [&](int r, int b) { return unit(n, r == b ? r : -1); });
        CHECK(simulate(plans, cells));
        for (int r = 0; r < n; ++r)
          for (int b = 0; b < n; ++b)
            for (auto& v : cells[r][b]) CHECK(v == unit(n, b));
      }
    }
  }
}

TEST(chain_broadcast_reaches_every_rank_from_any_root) {
  for (int n : kWorlds) {
    for (int root = 0; root < n; ++root) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{100}}) {
        std::vector<Plan> plans;
        for (int r = 0; r < n; ++r) plans.push_back(compilePlan(chainBroadcast(r, n, root, count), n, 7, root % 2));
        auto cells = initCells(plans, 7, [&](int r, int) { return unit(n, r == root ? root : -1); });
        CHECK(simulate(plans, cells));
        for (int r = 0; r < n; ++r)
          for (auto& v : cells[r][0]) CHECK(v == unit(n, root));
      }
    }
  }
}

TEST(tree_broadcast_and_reduce_from_any_root) {
  for (int n : kWorlds) {
    for (int root = 0; root < n; ++root) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{100}}) {
        std::vector<Plan> b, red;
        for (int r = 0; r < n; ++r) {
          b.push_back(compilePlan(treeBroadcast(r, n, root, count), n, 7, root % 2));
          red.push_back(compilePlan(treeReduce(r, n, root, count, true), n, 7, root % 2));
        }
        auto bc = initCells(b, 7, [&](int r, int) { return unit(n, r == root ? root : -1); });
        CHECK(simulate(b, bc));
        for (int r = 0; r < n; ++r)
          for (auto& v : bc[r][0]) CHECK(v == unit(n, root));
        auto rc = initCells(red, 7, [&](int r, int) { return unit(n, r); });
        CHECK(simulate(red, rc));
        for (auto& v : rc[root][0]) CHECK(v == Value(n, 1));
      }
    }
  }
}

TEST(dissemination_barrier_hears_from_everyone) {
  for (int n : kWorlds) {
    std::vector<Plan> plans;
    for (int r = 0; r < n; ++r) plans.push_back(compilePlan(disseminationBarrier(r, n), n, 1));
    // A Recv overwrites, so model knowledge with RecvReduce-like OR: run with
    // values that record who has been heard, by converting Recv to a merge.
    for (auto& p : plans)
      for (auto& t : p.tasks)
        if (t.kind == OpKind::Recv) t.kind = OpKind::RecvReduce;
    auto cells = initCells(plans, 1, [&](int r, int) { return unit(n, r); });
    CHECK(simulate(plans, cells));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) CHECK(cells[r][0][0][i] >= 1);
  }
}

TEST(plan_orders_only_true_hazards) {
  // In a 4-rank ring, the step-1 send of a segment depends on the step-0 receive of
  // the same segment, and not on other segments (so steps pipeline).
  Plan p = compilePlan(ringAllreduce(0, 4, 4 * 10, false), 4, 5);
  int checked = 0;
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const Task& t = p.tasks[i];
    if (t.kind != OpKind::Send || t.step != 1) continue;
    CHECK_EQ(t.deps.size(), size_t{1});
    const Task& d = p.tasks[t.deps[0]];
    CHECK(d.kind == OpKind::RecvReduce && d.step == 0 && d.block == t.block && d.segment == t.segment);
    ++checked;
  }
  CHECK_EQ(checked, 2);
}

TEST(pacing_holds_each_send_within_the_window_of_its_steps_receive) {
  // 2-rank ring, blocks of 40 in segments of 5 (8 each): with pacing W, the
  // reduce-scatter send of segment s >= W also waits for receive segment s - W
  // of the same step; the all-gather sends already wait for their data.
  for (int64_t w : {1, 2, 3}) {
    Plan p = compilePlan(ringAllreduce(0, 2, 2 * 40, false), 2, 5, w);
    int paced = 0;
    for (const Task& t : p.tasks) {
      if (t.kind != OpKind::Send || t.step != 0) continue;
      bool found = false;
      for (int32_t d : t.deps) {
        const Task& r = p.tasks[d];
        if (r.kind == OpKind::RecvReduce && r.step == 0) {
          CHECK_EQ(r.segment, t.segment - w);
          found = true;
        }
      }
      CHECK_EQ(found, t.segment >= w);
      paced += found;
    }
    CHECK_EQ(paced, static_cast<int>(8 - w));
  }
  // Unpaced, and in steps that are not one send plus one receive (direct
  // all-to-all), nothing is added.
  Plan unpaced = compilePlan(ringAllreduce(0, 2, 2 * 40, false), 2, 5, 0);
  for (const Task& t : unpaced.tasks)
    if (t.kind == OpKind::Send && t.step == 0) CHECK(t.deps.empty());
  Plan direct = compilePlan(directAllreduce(0, 3, 3 * 40, false), 3, 5, 1);
  for (const Task& t : direct.tasks)
    if (t.kind == OpKind::Send && t.step == 0) CHECK(t.deps.empty());
}

TEST(rooted_collectives_and_alltoall_deliver_exactly) {
  for (int n : kWorlds) {
    for (int root = 0; root < n; root += 2) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{40}}) {
        for (bool fin : {false, true}) {  // chain reduce: the root holds every contribution once
          std::vector<Plan> plans;
          for (int r = 0; r < n; ++r) plans.push_back(compilePlan(chainReduce(r, n, root, count, fin), n, 7));
          auto cells = initCells(plans, 7, [&](int r, int) { return unit(n, r); });
          CHECK(simulate(plans, cells));
          for (auto& v : cells[root][0]) CHECK(v == Value(n, 1));
        }
        std::vector<Plan> g, sc;
        for (int r = 0; r < n; ++r) {
          g.push_back(compilePlan(directGather(r, n, root, count), n, 7));
          sc.push_back(compilePlan(directScatter(r, n, root, count), n, 7));
        }
        auto gc = initCells(g, 7, [&](int r, int b) { return unit(n, r == b ? r : -1); });
        CHECK(simulate(g, gc));
        for (int b = 0; b < n; ++b)
          for (auto& v : gc[root][b]) CHECK(v == unit(n, b));
        auto scc = initCells(sc, 7, [&](int r, int b) { return unit(n, r == root ? b : -1); });
        CHECK(simulate(sc, scc));
        for (int r = 0; r < n; ++r)
          for (auto& v : scc[r][r]) CHECK(v == unit(n, r));
      }
    }
    for (int64_t per : {int64_t{0}, int64_t{1}, int64_t{33}}) {  // reduce-scatter: rank r owns block r
      std::vector<Plan> plans;
      for (int r = 0; r < n; ++r) plans.push_back(compilePlan(ringReduceScatter(r, n, per, true), n, 5, per % 2));
      auto cells = initCells(plans, 5, [&](int r, int) { return unit(n, r); });
      CHECK(simulate(plans, cells));
      for (int r = 0; r < n; ++r)
        for (auto& v : cells[r][r]) CHECK(v == Value(n, 1));
    }
    // all-to-all with uneven splits: rank s sends s + 2q + 1 elements to rank q
    std::vector<Plan> plans;
    for (int r = 0; r < n; ++r) {
      std::vector<int64_t> sendCounts(n), recvCounts(n);
      for (int q = 0; q < n; ++q) {
        sendCounts[q] = r + 2 * q + 1;
        recvCounts[q] = q + 2 * r + 1;
      }
      plans.push_back(compilePlan(directAlltoall(r, n, sendCounts, recvCounts), n, 3));
    }
    auto cells = initCells(plans, 3, [&](int r, int b) { return unit(n, b < n ? r : -1); });
    CHECK(simulate(plans, cells));
    for (int r = 0; r < n; ++r)
      for (int q = 0; q < n; ++q)
        if (q != r)
          for (auto& v : cells[r][n + q]) CHECK(v == unit(n, q));
  }
}

// The algorithm table drives naming, selection and dispatch: every entry has
// what its kind runs with for each collective it serves, names and wire ids
// are unique, and a selection takes exactly the names the table gives a
// collective.
// ordered's phases: chunk q of every rank lands in owner q's slot for that
// rank (its own stays in its chunk), so the owner can fold all n in rank
// order; the folded chunks then reach every rank. Its reduce's chain brings
// every rank's values to the root once.
TEST(ordered_phases_and_chain_bring_every_ranks_values_where_they_are_folded) {
  for (int n : kWorlds) {
    for (int64_t count : countsFor(n)) {
      const std::vector<int64_t> chunks = splitEven(count, n);
      std::vector<Plan> toOwners, fromOwners;
      for (int r = 0; r < n; ++r) {
        toOwners.push_back(compilePlan(orderedToOwners(r, n, chunks), n, 3, count % 2));
        fromOwners.push_back(compilePlan(orderedFromOwners(r, n, chunks), n, 3));
      }
      auto cells = initCells(toOwners, 3, [&](int r, int b) { return unit(n, b < n ? r : -1); });
      CHECK(simulate(toOwners, cells));
      for (int q = 0; q < n; ++q) {
        for (int p = 0; p < n; ++p) {
          for (auto& v : cells[q][p == q ? q : n + p]) CHECK(v == unit(n, p));
        }
      }
      auto back = initCells(fromOwners, 3, [&](int r, int b) { return r == b ? Value(n, 1) : unit(n, -1); });
      CHECK(simulate(fromOwners, back));
      for (int r = 0; r < n; ++r)
        for (auto& block : back[r])
          for (auto& v : block) CHECK(v == Value(n, 1));
      for (bool fin : {false, true}) {
        std::vector<Plan> chain;
        for (int r = 0; r < n; ++r) chain.push_back(compilePlan(orderedChainAllreduce(r, n, count, fin), n, 3));
        auto all = initCells(chain, 3, [&](int r, int) { return unit(n, r); });
        CHECK(simulate(chain, all));
        for (int r = 0; r < n; ++r)
          for (auto& v : all[r][0]) CHECK(v == Value(n, 1));
      }
      for (int root = 0; root < n; root += 3) {
        std::vector<Plan> gather, bcast;
        for (int r = 0; r < n; ++r) {
          gather.push_back(compilePlan(orderedGather(r, n, root, count), n, 3));
          bcast.push_back(compilePlan(orderedStarBroadcast(r, n, root, count), n, 3));
        }
        auto g = initCells(gather, 3, [&](int r, int b) { return unit(n, b == 0 ? r : -1); });
        CHECK(simulate(gather, g));
        for (int q = 0; q < n; ++q)
          for (auto& v : g[root][q == root ? 0 : 1 + q]) CHECK(v == unit(n, q));
        auto b = initCells(bcast, 3, [&](int r, int) { return r == root ? Value(n, 1) : unit(n, -1); });
        CHECK(simulate(bcast, b));
        for (int r = 0; r < n; ++r)
          for (auto& v : b[r][0]) CHECK(v == Value(n, 1));
        for (bool fin : {false, true}) {
          std::vector<Plan> chain;
          for (int r = 0; r < n; ++r) chain.push_back(compilePlan(orderedChainReduce(r, n, root, count, fin), n, 3));
          auto at = initCells(chain, 3, [&](int r, int) { return unit(n, r); });
          CHECK(simulate(chain, at));
          for (auto& v : at[root][0]) CHECK(v == Value(n, 1));
        }
      }
    }
  }
}

// ordered's relay: rank 0 receive-reduces every other rank's buffer, one
// step each in rank order (the left fold), then the result reaches every rank
// (allreduce) or the root (reduce).
TEST(ordered_relay_folds_at_rank_0_in_rank_order_and_delivers_the_fold) {
  for (int n : kWorlds) {
    for (int64_t count : countsFor(n)) {
      for (bool toAll : {true, false}) {
        for (int root = 0; root < n; root += toAll ? n : 2) {
          for (bool fin : {false, true}) {
            std::vector<Plan> relay;
            for (int r = 0; r < n; ++r) {
              const Schedule s = orderedRelay(r, n, root, count, fin, toAll);
              if (r == 0) {  // rank 0's receive-reduces name ranks 1, 2, ... in order
                std::vector<int> peers;
                for (const auto& step : s.steps)
                  for (const auto& op : step.ops)
                    if (op.kind == OpKind::RecvReduce) peers.push_back(op.peer);
                for (int k = 0; k < static_cast<int>(peers.size()); ++k) CHECK(peers[k] == k + 1);
                CHECK(static_cast<int>(peers.size()) == n - 1);
              }
              relay.push_back(compilePlan(s, n, 3));
            }
            auto cells = initCells(relay, 3, [&](int r, int) { return unit(n, r); });
            CHECK(simulate(relay, cells));
            for (int r = 0; r < n; ++r) {
              if (!toAll && r != root) continue;
              for (auto& v : cells[r][0]) CHECK(v == Value(n, 1));
            }
          }
        }
      }
    }
  }
  CHECK(!orderedRelayServes(2, 1024, {}));  // two ranks: the star, then the phases' halves
  CHECK(orderedRelayServes(3, kOrderedRelayBytes / 2, {}));
  CHECK(orderedRelayServes(3, kOrderedRelayBytes / 2, {0, 0, 0}));
  CHECK(orderedRelayServes(3, int64_t{1} << 30, {}));  // 3 ranks: rank 0 takes in 2N, as a tree's root
  CHECK(orderedRelayServes(4, kOrderedRelayBytes / 3, {}));
  CHECK(!orderedRelayServes(4, kOrderedRelayBytes / 3 + 1, {}));
  CHECK(!orderedRelayServes(3, 1024, {0, 0, 1}));  // across hosts: rank 0's link would carry (n-1) N
}

// The chain's segments: at least 4 per message down to 64 KiB, never above the group's.
TEST(ordered_chain_segments_let_the_way_back_overlap_the_way_up) {
  const int64_t KiB = 1024, MiB = 1024 * KiB;
  CHECK(orderedChainSegmentBytes(1 * MiB, 1 * MiB) == 256 * KiB);
  CHECK(orderedChainSegmentBytes(1 * MiB, 16 * MiB) == 1 * MiB);
  CHECK(orderedChainSegmentBytes(1 * MiB, 128 * KiB) == 64 * KiB);
  CHECK(orderedChainSegmentBytes(32 * KiB, 1 * MiB) == 32 * KiB);  // a smaller group segment holds
}

TEST(ordered_chains_across_hosts_only_where_each_holds_a_run_of_several_ranks) {
  CHECK(orderedChainPays({0, 0, 1, 1}));
  CHECK(orderedChainPays({0, 0, 0, 1, 1}));
  CHECK(orderedChainPays({1, 1, 0}));
  CHECK(!orderedChainPays({0, 1, 0, 1}));  // interleaved: the chain would cross hosts at every hop
  CHECK(!orderedChainPays({0, 0, 1, 0}));
  CHECK(!orderedChainPays({0, 1, 2}));  // one rank per host
  CHECK(!orderedChainPays({0, 0, 0}));  // one host
  CHECK(!orderedChainPays({}));
}

TEST(the_algorithm_table_is_complete_and_drives_selection) {
  std::set<std::string> names;
  std::set<uint32_t> ids;
  for (const Algorithm& a : algorithmRegistry()) {
    CHECK(names.insert(a.name).second);
    CHECK(a.wireId != 0 && ids.insert(a.wireId).second);
    CHECK(a.label == Label(a.name));
    CHECK(AlgorithmRef(a.name).get() == &a);
    CHECK(a.serves != 0 && a.summary[0] != '\0');
    if (a.kind == AlgorithmKind::Schedule) {
      CHECK(a.servesCollective(CollectiveKind::Allreduce) == (a.allreduce != nullptr));
      CHECK(a.servesCollective(CollectiveKind::Broadcast) == (a.broadcast != nullptr));
      CHECK(a.servesCollective(CollectiveKind::Reduce) == (a.reduce != nullptr));
    }
    CHECK((a.kind == AlgorithmKind::Native || a.kind == AlgorithmKind::Phased) == (a.run != nullptr));
    CHECK(!a.rankOrder || a.ours());
  }
  for (const char* c : {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "barrier"}) {
    CollectiveKind kind;
    CHECK(selectableCollective(c, kind));
    for (const Algorithm& a : algorithmRegistry()) {
      bool accepted = true;
      try {
        AlgorithmSelection::parse(strCat(c, ":", a.name));
      } catch (const Error& e) {
        accepted = false;
        CHECK(std::string(e.what()).find("unknown") != std::string::npos);
      }
      CHECK_EQ(accepted, a.servesCollective(kind));
    }
  }
  bool threw = false;
  try {
    AlgorithmRef("nosuch");
  } catch (const Error& e) {
    threw = std::string(e.what()).find("ring") != std::string::npos;  // the error lists the table
  }
  CHECK(threw);
  CHECK(AlgorithmRef("").empty() && &AlgorithmRef().orDefault(CollectiveKind::Broadcast) == &findRootedAlgorithm(""));
}

TEST_MAIN()
