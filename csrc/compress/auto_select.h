// scalecomm compress: compress="auto", a codec chosen per tensor key from
// measured costs, the same on every rank.
//
// Contract: autoCandidates() is the table auto chooses from, from least to
// most lossy: none (the exact allreduce), bf16, top-k 10 %, 3 %, 1 %. Per
// key (CompressState::choice) a call runs the key's current candidate with
// error feedback (the residual carries over between candidates; running
// none sends x + residual exactly and empties it). The key's first call
// times each codec's encode and decode on its values (the codec cost on
// this machine) and runs none as a warm-up; the second runs none and
// decides. Every call adds its communication time to the group's LinkFit
// against the bus bytes it moved (allreduce 2(p-1)/p x bytes, allgather
// (p-1) x payload), and its own time per call to its candidate's measured
// time. At every decision (the second call, then every kAutoDecideEvery,
// and kAutoTrialCalls after each switch, so a wrong choice costs few calls)
// each rank estimates every candidate's time per call (its measured time if
// it ran, else codec cost + the link fit at its bytes, scaled up by the
// model's largest shortfall for a codec that ran; the first decision
// times one small allreduce first, the link's latency) and its residual
// ratio |e| / |x| (the error-feedback bound); the ranks take the maximum of
// each (one small allreduce), and every rank picks, from the same numbers,
// the fastest candidate whose residual ratio is within `residualBound`; a
// codec must beat none by kAutoMargin to be chosen, and the current choice
// is kept unless another is faster by that margin. So the choice is
// identical on every rank (they decide on identical numbers at the same
// step), a codec that ran slower than none is left as soon as its own time
// shows it, and the choice follows the link as it drifts: while a codec
// runs, none's bytes are not re-measured, so when the running codec's
// communication time has moved 2x since it was chosen (any rank; agreed
// with the decision), the next call runs none, replaces none's time and
// the link's at that size, and decides; every kAutoProbeEvery calls one
// call runs none anyway.
// Thread safety: an AutoSelection serves every key of a group, from any
// thread; a key's state is used under its slot's lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "compress/auto_choice.h"
#include "compress/compressed_allreduce.h"

namespace scalecomm {

constexpr uint64_t kAutoDecideEvery = 16;
constexpr uint64_t kAutoTrialCalls = 3;  // a new choice decides again after this many calls
constexpr uint64_t kAutoProbeEvery = 1024;
constexpr double kAutoMargin = 0.10;  // a switch must save this share of the predicted time

// Candidate specs, least to most lossy; "none" first.
const std::vector<std::string>& autoCandidates();

// Seconds of communication against bus bytes, t = alpha + beta x bytes,
// fitted (least squares, alpha, beta >= 0) over the mean time of each
// power-of-two size class of the group's own compressed calls (an EWMA per
// class, so the fit follows the link). Thread safe.
class LinkFit {
 public:
  // fresh: the sample replaces its class's mean (a link known to have changed).
  void add(double busBytes, double seconds, bool fresh = false);
  double predict(double busBytes) const;
  double alpha() const;
  double beta() const;  // seconds per bus byte

 private:
  void refit();  // under mu_
  mutable std::mutex mu_;
  struct SizeClass {
    double bytes = 0, seconds = 0;  // means (EWMA) of the class's calls
  };
  std::map<int, SizeClass> classes_;  // by log2(bus bytes)
  double alpha_ = 0, beta_ = 0;
};

class AutoSelection {
 public:
  explicit AutoSelection(double residualBound);
  // Runs one compressed allreduce of x[0..n) on `state` (its choice, its
  // residual) and returns the candidate it ran. `comms.allreduceMax` must be set.
  int run(float* x, int64_t n, bool errorFeedback, CompressState& state, const CompressComms& comms);
  const LinkFit& link() const { return link_; }
  double residualBound() const { return bound_; }
  // "allreduce:<algorithm>:auto:<candidate>" (candidate < 0: ":auto"), as
  // profiles and stats show the call; interned on first use.
  Label title(AlgorithmRef algorithm, int candidate) const;

 private:
  void measureCodecs(const float* x, int64_t n, AutoChoice& choice, const CompressComms& comms) const;
  void decide(int64_t n, AutoChoice& choice, uint64_t step, const CompressComms& comms);
  double busBytes(int i, int64_t n, int size) const;

  double bound_;
  std::vector<std::unique_ptr<CompressedSite>> sites_;
  LinkFit link_;
  mutable std::mutex titlesMu_;
  mutable std::vector<std::tuple<const void*, int, Label>> titles_;
};

}  // namespace scalecomm
