// scalecomm select: auto's online choice of allreduce algorithm, measured on
// the caller's own calls.
//
// Contract:
// - Messages fall into buckets by size: bucket b holds (2^(b-1), 2^b] bytes
//   (bucket 0: 0 and 1 byte). A bucket starts Fresh; its first pick asks the
//   ranker (the cost model) for the algorithms that serve it, the model's
//   choice (the favourite) first, with their predicted times, and keeps in
//   that order its first kMinCandidates and any others within `spread` of
//   the fastest prediction (at most `maxCandidates`): a model that is far
//   off (a probe on a loaded machine) cannot leave its own choice alone.
//   One algorithm serves: decided at once ("model").
// - Exploring: the bucket's trials cycle through the candidates in `rounds`
//   rounds (trial i of the exploration runs candidate (i + i / C) mod C),
//   every one measured: a candidate's first, colder trial is one of its
//   rounds, which the rules below are robust to, and a block warms up within
//   itself. A trial is a block of
//   L = blockLength(bucket) consecutive calls of its candidate; its time is
//   the median of the block's last ceil(L / 2) calls, so a candidate is
//   timed as it runs back to back, as the winner will, not just after
//   another algorithm's call. L is a function of the bucket alone, the same
//   on every rank: `blockBytes` / the bucket's bytes, at most kMaxBlock, and
//   at least 2 (one warm-up call) for buckets up to kWarmUpBlocks x
//   `blockBytes`; above that, where the first call's difference is small
//   against a call, 1. With three candidates or more,
//   after kScreenRounds measured rounds the ranks agree on those times (the
//   maximum over ranks, as below) and every candidate but the favourite whose
//   fastest round took over kScreenFactor x the slowest round of the best
//   one leaves; the rest keep their rounds. This bounds
//   what a far slower candidate costs. After kRaceRounds measured rounds
//   (two candidates or more) the ranks agree again, and every candidate but
//   the favourite and the leader (the lowest median) that was over
//   kRaceMargin x slower than the leader in every one of those rounds
//   leaves (the chance of that for a candidate as fast as the leader is
//   below 1/16); the rest keep their rounds. After the last trial record()
//   returns this rank's C x rounds times, then its C mean trial calls and C
//   mean warm ones (see Paced); the caller makes them the maximum over ranks
//   (an allreduce) and hands them to agreed(), which decides. The screening
//   and the race agree the same way.
// - The decision (docs/algorithms.md, "Online selection"): per round the
//   ratio of each candidate's time to the model's favourite's; a candidate
//   beats the favourite when the upper end of the ~90% confidence interval
//   of its median ratio (order statistics) is below 1, or when its own
//   median's interval lies below the favourite's. The winner is the
//   fastest by median among the favourite and those that beat it: an
//   advantage inside the noise leaves the model's choice. Where another
//   candidate's median is over kExtendMargin below the winner's but not
//   beyond the noise, the two run alone for 2 x `rounds` more rounds (once
//   per exploration) and the same rule decides on those.
// - Exploiting: the winner runs. Every `checkEvery` calls (64, doubling to
//   4096 while stable) record() returns this rank's median of its last 16
//   times; agreed() compares the maximum over ranks with the winner's
//   slowest measured round (a cached winner: the upper end of its band),
//   widened by kDriftFactor. Above it (slower only) in 2 checks in a row,
//   each over calls made after the last (firstCheck of them, at least 16),
//   the bucket is explored again: one slow window is a hiccup, not a
//   drift. Each drift whose exploration kept the winner doubles the checks
//   in a row the next one needs (up to 32; a changed winner resets it to
//   2): on a machine whose speed swings, re-measuring finds the same winner
//   and only costs trials.
//   The bucket is explored again anyway after `reexploreAfter` calls
//   (doubling each time). Either way it starts again from the model's
//   candidates, not from those the last exploration's eliminations left.
// - Paced (explorePercent < 100): before each round of an exploration the
//   bucket runs the leader alone for as many calls as keep the exploration,
//   that round included, within the budget: with n_q trial calls of
//   candidate q so far (the next round's L included, and those of candidates
//   that left), X = sum n_q x (m_q - t_lead) is what they cost beyond
//   as many calls of the leader and T = sum n_q x m_q their time; the
//   exploration's pauses add up to at least (X x 100 / percent - T) / t_lead
//   calls, so that X is at most percent of the time of its trials and pauses
//   together, at every round (an underestimate early on is repaid at the
//   next pause). m_q is q's mean trial call in this exploration (warm-up
//   calls included: what its calls cost); the leader is the candidate with
//   the lowest median, t_lead its mean warm call (the blocks' second halves:
//   as its calls run back to back, with the same outliers a pause meets).
//   All are the maximum over ranks, agreed with the rounds' times;
//   before the first agreement the model's predictions serve for all, and
//   the last winner (else the favourite) leads. The pauses are neither trials
//   nor measured. A short run keeps the leader and explores as far as its
//   budget goes; a long one finishes. setExplorePercent() changes the share
//   from the next pick on: a pause under way is priced again under the new
//   share (raised to 100, it ends, and the rest of the exploration runs back
//   to back).
// - Deterministic: the state changes only in pick(), record(), agreed() and
//   setExplorePercent(), from the sequence of message sizes, agreed values
//   and shares, so ranks that make the same calls, agree the same values and
//   set the same shares after the same calls pick the same algorithm
//   at every call. A candidate that cannot serve a message of its bucket
//   (a size limit) leaves the bucket and its exploration starts over; a
//   winner that cannot serve one runs the model's choice for it, unmeasured.
// - decided()/load(): the Exploiting buckets as entries (the tuning cache's
//   lines); a loaded entry starts Exploiting, with its band when it has one.
// Thread safety: pick/record/agreed/load/setExplorePercent from one thread
// at a time (the group's executing thread); report(), decided() and
// explorePercent() from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/label.h"

