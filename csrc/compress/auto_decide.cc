// compress="auto"'s decision (compress/auto_select.h: what a decision sees,
// when it switches, drift): the ranks agree on what they measured, a move of
// the link is held or taken as drift, each candidate's time is predicted,
// the guards and the margins choose, and the reason is written.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "compress/auto_select.h"
#include "core/deadline.h"

namespace scalecomm {

namespace {

// +1 / -1: a time moved 2x or more up / down from `was` (and by
// kAutoStepShare of the step: less is the step's noise); 0: neither, or
// either time unknown.
int linkMove(double was, double now, double step) {
  if (!(was > 0) || !(now > 0) || std::fabs(now - was) < kAutoStepShare * step) return 0;
  return now > 2 * was ? 1 : 2 * now < was ? -1 : 0;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", seconds * 1e3);
  return buf;
}

}  // namespace

std::string AutoDecision::numbers() const {
  std::string out;
  for (size_t i = 0; i < predicted.size() && i < autoCandidates().size(); ++i) {
    if (!std::isfinite(predicted[i])) continue;  // not a candidate on this key
    out += (out.empty() ? "" : ", ") + autoCandidates()[i] + " " + ms(predicted[i]);
    if (i < period.size() && period[i] > 0) out += " (step " + ms(period[i]) + ")";
  }
  return out;
}

// What a decision reads, identical on every rank once agreed (one MAX
// allreduce; a minimum travels negated), and the rules every step of the
// decision applies to it.
struct AutoSelection::Agreed {
  std::vector<double> measured;  // time per call while it ran, the ranks' least (0: it did not run)
  std::vector<double> codec;     // codec seconds per call, the ranks' most
  std::vector<double> residual;  // the guard's reading, the ranks' most (< 0: not measured)
  std::vector<double> period;    // seconds between the key's calls while it ran, the ranks' most (0: unknown)
  std::vector<double> noneStep;  // none's period over as many of its last as candidate i has (0 for none)
  int running = 0;               // the candidate the key's calls run
  int previous = -1;             // at a trial's end: the codec the one on trial replaced (-1: none)
  double before = 0;             // ... its period over as many of its last as the trial has, the ranks' most
  double comm = 0;               // the running codec's communication time, the ranks' least (0: none runs)
  double alpha = 0, beta = 0;    // the link fit, the ranks' least
  StepCharge charge;             // the group's step charge, the ranks' most (each number)
  double bound = 0;              // the accuracy guard's (0: no guard)
  std::vector<char> applies;     // a candidate on this key (PowerSGD: only with a layout)
  std::vector<char> waits;       // it waits for the window, which is not yet full
  std::vector<char> early;       // ... unless it saves enough of the step (PowerSGD)
  std::vector<char> replayed;    // its residual is its replay's (it has not run): it counts kAutoReplayFeedback x
  std::vector<double> unread;    // what it may hold back before the guard has read it (held())
  std::string forgotten;         // times forgotten as another link's (forgetOtherLinks), in words

