// scalecomm compress: compress="auto", a codec chosen per tensor key from
// measured costs, the same on every rank.
//
// Contract: autoCandidates() is the table auto chooses from: none (the
// exact allreduce), bf16, top-k 10 %, 3 %, 1 %, and PowerSGD of rank 4 on
// keys whose tensor is known as matrices (a DDP bucket's weights, a 2-D
// tensor: the call's PowerSgdLayout; a flat tensor factored as one matrix
// mixes layers, so there it is no candidate). Per
// key (CompressState::choice) a call runs the key's current candidate with
// error feedback (the residual carries over between candidates; running
// none sends x + residual exactly and empties it). The key's first call
// times each codec's encode and decode on its first kAutoCodecSample values
// (PowerSGD: its layout's leading blocks, a matrix cut after a whole row;
// the least of kAutoCodecTimings timings), scaled to the key's size (a codec's passes are linear in the values; a
// codec's own calls update the estimate once it runs), and runs none as a
// warm-up; the next ones run none, and the call numbered kAutoFirstDecision
// (from 0) decides.
//
// What a decision sees. Every call adds its communication time to the
// group's LinkFit against the bus bytes it moved (allreduce 2(p-1)/p x
// bytes, allgather (p-1) x payload), and its time per call to its
// candidate's window. Times are taken as the lower quartile of recent
// calls, and the ranks agree on the minimum: a rank that waited for a late
// peer measured the peer, not the candidate; the rank that arrived last
// did not wait. A candidate that ran is judged by its own time; the others
// by the model (codec cost, the ranks' maximum, + the link fit at their
// bytes; PowerSGD: its two allreduces, two latencies), scaled up by the
// model's largest shortfall for a codec that ran. Each transfer of a call
// adds its own time and bus bytes to the link fit.
// The step guard: every call also records the time from the key's previous
// call to it against the candidate that previous call ran (the key's
// period: in training, the step), except after a warm-up: the key's first
// call, and a codec's first call after another candidate ran (its buffers,
// plans and first transfers at its sizes are one-off costs, not its step;
// a trial of kAutoTrialCalls calls leaves kAutoPeriodSamples periods to
// judge); a codec whose agreed period (the ranks'
// maximum, from kAutoPeriodSamples calls on) is longer than none's by more
// than kAutoStepShare (the step's noise), none's taken over as many of its
// last periods as the codec has, is left
// and backed off as a lost trial, whatever its own time per call: on a
// CPU-bound host a codec's call can be shorter while the step it is part of
// is longer (its CPU comes out of the backward it overlaps). None's
// period is the reference: kept while codecs run, refreshed by its probes.
// So is, at its trial's end, a codec whose period is longer by as much than
// that of the codec it replaced (whose periods are kept for it, taken over
// as many as the trial has): a trial is chosen by call times, and a codec
// whose calls are heavy-tailed (a sparsifier's encode competing with the
// backward) reads faster by its lower quartile than it runs. The replaced
// codec is the reference while the accuracy guard lets it run; a codec the
// step guard left is none (the reference before it stays).
// What a codec added to the step beyond its call, per second of its codec
// time (a property of the host: how much of a codec's CPU the step pays), is
// charged to every codec's prediction on every key of the group (the
// latest measured, halving every kAutoBackoff calls per key served; the
// ranks agree on it), so the others are not each tried; a codec is charged
// at most the step seconds that reading measured (StepCharge: one reading
// does not say that a codec of more codec time lengthens the step by as
// many times more; where the added step is a fixed cost it does not, and
// the step guard still leaves a codec that does); it is measured only
// from a codec whose own time is above the step's noise (kAutoStepShare of
// none's step), so a step lengthened by noise or by another key's choice is
// not read as a large charge on a small codec. A codec must also
// promise to save kAutoStepShare of none's step: a smaller saving is within
// the step's noise, where the guard could not tell it from a loss.
// The accuracy guard: a codec whose error-feedback residual holds back
// more than `residualBound` of the key's recent gradient along it (the
// guard's share, compress/auto_guard.h: the largest of the whole tensor's
// and each of its weights'; the ranks' maximum) is left out for the key's
// life once it ran (the running codec at once, at the decision that reads
// it). Each codec's residual is its own: between two codecs one call runs
// none, which sends what the first held (the trial of the second counts
// from the call after it), so no codec is judged on, or keeps back, what
// another left; only a residual the guard read under kAutoCarryShare of
// the recent gradient (bf16's rounding) is carried into the second's error
// feedback instead, moving its reading by no more than that.
// A sparsifier's trial is predicted before it runs: over the
// kAutoDecideEvery calls that end as the window fills (when it may first
// run), its codec replays its error feedback on the guard's sample of the
// key's inputs (the sampled values side by side: top-k keeps the sample's
// largest share, as it keeps the tensor's), and the guard reads that
// residual at the window's last call as it reads a running codec's: less
// than the codec would hold running. The replay holds back a gradient that
// the training (under another codec) goes on descending; a running codec
// holds back directions the training then does not descend, whose gradient
// stays and whose residual grows along it. So a replay's reading counts
// kAutoReplayFeedback times against the bound: a codec whose reading, so
// counted, is over the bound is left out without a call (on a model that a
// sparsifier harms, its trial's calls alone cost accuracy); one within is
// tried, and judged on its own residual (counted once) from then on. Only a
// sparsifier that the decision before the replay predicted faster than
// none is replayed (on a link where it cannot pay, the replay's encodes
// would be spent for nothing); one not replayed that a later decision
// chooses (the link slowed) is tried, and judged on its own residual.
// A reading within the bound does not say a codec is safe (a replay's
// reading spreads across runs of one model as widely as the bound is from
// zero): a codec that may hold back more than a candidate open now (not
// one a back-off keeps out) takes over from the current choice only where
// it saves kAutoEarlyShare of none's step against it, as an early start
// must. What a codec may hold back is its reading (a replay's counted as
// above; one under kAutoCarryShare as none's 0); unread, a sparsifier any
// share (it was not replayed: it had looked unable to pay), bf16 its
// rounding (0); PowerSGD, which has no replay, is compared once its trial
// has read it (before the window its early start asks the same eighth).
// The codec that runs is judged by the guards, except at its trial's end,
// where the codec on trial, read now, is weighed as any challenger (a
// PowerSGD trial that saves less than the eighth against a codec that
// holds back less is lost). Sparsifiers and PowerSGD wait for the key's
// kAutoWindowCalls-th call: a delayed update costs most early in training,
// and by then the window holds the recent gradient (the first calls choose
// between none and bf16). PowerSGD may start at any decision
// before it, the first included, where its prediction saves
// kAutoEarlyShare of none's step against every candidate then open (none,
// bf16): the accuracy an early start may cost is taken only for a large
// share of the step. The start is a free choice: a saving of an eighth of
// the step is past the noise that a second lead guards against. From its
// trial's end a running PowerSGD is judged as any running codec. The guard
// reads a running codec's residual from the key's kAutoGuardCalls-th call:
// against the window of fewer calls, a residual of a step or two (which
// error feedback sends within a few calls) reads as a large share of all
// the gradient there is.
// All of it travels in one small allreduce, so every rank picks from
// identical numbers: the same choice and reason.
//
// When it switches. Decisions come at the first decision above, at every
// kAutoDecideEvery-th call of the key (none inside a trial), and at a scheduled
// check kAutoTrialCalls after a switch or a lead. Every cadence counts the
// key's calls since its tensor came (a tensor of another size starts it
// over), the same on every rank. A codec must beat none by
// kAutoMargin. At a free choice (the first decision, a trial's end, after
// drift, a codec left by the step guard or the accuracy guard) the fastest
// is taken at once. A trial that lost is left, and its codec is not tried
// again for kAutoBackoff x 2^losses calls, or, where it lost to another
// codec's prediction, until that codec is left out by a guard or has run
// and measured slower than it by the margin. A trial's end is free against
// none only: a codec on trial that beats none by the margin (and by
// kAutoStepShare of none's step) is kept unless another is faster by the
// margin (the others' times are mostly predictions, which move between
// decisions). Otherwise the current choice is kept unless another is
// faster by the margin, and a challenger must lead at two decisions in a
// row. So near-equal candidates do not flap, and a wrong estimate costs a
// few calls once.
//
// Drift. While a codec runs, none's bytes are not re-measured; when the
// running codec's communication time (the ranks' least: a rank that waited
// for a late peer measured the peer) has moved 2x against its time at the
// last decision (and by kAutoStepShare of none's step: a smaller move is
// within the step's noise), and again the same way on the next window of calls
// (a decision at least TimeWindow::kSize calls later: its window holds only
// calls made after the first move; nothing is decided in between: one window may
// be a phase of the machine, and a changed link would make the steps
// measured on the old one mislead), the next call runs none and replaces
// none's time and the link's at that size; every candidate's step is forgotten (it was the old link's),
// the next kAutoPeriodSamples calls run none too (its step on the new link:
// the step guard's reference), then it forgets the back-offs and decides.
// No decision is made in between, so none's step is never unknown when a
// codec is chosen after drift. Every kAutoProbeEvery calls one call runs
// none anyway. While none runs (or another codec), a codec that ran before
// is not re-measured: its times (per call and its step) stand for it while
// none's agreed time per call is within 2x (and kAutoStepShare of none's
// step) of what it was when a decision first read them; past that they
// were taken on another link, and are forgotten: it is judged by the model
// again (a lost trial's back-off still holds).
// Thread safety: an AutoSelection serves every key of a group, from any
// thread; a key's state is used under its slot's lock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "compress/auto_choice.h"
#include "compress/auto_guard.h"
#include "compress/compressed_allreduce.h"
#include "compress/link_fit.h"

