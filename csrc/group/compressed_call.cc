// The Group's compressed allreduce (CallKind::CompressedAllreduce): the
// prepared sites, and the call (compressedAllreduce, or the call's own body)
// run over the group's own allreduce and allgather on the channel it runs on
// (the stream channel, or a device's queued channel), whose
// messages carry the site's codec tag, so a rank with another codec (or
// ratio, levels, rank) fails naming it.
#include <string>

#include "algo/registry.h"
#include "comm/reducer.h"
#include "core/logging.h"
#include "group/group.h"

namespace scalecomm {

std::shared_ptr<const CompressedSite> Group::compressedSite(const std::string& spec) {
  std::lock_guard<std::mutex> g(sitesMu_);
  auto it = compressedSites_.find(spec);
  if (it == compressedSites_.end())
    it = compressedSites_.emplace(spec, std::make_shared<const CompressedSite>(CodecSpec::parse(spec))).first;
  return it->second;
}

std::shared_ptr<AutoSelection> Group::autoCompression() {
  std::lock_guard<std::mutex> g(sitesMu_);
  if (!autoCompression_)
    autoCompression_ = std::make_shared<AutoSelection>(static_cast<double>(config_.compressionAutoBound) / 100);
  return autoCompression_;
}

namespace {

// An error of the inner allreduce or allgather, named as the call the user made.
Error asCompressedCall(const Error& e, const std::string& codec) {
  std::string what = e.what();
  for (const char* inner : {"scalecomm allgather (", "scalecomm allreduce ("}) {
    const std::string head(inner);
    if (what.rfind(head, 0) == 0) {
      what = strCat("scalecomm allreduce with codec ", codec, " (", what.substr(head.size()));
      break;
    }
  }
  return Error(e.kind(), what);
}

}  // namespace

void Group::runCompressed(Call& call, Channel& ch, const CollectiveOptions& o) {
  // One rank, or nothing to send: the sum is the values themselves (exact;
  // no codec, no residual).
  if (size_ == 1 || call.count == 0) return;
  const CompressedCall& c = *call.compressed;
  CollectiveOptions coded = o;
  coded.codec = c.site ? c.site->tag() : CodecTag::of("auto");
  CompressComms cc;
  cc.rank = rank_;
  cc.size = size_;
  // Under auto, the exact sum of the whole tensor (compress=auto running
  // none) picks and times its algorithm as a plain allreduce of its bytes
  // would (the online tuner's pick; an exploration trial included), so
  // running none costs what the uncompressed call costs: the cost model's
  // static pick made DDP steps 10 % slower on CPU-bound hosts. A codec's own
  // exchanges run the call's algorithm, as when the codec is named, so a
  // codec costs under auto what it costs named (tuned, PowerSGD's two small
  // sums would meet the tuner's exploration at their size class on every
  // call). On a device's channel the sum runs the call's device algorithm
  // (group/device_path.cc).
  const bool tunes = c.chooser != nullptr && selector_->online() && call.deviceIndex < 0;
  AlgorithmRef ranWith = o.algorithm;
  // The call's exchanges (a codec's rounds, auto's decision) run one after
  // another under its seq, each under its own part: a rank that finished one
  // starts the next while a peer may still wait in it (comm/wire.h).
  int exchanges = 0;
  const auto nextExchange = [&]() {
    CollectiveOptions e = coded;
    e.part = exchangePart(exchanges++);
    return e;
  };
  // A sum, or (op Avg) the average, divided in the sum's own last pass.
  const auto sum = [&](void* data, int64_t count, DataType type, ReduceOp op) {
    allreduce(ch, data, count, type, op, 1.0, nextExchange());
  };
  // auto's none: the tuner's pick for the sum's bytes, timed for the tuner.
  const auto tunedSum = [&](void* data, int64_t count, DataType type, ReduceOp op) {
    const Selector::Resolved r =
        selector_->resolve(count * static_cast<int64_t>(elementSize(type)), call.stager != nullptr);
    CollectiveOptions a = nextExchange();
    a.algorithm = ranWith = r.algorithm;
    const Clock::time_point t0 = Clock::now();
    allreduce(ch, data, count, type, op, 1.0, a);
    if (r.pick.measured) recordTuned(r.pick, secondsSince(t0), a);
  };
  const auto gather = [&](uint8_t* all, int64_t bytes) {
    std::vector<void*> blocks;
    for (int q = 0; q < size_; ++q) blocks.push_back(all + q * bytes);
    CollectiveOptions g = nextExchange();
    g.algorithm = o.algorithm.is(AlgorithmKind::Native) ? o.algorithm : AlgorithmRef(ringAlgorithm());
    allgather(ch, blocks, bytes, DataType::Opaque, g);
  };
  const auto max = [&](double* data, int64_t count) {
    allreduce(ch, data, count, DataType::Float64, ReduceOp::Max, 1.0, nextExchange());
  };
  // Each function holds one reference (no allocation per call).
  cc.allreduce = [&sum](void* data, int64_t count, DataType type, ReduceOp op) { sum(data, count, type, op); };
  if (tunes)
    cc.exactSum = [&tunedSum](void* data, int64_t count, DataType type, ReduceOp op) {
      tunedSum(data, count, type, op);
    };
  cc.allgatherBytes = [&gather](uint8_t* all, int64_t bytes) { gather(all, bytes); };
  cc.allreduceMax = [&max](double* data, int64_t count) { max(data, count); };
  std::lock_guard<std::mutex> g(c.slot->mu);
  try {
    if (c.chooser) {
      CompressState& state = c.slot->state;
      const bool decided = state.choice.decided;
      const uint64_t changes = state.choice.changes;
      const double commWas = state.choice.commAtDecision;
      const int ran =
          c.chooser->run(static_cast<float*>(call.data), call.count, c.errorFeedback, state, cc, c.layout, c.average);
      call.name = c.chooser->title(ranWith, ran);  // stats and profiles show what ran
      const AutoChoice& now = state.choice;
      const bool decidedNow = rank_ == 0 && now.decided && now.last.step == now.calls;  // a decision at this call
      if (decidedNow && (!decided || now.changes != changes))
        SC_LOG(Info, "rank 0: compress=auto ", decided ? "switches to " : "chooses ", autoCandidates()[now.current],
               " at call ", now.calls, " of a key: ", now.last.reason);
      else if (decidedNow)
        SC_LOG(Debug, "rank 0: compress=auto keeps ", autoCandidates()[now.current], " at call ", now.calls,
               " of a key: ", now.last.reason);
      if (decidedNow)
        SC_LOG(Debug, "rank 0: compress=auto at call ", now.calls, " of a key (", call.count,
               " elements) read, per call: ", now.last.numbers());
      if (rank_ == 0 && state.choice.probeNext) {
        SC_LOG(Info, "rank 0: compress=auto: the link drifted at call ", state.choice.calls, " of a key (", call.count,
               " elements): ", autoCandidates()[state.choice.current], "'s communication ", commWas * 1e3, " ms, ",
               state.choice.commNow * 1e3,
               " ms now (the ranks' least; moved 2x or more at two decisions in a row); none runs the next ",
               1 + kAutoPeriodSamples, " calls, every candidate's step is measured again, then it decides");
      }
    } else if (c.body) {
      c.body(c.slot->state, cc);
    } else {
      compressedAllreduce(static_cast<float*>(call.data), call.count, *c.site, c.errorFeedback, c.slot->state, cc,
                          c.slot->state.steps, c.average, c.layout);
    }
  } catch (const Error& e) {
    throw asCompressedCall(e, c.site ? c.site->name() : std::string("auto"));
  }
}

}  // namespace scalecomm
