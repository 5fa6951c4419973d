// scalecomm compress: allreduce of a compressed gradient, with error feedback,
// on raw float32 host memory.
//
// Contract: compressedAllreduce() replaces x[0..n) by the sum over ranks of
// each rank's decoded (compressed) contribution, or with `average` by that
// sum divided by the ranks (float32, as the reducer's Avg divides):
//   c_r = x_r + e_r (e_r: this rank's residual, when error feedback is on)
//   x   = sum_r decode(encode(c_r));   e_r <- c_r - decode(encode(c_r))
// Routing by algebra: summable codecs allreduce their payloads
// (comms.allreduce with Sum, in the codec's sum type); the others allgather them
// (comms.allgatherBytes) and decode each into the sum. PowerSGD runs its
// own two rounds (compress/powersgd.h) over `layout`'s blocks. `state` holds the residual and
// PowerSGD's warm start for one tensor (a DDP bucket); an empty residual,
// or one of another size (the key's tensor changed), starts at zero.
// `step` must be equal on every rank (the codecs' shared seed) and advance
// per call. Non-finite input (an overflowed mixed-precision gradient): a
// rank whose acc = x + residual holds an infinity or NaN (x did, or the sum
// overflowed), or whose residual would keep one (a value above fp16's
// range), sends infinity in every element (every codec carries it), so
// every rank's result is non-finite, as an uncompressed sum's would be;
// that rank's residual starts afresh, the others' keep only their finite
// part, and PowerSGD keeps its warm start and residuals as they were, so
// no infinity or NaN enters the state. The codec's encode finds it in the
// pass that reads acc (Codec::encode) and the call encodes again.
// Errors from comms propagate; `x` and `state` are then unspecified.
// (The Group skips all of this on a group of one rank or for an empty
// buffer: nothing is sent, so the values stay exact; group/compressed_call.cc.)
// Thread safety: one call per state at a time; a site serves many threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algo/options.h"
#include "algo/registry.h"
#include "compress/auto_choice.h"
#include "compress/codec.h"
#include "compress/powersgd.h"
#include "core/label.h"

namespace scalecomm {

struct CompressComms {
  // In place: the sum (op Sum; every codec's exchanges, on the call's
  // algorithm), or the average (op Avg, divided by the ranks in the sum's
  // own last pass: compress="auto" running none on an averaging call).
  std::function<void(void* data, int64_t count, DataType type, ReduceOp op)> allreduce;
  // compress="auto" running none: the exact float32 sum (or average) of the
  // whole tensor, run as a plain allreduce of its bytes would run (the
  // group's online pick), so that none costs what the uncompressed call
  // costs; empty: allreduce. A codec's own exchanges stay on allreduce, so
  // under auto a codec costs what it costs named.
  std::function<void(void* data, int64_t count, DataType type, ReduceOp op)> exactSum;
  // all: size x bytes, this rank's payload already at rank x bytes; fills the others'.
  std::function<void(uint8_t* all, int64_t bytes)> allgatherBytes;
  // Element-wise maximum across ranks, in place (compress="auto" agrees its
  // decisions through it; compress/auto_select.h).
  std::function<void(double* data, int64_t count)> allreduceMax;
  int rank = 0;
  int size = 1;
};

// Bytes a key's calls reuse: get(n) returns at least n of them, as the last
// call left them (not cleared); copying a state copies none of them.
class ReusedBytes {
 public:
  ReusedBytes() = default;
  ReusedBytes(const ReusedBytes&) {}
  ReusedBytes& operator=(const ReusedBytes&) { return *this; }
  uint8_t* get(size_t n) {
    if (n > size_) {
      data_.reset(new uint8_t[n]);
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

struct CompressState {
  std::vector<float> residual;  // n values; empty: zero
  ReusedBytes payloads;         // the call's payloads (every rank's, for an allgathered codec)
  PowerSgdWarmStart warm;       // PowerSGD's Q
  uint64_t steps = 0;
  AutoChoice choice;  // compress="auto": the key's codec and why
  // Set while the residual and warm start live in a device's memory (the
  // torch adapter's codecs on a CUDA tensor): then it, not the two fields
  // above, holds them, and copyTo() writes them there in host form (a
  // checkpoint, or a call that runs the host codecs next).
  struct OnDevice {
    virtual ~OnDevice() = default;
    virtual void copyTo(CompressState& host) const = 0;
  };
  std::shared_ptr<OnDevice> device;
  // The state in host form: the device's copy moved into the fields, if any.
  void toHost() {
    if (!device) return;
    device->copyTo(*this);
    device.reset();
  }
};

// One compressed allreduce site, prepared once for every call that uses its
// spec: the spec parsed, its codec made (none for powersgd, which runs its
// own two rounds), its tag for the messages' settings, and its title per
// algorithm ("allreduce:<algorithm>:<codec>", as profiles and stats show it)
// interned on first use. Thread safe.
class CompressedSite {
 public:
  explicit CompressedSite(CodecSpec spec);
  const CodecSpec& spec() const { return spec_; }
  const std::string& name() const { return name_; }  // canonical: "topk:0.01"
  const CodecTag& tag() const { return tag_; }       // as the messages carry it
  const Codec* codec() const { return codec_.get(); }
  Label title(AlgorithmRef algorithm) const;

 private:
  CodecSpec spec_;
  std::string name_;
  CodecTag tag_;
  std::unique_ptr<Codec> codec_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<const void*, Label>> titles_;  // per algorithm entry
};

void compressedAllreduce(float* x, int64_t n, const CompressedSite& site, bool errorFeedback, CompressState& state,
                         const CompressComms& comms, uint64_t step, bool average, const PowerSgdLayout& layout = {});

// Bytes one rank sends into compressedAllreduce of `n` elements (codec
// payload; PowerSGD's two factors, or 4 x n where it falls back to dense).
int64_t compressedWireBytes(const CodecSpec& spec, int64_t n);

}  // namespace scalecomm