namespace scalecomm {

constexpr uint64_t kAutoFirstDecision = 3;  // calls 1-3 run none: two step periods of none before a codec runs
constexpr int kAutoPeriodSamples = 2;       // step periods a candidate needs before the step guard judges it
constexpr uint64_t kAutoDecideEvery = 16;
constexpr uint64_t kAutoTrialCalls = 4;  // a new choice, or a lead, is checked after this many calls
constexpr uint64_t kAutoBackoff = 64;    // calls before a codec that lost a trial is tried again (doubling)
constexpr uint64_t kAutoProbeEvery = 1024;
constexpr double kAutoMargin = 0.10;           // a switch must save this share of the predicted time
constexpr double kAutoStepShare = 0.02;        // ... and a codec this share of none's step (its period)
constexpr int64_t kAutoCodecSample = 1 << 18;  // a key's first call times the codecs on its first this many values
constexpr int kAutoCodecTimings = 3;           // ... this many times each, taking the least
constexpr double kAutoEarlyShare = 0.125;      // PowerSGD before the window where it saves this share of none's step
constexpr uint64_t kAutoGuardCalls = 16;       // the guard reads a running codec's residual from this call of the key
constexpr double kAutoCarryShare = 0.01;       // a codec's residual under this share of the recent gradient is carried
constexpr double kAutoReplayFeedback = 2.0;    // a replay's reading counts this many times against the guard's bound

// Candidate specs, least to most lossy; "none" first.
const std::vector<std::string>& autoCandidates();

// Whether a compression setting (a codec spec, or "auto") uses the weights'
// shapes of the tensor it compresses: a shaped codec (CodecEntry::shaped),
// or auto where one of its candidates is. The DDP hooks list a bucket's
// shapes only for these. InvalidArgument for a spec the parser refuses.
bool compressionTakesShapes(const std::string& spec);

class AutoSelection {
 public:
  // residualBound: the guard's largest <e, w> / |w|^2 (the group's
  // default 0.2: a fifth of the recent gradient held back along it); 0: no
  // guard.
  explicit AutoSelection(double residualBound);
  // Runs one compressed allreduce of x[0..n) on `state` (its choice, its
  // residual) and returns the candidate it ran; with `average`, the result
  // is divided by comms.size (none's sum in its own pass: comms.allreduce
  // with Avg). `comms.allreduceMax` must be set.
  // `layout`: the weights x holds (PowerSGD's, and the accuracy guard's
  // weights; empty: one weight, and PowerSGD no candidate), the same on
  // every rank and every call of the key.
  int run(float* x, int64_t n, bool errorFeedback, CompressState& state, const CompressComms& comms,
          const PowerSgdLayout& layout = {}, bool average = false);
  const LinkFit& link() const { return link_; }
  double residualBound() const { return bound_; }
  // "allreduce:<algorithm>:auto:<candidate>" (candidate < 0: ":auto"), as
  // profiles and stats show the call; interned on first use.
  Label title(AlgorithmRef algorithm, int candidate) const;