namespace scalecomm {

struct TunerSettings {
  int rounds = 8;           // measured rounds per exploration
  double spread = 10.0;     // candidates predicted within this factor of the model's best
  int maxCandidates = 8;    // at most this many
  int64_t firstCheck = 64;  // calls between drift checks, doubling to maxCheck
  int64_t maxCheck = 4096;
  int64_t reexploreAfter = 4096;  // calls before the next exploration, doubling
  int64_t blockBytes = 0;         // a trial's calls make up this many bytes (0: one call per trial)
  int explorePercent = 100;       // explorations add at most this share of a bucket's time (100: unpaced)
};

constexpr int kMaxBlock = 16;           // calls per trial at most
constexpr int kWarmUpBlocks = 4;        // trials of buckets up to this many blocks' bytes start with a warm-up call
constexpr int kMinCandidates = 3;       // measured whatever the model predicts for them
constexpr double kDriftFactor = 1.3;    // the slowest round's widening before a window counts as slow
constexpr int kMaxIdleDrifts = 4;       // a drift takes 2 << idle drifts checks in a row: at most 32
constexpr int kScreenRounds = 2;        // measured rounds before the screening
constexpr double kScreenFactor = 1.5;   // screened out: slower than this in every screening round
constexpr int kRaceRounds = 4;          // measured rounds before the race
constexpr double kRaceMargin = 1.05;    // raced out: slower than the leader by this in every race round
constexpr double kExtendMargin = 0.05;  // an inconclusive lead this large is measured again

// One measured winner (a line of the tuning cache). Times are the maximum
// over ranks of one call, in seconds; 0 where unknown.
struct TunerEntry {
  int64_t bytes = 0;  // the bucket's upper bound
  int64_t size = 0;   // the message size its times were measured at (0: unknown)
  std::string algorithm;
  double median = 0, lo = 0, hi = 0;
  std::vector<std::pair<std::string, double>> measured;  // every candidate's median (report)
};

class OnlineTuner {
 public:
  // The algorithms that serve a message of `bytes` with predicted seconds,
  // the model's choice first.
  using Ranker = std::function<std::vector<std::pair<std::string, double>>(int64_t bytes)>;
  using Serves = std::function<bool(const std::string& algorithm, int64_t bytes)>;

