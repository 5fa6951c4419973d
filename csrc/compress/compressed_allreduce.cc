#include "compress/compressed_allreduce.h"

#include <algorithm>
#include <limits>

#include "comm/reducer.h"

namespace scalecomm {

CompressedSite::CompressedSite(CodecSpec spec)
    : spec_(std::move(spec)),
      name_(spec_.str()),
      tag_(CodecTag::of(name_)),
      codec_(spec_.entry->make ? makeCodec(spec_) : nullptr) {}

Label CompressedSite::title(AlgorithmRef algorithm) const {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [key, title] : titles_)
    if (key == algorithm.key()) return title;
  titles_.emplace_back(algorithm.key(), Label("allreduce:" + algorithm + ":" + name_));
  return titles_.back().second;
}

int64_t compressedWireBytes(const CodecSpec& spec, int64_t n) {
  if (spec.entry->make != nullptr) return makeCodec(spec)->payloadBytes(n);
  const PowerSgdPlan plan = powerSgdPlan(n, spec.rank, {});
  return 4 * (plan.firstCount + plan.secondCount);
}

void compressedAllreduce(float* x, int64_t n, const CompressedSite& site, bool errorFeedback, CompressState& state,
                         const CompressComms& comms, uint64_t step, bool average, const PowerSgdLayout& layout) {
  state.toHost();
  // A key whose tensor changed size (DDP rebuilds its buckets after the first
  // step) starts over: an old residual belongs to other elements.
  if (state.residual.size() != static_cast<size_t>(n)) state.residual.assign(errorFeedback ? n : 0, 0.f);
  float* residual = errorFeedback ? state.residual.data() : nullptr;
  // An overflowed gradient (a mixed-precision step the loss scaler will
  // skip): every rank's result must show it, and no state may keep it.
  // Infinity in every element survives every codec; the residual starts
  // afresh. A codec finds it in its encode's own pass (acc = x + residual,
  // so a sum that overflowed counts too) and encodes again from here.
  const auto overflowed = [&] {
    std::fill(x, x + n, std::numeric_limits<float>::infinity());
    if (residual) std::fill(residual, residual + n, 0.f);
    residual = nullptr;
  };
  const auto encodeInto = [&](const Codec& codec, uint8_t* payload) {
    if (codec.encode(x, residual, n, payload, step, comms.rank)) return;
    overflowed();
    codec.encode(x, nullptr, n, payload, step, comms.rank);
  };
  const Codec* codec = site.codec();
  bool averaged = false;
  if (codec == nullptr) {  // powersgd: its own two rounds, in place on x (adds the residual, averages)
    const auto allreduce = [&](float* data, int64_t count) {
      comms.allreduce(data, count, DataType::Float32, ReduceOp::Sum);
    };
    powerSgd(x, n, site.spec().rank, layout, state.warm, allreduce, residual, average ? comms.size : 1);
    averaged = average;
  } else if (const auto type = codec->sumType()) {
    const int64_t b = codec->payloadBytes(n);
    uint8_t* payload = state.payloads.get(static_cast<size_t>(b));
    encodeInto(*codec, payload);
    comms.allreduce(payload, b / static_cast<int64_t>(elementSize(*type)), *type, ReduceOp::Sum);
    codec->decode(x, n, payload, step, average ? comms.size : 1);  // the average in the same pass
    averaged = average;
  } else {
    const int64_t b = codec->payloadBytes(n);
    uint8_t* all = state.payloads.get(static_cast<size_t>(comms.size * b));
    encodeInto(*codec, all + comms.rank * b);
    comms.allgatherBytes(all, b);
    std::fill(x, x + n, 0.f);
    for (int q = 0; q < comms.size; ++q) codec->decodeAdd(x, n, all + q * b, step);
  }
  if (average && !averaged) divideInPlace(x, n, DataType::Float32, comms.size);
  state.steps += 1;
}

}  // namespace scalecomm