  // The share of the key's recent gradient candidate i holds back, as the
  // guard counts it (a replay's kAutoReplayFeedback times); under
  // kAutoCarryShare (bf16's rounding) 0, as none's; < 0: not measured.
  double reading(int i) const {
    if (i == 0) return 0;
    if (!(residual[i] >= 0)) return -1;
    const double r = (replayed[i] ? kAutoReplayFeedback : 1.0) * residual[i];
    return r < kAutoCarryShare ? 0 : r;
  }
  bool within(int i) const { return i == 0 || bound <= 0 || reading(i) <= bound; }
  // What candidate i may hold back, to weigh it against another: its
  // reading; unread, a sparsifier any share (the guard would have replayed
  // it had it looked able to pay), PowerSGD unknown (< 0: it has no replay;
  // its trial is its reading), bf16 its rounding (0).
  double held(int i) const {
    const double r = reading(i);
    return r >= 0 ? r : unread[i];
  }
  // A codec is kept only while the key's calls come about as often with it
  // as with none (and, at its trial's end, as with the codec it replaced:
  // lengthened()): its call may be shorter while the step is longer (its CPU
  // taken from the backward that overlaps it, on a CPU-bound host). Steps
  // within kAutoStepShare of none's are within the step's noise: there the
  // call's time decides.
  bool slower(int i) const { return lengthened(i) >= 0; }
  // Whose step candidate i lengthened: none's, or at a trial's end that of
  // the codec the trial replaced (its call time chose the trial; its step
  // is the reference while the accuracy guard lets it run); -1: neither.
  int lengthened(int i) const {
    if (i == 0 || !(period[i] > 0)) return -1;
    if (noneStep[i] > 0 && period[i] > (1 + kAutoStepShare) * noneStep[i]) return 0;
    if (i == running && before > 0 && within(previous) && period[i] > (1 + kAutoStepShare) * before) return previous;
    return -1;
  }
  double stepOf(int j, int i) const { return j == 0 ? noneStep[i] : before; }  // the step lengthened()'s answer names
  // Neither guard nor the window keeps it out (a back-off may still).
  bool open(int i) const { return applies[i] && within(i) && !waits[i] && !slower(i); }
};

// What a decision chose, and why in words.
struct AutoSelection::Verdict {
  int best = 0;
  bool vetoed = false;   // the current codec made the step longer (the step guard)
  bool flushes = false;  // from one codec to another: one call of none first sends the first's residual
  std::string why;       // what kept the fastest from being chosen, or the current codec from being kept
  std::string released;  // back-offs cleared, with their cause
  std::string riskier;   // the fastest kept out for holding back more than a codec it saves too little against
};

void AutoSelection::decide(int64_t n, AutoChoice& choice, uint64_t call, const CompressComms& comms, bool freeChoice) {
  // A held move is looked at again on a window of calls made after the hold
  // (its checkAt): a regular decision before it would read a window that
  // overlaps the one that moved. Every rank holds at the same step.
  if (choice.commMoved != 0 && call < choice.checkAt) return;
  Agreed a = agree(choice, comms);
  if (holdsForDrift(choice, a, call)) return;
  forgetOtherLinks(choice, a);
  StepCharge charge;
  std::vector<double> est = predict(choice, a, comms.size, charge);
  const int current = choice.decided ? choice.current : 0;
  startEarly(a, est);
  // An early start is a free choice (no second lead): its saving, an eighth
  // of the step, is past the noise that a second lead guards against.
  bool starts = false;
  for (int i = 1; i < static_cast<int>(est.size()); ++i)
    starts = starts || (a.early[i] && a.open(i) && i != current && call >= choice.candidates[i].retryAt);
  const Verdict verdict = choose(choice, a, est, call, freeChoice || starts);
  std::string reason = explain(n, choice, a, est, charge, verdict, call);

  const int best = verdict.best;
  if (best != choice.current || !choice.decided) {  // a new choice: its trial starts afresh
    if (choice.decided) choice.changes += 1;
    // The codec left keeps its periods: the new one's trial is judged
    // against its step too (compress/auto_select.h, the step guard). A codec
    // left by the step guard is no reference: the one before it stays.
    if (!verdict.vetoed) choice.previous = choice.decided && choice.current != 0 ? choice.current : -1;
    if (choice.previous == best) choice.previous = -1;
    choice.candidates[best].forgetCalls();
    choice.candidates[best].period.clear();  // its steps are measured afresh
    choice.onTrial = true;
    choice.checkAt = call + kAutoTrialCalls + (verdict.flushes ? 1 : 0);
    choice.flushNext = verdict.flushes;
  }
  // The reference: the running codec's agreed time; a new choice takes its
  // own at its next decision.
  choice.commAtDecision = best == current ? choice.commNow : 0;
  choice.current = best;
  choice.decided = true;
  choice.last.step = call;
  choice.last.choice = best;
  choice.last.predicted = std::move(est);
  choice.last.residual = a.residual;
  choice.last.period = a.period;
  choice.last.linkAlpha = a.alpha;
  choice.last.linkBeta = a.beta;
  choice.last.reason = std::move(reason);
}

AutoSelection::Agreed AutoSelection::agree(const AutoChoice& choice, const CompressComms& comms) {
  const int k = static_cast<int>(sites_.size());
  const double p = comms.size;
  const std::vector<AutoCandidate>& cand = choice.candidates;
  if (!choice.decided) {  // the link's latency before the first prediction (one small allreduce)
    double one = 0;
    const Clock::time_point t0 = Clock::now();
    comms.allreduceMax(&one, 1);
    link_.add(8.0 * 2 * (p - 1) / p, secondsSince(t0));
  }
  // v: k measured times (min), k codec costs (max), k residual ratios (max),
  // the running codec's communication time (min), the link fit's alpha and
  // beta (min), k step periods (max; 0 below kAutoPeriodSamples), the step
  // charge per codec second (max), per codec none's step over as many of
  // its last periods as the codec has (max), at a trial's end the step of
  // the codec it replaced over as many (max), and the step charge's most
  // (max). Steps are none's and the running codec's:
  // a codec that was left keeps its periods only as a trial's reference.
  const int running = choice.decided ? choice.current : 0;
  const int previous = choice.onTrial && running != 0 && choice.previous > 0 ? choice.previous : -1;
  std::vector<double> v(5 * static_cast<size_t>(k) + 6);
  const auto measuredStep = [](const TimeWindow& w, int m) {
    return w.count >= kAutoPeriodSamples && m >= kAutoPeriodSamples ? w.lowOfLast(m) : 0;
  };
  for (int i = 0; i < k; ++i) {
    const bool steps = i == 0 || i == running;
    v[i] = -cand[i].total.low();
    v[k + i] = cand[i].codecSeconds;
    v[2 * k + i] = cand[i].residual;
    v[3 * k + 3 + i] = steps ? measuredStep(cand[i].period, cand[i].period.count) : 0;
    v[4 * k + 4 + i] = i != 0 && steps ? measuredStep(cand[0].period, cand[i].period.count) : 0;
  }
  v[5 * k + 4] = previous > 0 ? measuredStep(cand[previous].period, cand[running].period.count) : 0;
  const StepCharge charge = stepCharge();
  v[4 * k + 3] = charge.perSecond;
  v[5 * k + 5] = charge.most;
  // Drift: the running codec's communication time, the ranks' least (a rank
  // that waited for a late peer measured the peer; the last to arrive did
  // not wait), against its reference.
  v[3 * k] = choice.decided && choice.current != 0 ? -cand[choice.current].comm.low() : 0;
  v[3 * k + 1] = -link_.alpha();
  v[3 * k + 2] = -link_.beta();
  const Clock::time_point t0 = Clock::now();
  comms.allreduceMax(v.data(), static_cast<int64_t>(v.size()));
  link_.add(8.0 * static_cast<double>(v.size()) * 2 * (p - 1) / p, secondsSince(t0));

  Agreed a;
  const auto at = [&v](int from, int count) { return std::vector<double>(v.begin() + from, v.begin() + from + count); };
  a.measured = at(0, k);
  for (double& t : a.measured) t = -t;
  a.codec = at(k, k);
  a.residual = at(2 * k, k);
  a.comm = -v[3 * k];
  a.alpha = -v[3 * k + 1];
  a.beta = -v[3 * k + 2];
  a.period = at(3 * k + 3, k);
  a.charge = {v[4 * k + 3], v[5 * k + 5]};
  a.noneStep = at(4 * k + 4, k);
  a.running = running;
  a.previous = previous;
  a.before = v[5 * k + 4];
  a.bound = bound_;
  // The window's wait is for a codec's start: a running codec (an early
  // PowerSGD) is judged as any running codec.
  const bool warming = choice.calls < static_cast<uint64_t>(kAutoWindowCalls);
  a.applies.resize(k);
  a.waits.resize(k);
  a.early.resize(k);
  a.replayed.resize(k);
  a.unread.resize(k);
  for (int i = 0; i < k; ++i) {
    a.unread[i] = factors(i) ? -1 : waitsForWindow(i) ? std::numeric_limits<double>::infinity() : 0;
    a.applies[i] = !factors(i) || choice.factorValues > 0;
    a.replayed[i] = !cand[i].hasRun && a.residual[i] >= 0;
    a.waits[i] = warming && waitsForWindow(i) && i != running;
    a.early[i] = a.waits[i] && factors(i);
  }
  return a;
}

bool AutoSelection::holdsForDrift(AutoChoice& choice, const Agreed& a, uint64_t call) {
  // Moved by 2x or more (and by kAutoStepShare of none's step: less is
  // within the step's noise), seen again on the next window of calls, the
  // same way: none's bytes, not measured meanwhile, need a new sample. One
  // window's move may be a phase of the machine (a link that changed stays
  // changed); nothing is decided in between, since a changed link would
  // make every step measured on the old one look wrong.
  const double now = a.comm;
  const int moved = linkMove(choice.commAtDecision, now, a.period[0]);
  choice.commNow = now;
  if (moved != 0 && moved == choice.commMoved) {  // decide after none's new sample; the back-offs were for the old link
    choice.probeNext = true;
    choice.commAtDecision = 0;
    choice.commMoved = 0;
    choice.pending = -1;
    for (AutoCandidate& c : choice.candidates) {
      c.losses = c.retryAt = 0;
      c.lostTo = -1;
    }
    return true;
  }
  choice.commMoved = moved;
  if (moved != 0) {
    choice.checkAt = call + TimeWindow::kSize;
    return true;
  }
  return false;
}

void AutoSelection::forgetOtherLinks(AutoChoice& choice, Agreed& a) {
  // Every rank reads and forgets the same: none's time and the candidates'
  // are agreed, and so is each noneAtRead (set from agreed numbers).
  const int current = choice.decided ? choice.current : 0;
  for (int i = 1; i < static_cast<int>(choice.candidates.size()); ++i) {
    AutoCandidate& c = choice.candidates[i];
    if (i == current || !(a.measured[i] > 0)) {  // the running codec's times are of this link
      c.noneAtRead = i == current ? a.measured[0] : 0;
      continue;
    }
    if (c.noneAtRead <= 0) {
      c.noneAtRead = a.measured[0];
    } else if (linkMove(c.noneAtRead, a.measured[0], a.period[0]) != 0) {
      a.forgotten += "; " + autoCandidates()[i] + "'s " + ms(a.measured[i]) + " forgotten: none's time moved from " +
                     ms(c.noneAtRead) + " to " + ms(a.measured[0]);
      c.forgetCalls();
      c.period.clear();
      c.noneAtRead = 0;
      a.measured[i] = 0;
      a.period[i] = 0;
      a.noneStep[i] = 0;
      if (i == a.previous) a.before = 0;
    }
  }
}

std::vector<double> AutoSelection::predict(const AutoChoice& choice, const Agreed& a, int size, StepCharge& charge) {
  const int k = static_cast<int>(sites_.size());
  // A candidate that ran is judged by its measured time per call, the others
  // by the model (codec cost + the link fit at their bytes), scaled by how
  // far the model fell short for the codecs that ran (in place, codecs share
  // the cores with the other ranks' work; timed alone they look cheaper).
  std::vector<double> est(k);
  double shortfall = 1;
  for (int i = 0; i < k; ++i) {
    const double rounds = factors(i) ? 2 : 1;
    const double measured = a.measured[i], model = a.codec[i] + rounds * a.alpha + a.beta * busBytes(i, choice, size);
    est[i] = measured > 0 ? measured : model;
    if (i != 0 && measured > 0 && model > 0) shortfall = std::max(shortfall, measured / model);
  }
  for (int i = 1; i < k; ++i)
    if (!(a.measured[i] > 0)) est[i] *= shortfall;
  for (int i = 1; i < k; ++i)
    if (!a.applies[i]) est[i] = std::numeric_limits<double>::infinity();
  // The step a codec adds beyond its call (its period over none's, less
  // what its call saved or cost), per second of its codec time: on a
  // CPU-bound host, what each second of encode and decode costs the step.
  // One measured at this decision (the largest, where several codecs have
  // periods) replaces the group's; otherwise the group's agreed charge
  // stands. It is charged to every codec: one codec that lengthened the
  // step warns off the others by their codec time, untried, on every key,
  // each up to the step the reading measured (StepCharge::most).
  // Only a codec whose own time is above the step's noise (kAutoStepShare
  // of none's step) measures it: below, a step lengthened by noise or by
  // another key's choice would read as a large charge per second of a
  // small codec time (the step guard still leaves that codec).
  charge = a.charge;
  bool charged = false;
  for (int i = 1; i < k; ++i) {
    const double measured = a.measured[i], codec = a.codec[i];
    if (a.period[i] > 0 && a.noneStep[i] > 0 && measured > 0 && a.measured[0] > 0 &&
        codec >= kAutoStepShare * a.period[0]) {
      double hidden = (a.period[i] - a.noneStep[i]) - (measured - est[0]);
      if (!(hidden > kAutoStepShare * a.period[0])) hidden = 0;  // smaller: the step's noise
      const StepCharge c{hidden / codec, hidden};
      charge = charged ? StepCharge{std::max(charge.perSecond, c.perSecond), std::max(charge.most, c.most)} : c;
      charged = true;
    }
  }
  setStepCharge(charge);
  for (int i = 1; i < k; ++i) est[i] += charge.on(a.codec[i]);
  return est;
}

void AutoSelection::startEarly(Agreed& a, const std::vector<double>& est) {
  if (a.period[0] <= 0) return;  // none's step not yet known
  const int k = static_cast<int>(est.size());
  double open = std::numeric_limits<double>::infinity();  // the fastest that may run now
  for (int i = 0; i < k; ++i)
    if (a.open(i)) open = std::min(open, est[i]);
  for (int i = 1; i < k; ++i) {
    if (a.early[i] && open - est[i] >= kAutoEarlyShare * a.period[0]) a.waits[i] = 0;
  }
}

AutoSelection::Verdict AutoSelection::choose(AutoChoice& choice, const Agreed& a, const std::vector<double>& est,
                                             uint64_t call, bool freeChoice) {
  const int k = static_cast<int>(est.size());
  std::vector<AutoCandidate>& cand = choice.candidates;
  const int current = choice.decided ? choice.current : 0;
  Verdict out;
  out.vetoed = choice.decided && a.slower(current);
  // A current codec that is vetoed, or whose residual passed the bound, is
  // left at once (no lead to confirm, no hysteresis): a free choice.
  const bool leaves = out.vetoed || !a.within(current);
  freeChoice = freeChoice || leaves;
  // A codec that lost its trial to another codec's prediction is free again
  // once that codec is left out (by either guard), or once it has run and
  // measured slower than the loser by the margin (the prediction was wrong):
  // the back-off kept the loser from a winner that is not one.
  for (int i = 1; i < k; ++i) {
    AutoCandidate& c = cand[i];
    if (c.lostTo <= 0 || call >= c.retryAt) continue;
    const int w = c.lostTo;
    const bool left = !a.within(w) || (out.vetoed && w == current);
    const bool slowerThanLoser =
        a.measured[w] > 0 && a.measured[i] > 0 && (1 - kAutoMargin) * a.measured[w] > a.measured[i];
    if (!left && !slowerThanLoser) continue;
    out.released += "; " + autoCandidates()[i] + " free again: " + autoCandidates()[w] + ", which its trial lost to, " +
                    (left ? "is left out" : "measured " + ms(a.measured[w]) + " against its " + ms(a.measured[i]));
    c.retryAt = 0;
    c.losses -= std::min<uint64_t>(c.losses, 1);
    c.lostTo = -1;
  }
  // A codec that may hold back more of the key's recent gradient than one
  // open now (Agreed::held: its reading, or an unread sparsifier any share;
  // not a codec a back-off keeps out) takes over from the current choice
  // only where it saves kAutoEarlyShare of none's step against it, as an
  // early start must: the guard's reading spreads across runs of one model
  // about as widely as its bound is from zero, so a reading within the
  // bound does not say the codec is safe, and the accuracy it may cost is
  // taken only for a large share of the step. The codec that runs is
  // judged by the guards; at its trial's end (a decision while on trial)
  // the codec on trial, read now, is weighed as a challenger: PowerSGD,
  // unread until its trial, would otherwise never be.
  const bool trialEnd = choice.decided && choice.onTrial;
  const auto openNow = [&](int i) { return a.open(i) && (i == current || call >= cand[i].retryAt); };
  const auto saferThan = [&](int i) {  // the codec open now that i saves too little against; -1: none
    // held() > 0: not none, not bf16's rounding
    if (a.bound <= 0 || (i == current && !trialEnd) || !(a.held(i) > 0)) return -1;
    for (int j = 0; j < k; ++j)
      if (j != i && openNow(j) && a.held(j) >= 0 && a.held(j) < a.held(i) &&
          est[j] - est[i] < kAutoEarlyShare * a.period[0])
        return j;
    return -1;
  };
  const auto eligible = [&](int i) { return openNow(i) && saferThan(i) < 0; };
  int fastest = 0, fastestOpen = 0;
  for (int i = 1; i < k; ++i) {
    if (eligible(i) && est[i] < est[fastest]) fastest = i;
    if (openNow(i) && est[i] < est[fastestOpen]) fastestOpen = i;
  }
  // The reason names the fastest codec the eighth keeps out, and a codec
  // on trial that it ends.
  const auto riskier = [&](int i) {
    const int j = saferThan(i);
    char held[48], share[32];
    if (std::isfinite(a.held(i)))
      std::snprintf(held, sizeof held, "reads %.0f %%", 100 * a.held(i));
    else
      std::snprintf(held, sizeof held, "unread");
    std::snprintf(share, sizeof share, "%.3g %%", 100 * kAutoEarlyShare);
    out.riskier += "; " + autoCandidates()[i] + " (" + ms(est[i]) + ", " + held +
                   ") may hold back more of the recent gradient than " + autoCandidates()[j] + " and saves less than " +
                   share + " of the step against it";
  };
  if (fastestOpen != fastest) riskier(fastestOpen);
  if (trialEnd && current != 0 && current != fastestOpen && openNow(current) && saferThan(current) >= 0)
    riskier(current);
  int best = fastest;
  if (best != 0 && est[best] > (1 - kAutoMargin) * est[0]) {
    best = 0;
    out.why = "; " + autoCandidates()[fastest] + " (" + ms(est[fastest]) + ") saves less than the margin";
  } else if (best != 0 && est[0] - est[best] < kAutoStepShare * a.period[0]) {
    best = 0;
    out.why = "; " + autoCandidates()[fastest] + " (" + ms(est[fastest]) + ") saves less than " +
              std::to_string(static_cast<int>(100 * kAutoStepShare)) + " % of the step (" + ms(a.period[0]) + ")";
  }
  // At a free choice the fastest is taken. Otherwise the current codec is
  // kept unless another is faster by the margin, and a challenger must lead
  // twice in a row (one lead may be the machine's noise). A trial's end
  // (a decision while on trial) asks no second lead, and is free against
  // none: the codec on trial must show its margin against none's time. It
  // is not free against the other codecs: measured now, the codec on trial
  // is kept unless another is faster by the margin (the others are mostly
  // predictions, whose model and step charge move between decisions; a
  // near tie is no reason for a flush and a trial). That holds after drift
  // too, which is otherwise free.
  const bool trialHolds = trialEnd && !leaves && current != 0 && best != 0 && eligible(current) &&
                          est[current] <= (1 - kAutoMargin) * est[0] &&
                          est[0] - est[current] >= kAutoStepShare * a.period[0];
  const bool byMargin = (!freeChoice && !trialEnd) || trialHolds;
  if (best != current && byMargin && est[best] > (1 - kAutoMargin) * est[current]) {
    out.why = "; kept: " + autoCandidates()[best] + " (" + ms(est[best]) + ") is not faster by the margin";
    best = current;
  }
  if (best != current && !freeChoice && !trialEnd && choice.pending != best) {
    out.why = "; " + autoCandidates()[best] + " (" + ms(est[best]) + ") leads: checked again in " +
              std::to_string(kAutoTrialCalls) + " calls";
    choice.pending = best;
    choice.checkAt = call + kAutoTrialCalls;
    best = current;
  } else {
    choice.pending = -1;
    choice.checkAt = 0;
  }
  // A trial that lost, or a codec that made the step longer: it waits
  // before it is tried again, longer each time.
  if (choice.decided && (choice.onTrial || out.vetoed) && best != current && current != 0) {
    AutoCandidate& lost = cand[current];
    lost.retryAt = call + (kAutoBackoff << std::min<uint64_t>(lost.losses, 6));
    lost.losses += 1;
    lost.lostTo = out.vetoed ? -1 : best;
  }
  if (out.vetoed) {
    const int by = a.lengthened(current);
    out.why = "; " + autoCandidates()[current] + " left: the key's calls came every " + ms(a.period[current]) +
              " with it, every " + ms(a.stepOf(by, current)) + " with " + autoCandidates()[by] + out.why;
  }
  choice.onTrial = false;
  // From one codec to another: the call between runs none (its residual
  // sent), and the trial counts from the next; a residual the guard read
  // under kAutoCarryShare (bf16's rounding) is carried in the next codec's
  // error feedback instead.
  const int last = choice.lastRan;
  const bool carries = last > 0 && a.residual[last] >= 0 && a.residual[last] < kAutoCarryShare;
  out.flushes = best != current && best != 0 && last != 0 && last != best && !carries;
  out.best = best;
  return out;
}

std::string AutoSelection::explain(int64_t n, const AutoChoice& choice, const Agreed& a, const std::vector<double>& est,
                                   const StepCharge& charge, const Verdict& verdict, uint64_t call) {
  const int k = static_cast<int>(est.size()), best = verdict.best;
  const std::vector<AutoCandidate>& cand = choice.candidates;
  std::string reason = "predicted " + ms(est[best]);
  if (best != 0) reason += " against none's " + ms(est[0]);
  reason += verdict.why + verdict.riskier + verdict.released + a.forgotten;
  if (verdict.why.empty()) {
    int runnerUp = -1;
    for (int i = 0; i < k; ++i)
      if (i != best && a.open(i) && (runnerUp < 0 || est[i] < est[runnerUp])) runnerUp = i;
    if (runnerUp > 0) reason += "; next " + autoCandidates()[runnerUp] + " " + ms(est[runnerUp]);
  }
  char early[80];
  std::snprintf(early, sizeof early, " (before it, only where it saves %.3g %% of the step)", 100 * kAutoEarlyShare);
  for (int i = 1; i < k; ++i) {
    char buf[256];
    if (!a.applies[i]) continue;
    if (!a.within(i) && a.replayed[i]) {
      std::snprintf(buf, sizeof buf,
                    "; %s left out before it ran: its replay on a sample holds back %.0f %% of a weight's recent "
                    "gradient, along it, > %.0f %% (running, it would hold back more)",
                    autoCandidates()[i].c_str(), 100 * a.residual[i], 100 * a.bound / kAutoReplayFeedback);
      reason += buf;
    } else if (!a.within(i)) {
      std::snprintf(buf, sizeof buf,
                    "; %s left out: its residual holds back %.0f %% of a weight's recent gradient, along it, > %.0f %%",
                    autoCandidates()[i].c_str(), 100 * a.residual[i], 100 * a.bound);
      reason += buf;
    } else if (a.waits[i] && i != best) {
      std::snprintf(buf, sizeof buf, "; %s waits for the key's call %d%s", autoCandidates()[i].c_str(),
                    kAutoWindowCalls, a.early[i] ? early : "");
      reason += buf;
    } else if (i != best && call < cand[i].retryAt) {
      std::snprintf(buf, sizeof buf, "; %s lost a trial: not before call %llu", autoCandidates()[i].c_str(),
                    static_cast<unsigned long long>(cand[i].retryAt));
      reason += buf;
    }
  }
  if (verdict.flushes) reason += "; one call of none first sends " + autoCandidates()[choice.lastRan] + "'s residual";
  if (charge.perSecond > 0.05) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "; codecs charged %.2g s of step per s of codec time, up to %s", charge.perSecond,
                  ms(charge.most).c_str());
    reason += buf;
  }
  char link[96];
  std::snprintf(link, sizeof link, " (link %.3g us + %.3g GB/s bus; %lld elements)", a.alpha * 1e6,
                a.beta > 0 ? 1e-9 / a.beta : 0.0, static_cast<long long>(n));
  reason += link;
  return reason;
}

}  // namespace scalecomm