 private:
  void measureCodecs(const float* x, int64_t n, AutoChoice& choice, const CompressComms& comms,
                     const PowerSgdLayout& layout) const;
  // A sparsifier's trial, predicted (see the accuracy guard above).
  // finite: the call's input joined the window (an overflowed step is left
  // out of the replay too).
  void replayUntried(const float* x, int64_t n, bool finite, AutoChoice& choice, const PowerSgdLayout& layout,
                     uint64_t seed, int rank) const;
  // A decision: the ranks agree on what they measured; a move of the link
  // is held or taken as drift; otherwise each candidate's time is predicted,
  // the guards and the margins choose, and the reason is written.
  void decide(int64_t n, AutoChoice& choice, uint64_t call, const CompressComms& comms, bool freeChoice);
  struct Agreed;   // what the ranks agreed at a decision
  struct Verdict;  // what it chose
  Agreed agree(const AutoChoice& choice, const CompressComms& comms);
  static bool holdsForDrift(AutoChoice& choice, const Agreed& agreed, uint64_t call);  // true: no choice now
  static void forgetOtherLinks(AutoChoice& choice, Agreed& agreed);  // another link's times: forgotten
  // The group's step charge: step seconds per codec second, up to `most`
  // step seconds per call (the step the reading measured a codec adding).
  struct StepCharge {
    double perSecond = 0;
    double most = 0;
    double on(double codecSeconds) const { return std::min(perSecond * codecSeconds, most); }
  };
  std::vector<double> predict(const AutoChoice& choice, const Agreed& agreed, int size, StepCharge& charge);
  // PowerSGD's wait for the window lifted where it starts early.
  static void startEarly(Agreed& agreed, const std::vector<double>& est);
  static Verdict choose(AutoChoice& choice, const Agreed& agreed, const std::vector<double>& est, uint64_t call,
                        bool freeChoice);
  static std::string explain(int64_t n, const AutoChoice& choice, const Agreed& agreed, const std::vector<double>& est,
                             const StepCharge& charge, const Verdict& verdict, uint64_t call);
  double busBytes(int i, const AutoChoice& choice, int size) const;
  bool factors(int i) const;         // PowerSGD (no codec: its own two rounds)
  bool waitsForWindow(int i) const;  // a sparsifier (it keeps a share of the values) or PowerSGD
  StepCharge stepCharge() const;     // this rank's view, decayed to now
  void setStepCharge(const StepCharge& charge);

  double bound_;
  std::vector<std::unique_ptr<CompressedSite>> sites_;
  LinkFit link_;
  // The step charge, group-wide (the guard's), and when it was set, in
  // calls of any key; keys_: the keys served.
  mutable std::mutex chargeMu_;  // charge_ and chargeAt_ (decisions only)
  StepCharge charge_;
  uint64_t chargeAt_ = 0;
  std::atomic<uint64_t> calls_{0}, keys_{0};  // counted on every call, without the lock
  mutable std::mutex titlesMu_;
  mutable std::vector<std::tuple<const void*, int, Label>> titles_;
};

}  // namespace scalecomm