  OnlineTuner(Ranker ranker, Serves serves, TunerSettings settings = {});

  static int bucketOf(int64_t bytes);
  static int64_t bucketBytes(int bucket) { return bucket <= 0 ? 1 : int64_t{1} << bucket; }
  // Calls per trial in `bucket` (see the contract).
  int blockLength(int bucket) const;

  struct Pick {
    Label algorithm;
    int bucket = -1;
    int candidate = -1;     // >= 0: an exploration trial of this candidate
    bool measured = false;  // record() wants the call's time (every trial call and exploited call)
    bool fresh = false;     // this pick started its bucket (see describe())
  };
  Pick pick(int64_t bytes);
  // The model's choice for `bytes`, without measuring (calls the tuner
  // cannot time, such as device calls). Cached per size.
  Label modelPick(int64_t bytes);
  // The call's time on this rank. Returns the values every rank must reduce
  // to their maximum and pass to agreed() before the next pick; or nothing.
  std::vector<double> record(const Pick& pick, double seconds);
  // Returns a one-line account of what changed ("" when nothing did).
  // `seconds`: what the agreement took on this rank (reported, not decided on).
  std::string agreed(const Pick& pick, const std::vector<double>& maxed, double seconds = 0);

  // The share explorations may add from the next pick on (1..100; see
  // Paced). Deterministic when every rank sets it at the same point of its
  // sequence of picks.
  void setExplorePercent(int percent);
  int explorePercent() const;

  // A bucket's candidates as chosen from the model, for the log.
  std::string describe(int bucket) const;
  std::vector<TunerEntry> decided() const;
  void load(const std::vector<TunerEntry>& entries);

  struct Candidate {
    std::string algorithm;
    double predicted = 0;     // seconds
    double median = 0;        // agreed, last exploration; 0 before
    double ratioHigh = 0;     // upper end of its ratio to the favourite's interval
    int64_t trials = 0;       // calls run as trials, all explorations
    double trialSeconds = 0;  // their time on this rank
  };
  struct BucketReport {
    int64_t bytes = 0;      // upper bound of the bucket
    std::string phase;      // exploring | exploiting
    std::string source;     // explored | cache | model
    std::string algorithm;  // the winner ("" while exploring the first time)
    double median = 0, lo = 0, hi = 0;
    int64_t calls = 0, explorations = 0, driftChecks = 0, drifts = 0;
    int64_t trials = 0;           // calls run as trials, all explorations
    double trialSeconds = 0;      // their time on this rank
    double agreementSeconds = 0;  // this rank's time in the agreements (screens, decisions, drift checks)
    int64_t paced = 0;            // calls of the leader between an exploration's rounds (the budget's pauses)
    std::string leader;           // what those run now ("" when not exploring)
    std::vector<Candidate> candidates;
  };
  std::vector<BucketReport> report() const;

 private:
  enum class Phase : uint8_t { Fresh, Exploring, Exploiting };
  enum class Pending : uint8_t { None, Decide, Screen, Race, Check };
  struct Bucket {
    Phase phase = Phase::Fresh;
    Pending pending = Pending::None;
    int64_t size = 0;          // the message size that started it
    std::string favourite;     // the model's choice
    std::vector<Label> cands;  // model order, favourite first
    std::vector<Candidate> info;
    int64_t step = 0;                            // this exploration's calls so far (trial i: calls i*block..)
    int block = 1;                               // calls per trial (blockLength of the bucket; set when it starts)
    std::array<double, kMaxBlock> blockTimes{};  // the current trial's timed calls
    int blockTimed = 0;
    int screens = 0;        // eliminations run in this exploration: 1 after the screening, 2 after the race
    bool extended = false;  // this exploration's inconclusive pair is being re-measured
    int rounds = 0;         // measured rounds of this exploration
    std::vector<std::pair<std::string, double>> evidence;  // medians of those that left this exploration
    std::vector<double> local;                             // [round][candidate], measured rounds
    // Per candidate (aligned with cands): this exploration's trial calls and
    // their seconds on this rank, those of the blocks' second halves (warm),
    // and the mean call of each as last agreed (or predicted).
    struct Spend {
      int64_t calls = 0, warmCalls = 0;
      double seconds = 0, warmSeconds = 0;
      double mean = 0, warm = 0;
    };
    std::vector<Spend> spend;
    std::vector<Spend> gone;  // spent by candidates no longer measured in this exploration
    Label winnerLabel;        // the last decision's; empty before the first
    std::string source;
    double median = 0, lo = 0, hi = 0;
    double slowest = 0;  // the winner's slowest measured round (a cached winner: the end of its band)
    std::array<double, 16> recent{};
    int64_t recentCount = 0;
    int64_t sinceCheck = 0, checkEvery = 0, sinceExplore = 0, exploreAfter = 0;
    Label leader;              // runs the pauses between rounds
    double leaderSeconds = 0;  // one call of the leader (t_lead: its agreed mean warm call, or its prediction)
    int64_t pauseLeft = 0;     // calls of the leader before the next round
    int64_t pauseGiven = 0;    // the last pause's length
    int64_t pausedAt = -1;     // the step whose round has had its pause
    int64_t pausedThis = 0;    // pauses' calls in this exploration
    int64_t paced = 0;         // all explorations
    int slowChecks = 0;        // drift checks outside the band in a row
    int idleDrifts = 0;        // drift explorations in a row that kept the winner
    bool afterDrift = false;   // this exploration was started by a drift
    int64_t calls = 0, explorations = 0, driftChecks = 0, drifts = 0;
    int64_t trials = 0;
    double trialSeconds = 0, agreementSeconds = 0;
  };
  // The model's candidates for `bytes` (favourite first) into cands and info.
  void rankCandidates(Bucket& k, int64_t bytes);
  void start(Bucket& k, int64_t bytes);
  // `continuing`: the same exploration (extended, or restarted without a
  // candidate): what it has spent stays charged to its budget, and the
  // candidates' agreed mean calls stand.
  void explore(Bucket& k, bool continuing = false);
  // A drift or the periodic re-measurement: explore the model's candidates again.
  void reexplore(Bucket& k, int bucket);
  void exploit(Bucket& k, Label winner);
  // Keeps candidates `keep` (indices, in that order) in cands, info and
  // spend; the others' spend goes to gone.
  static void keepOnly(Bucket& k, const std::vector<int>& keep);
  // Keeps candidates `keep` with their first `measured` rounds: the
  // exploration goes on as if only they had run.
  static void keepMeasured(Bucket& k, const std::vector<int>& keep, int measured);
  // The pace from the candidates' medians (index-aligned with cands; 0:
  // unknown) and their spend's means: candidate `lead` leads (-1: the lowest
  // median).
  static void pace(Bucket& k, const std::vector<double>& median, int lead);
  // Sets each candidate's agreed mean and warm mean call from the tail of
  // `maxed` (after `times` round times).
  static void agreeMeans(Bucket& k, const std::vector<double>& maxed, int times);
  // Calls of the leader before the round at k.step (see the contract).
  int64_t pauseCalls(const Bucket& k) const;
  // The first `times` of k.local, then each candidate's mean trial call of
  // this exploration, then its mean warm one: what the ranks agree on.
  static std::vector<double> withMeans(const Bucket& k, int times);
  std::string decide(Bucket& k, int bucket, const std::vector<double>& maxed);
  std::string screen(Bucket& k, int bucket, const std::vector<double>& maxed);
  std::string race(Bucket& k, int bucket, const std::vector<double>& maxed);
  Label modelPickLocked(int64_t bytes);

  Ranker ranker_;
  Serves serves_;
  TunerSettings settings_;
  mutable std::mutex mu_;  // guards buckets_ against report()/decided()
  std::array<Bucket, 64> buckets_;
  std::unordered_map<int64_t, Label> modelPicks_;  // bounded
};

// Order statistics: the indices (0-based, into sorted samples) of a
// two-sided confidence interval for the median of n samples with coverage
// at least `coverage`, as wide as needed (the full range when n is small).
std::pair<int, int> medianInterval(int n, double coverage = 0.9);

}  // namespace scalecomm
