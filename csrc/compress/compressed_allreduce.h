// scalecomm compress: allreduce of a compressed gradient, with error feedback.
//
// Contract: compressedAllreduce() replaces `x` (any floating dtype, 1-D view
// of contiguous memory) by the sum over ranks of each rank's decoded
// (compressed) contribution, computed in float32:
//   c_r = x_r + e_r (e_r: this rank's residual, when error feedback is on)
//   x   = sum_r decode(encode(c_r));   e_r <- c_r - decode(encode(c_r))
// Routing by algebra: summable codecs allreduce their payloads (comms.
// allreduceSum); the others allgather them (comms.allgatherBytes) and decode
// each into the sum. PowerSGD (rank r) views x as a matrix M of matrixRows
// rows (a weight's own shape; 0: near-square, zero padded),
// allreduces P = M Q, orthonormalises P, allreduces Q = M^T P (Q is kept,
// warm-starting the next call), x = P Q^T; tensors too small to gain are
// allreduced uncompressed. `state` holds the residual and PowerSGD's Q for one
// tensor (a DDP bucket); an undefined residual, or one of another size (the
// key's tensor changed), starts at zero. `step` must be
// equal on every rank (the random-k seed) and advance per call.
// Errors from comms propagate; `x` and `state` are then unspecified.
// (The torch adapter skips all of this on a group of one rank or for an empty
// tensor: nothing is sent, so the tensor stays exact.)
// Thread safety: one call per state at a time.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algo/registry.h"
#include "compress/codec.h"
#include "core/label.h"

namespace scalecomm {

struct CompressComms {
  std::function<void(at::Tensor&)> allreduceSum;                // in place
  std::function<at::Tensor(const at::Tensor&)> allgatherBytes;  // uint8 [b] -> uint8 [size x b]
  int rank = 0;
  int size = 1;
};

struct CompressState {
  at::Tensor residual;  // float32, numel of the tensor; undefined: zero
  at::Tensor q;         // PowerSGD's warm start
  uint64_t steps = 0;
};

// One compressed allreduce site, prepared once for every call that uses its
// spec: the spec parsed, its codec made (none for powersgd, which runs its
// own two rounds), and its title per algorithm ("allreduce:<algorithm>:
// <codec>", as profiles and stats show it) interned on first use. Thread safe.
class CompressedSite {
 public:
  explicit CompressedSite(CodecSpec spec);
  const CodecSpec& spec() const { return spec_; }
  const std::string& name() const { return name_; }  // canonical: "topk:0.01"
  const Codec* codec() const { return codec_.get(); }
  Label title(AlgorithmRef algorithm) const;

 private:
  CodecSpec spec_;
  std::string name_;
  std::unique_ptr<Codec> codec_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<const void*, Label>> titles_;  // per algorithm entry
};

void compressedAllreduce(at::Tensor& x, const CompressedSite& site, bool errorFeedback, CompressState& state,
                         const CompressComms& comms, uint64_t step, int64_t matrixRows = 0);

// Bytes one rank sends into compressedAllreduce of `numel` elements (codec
// payload; PowerSGD's two factors, or 4 x numel where it falls back to dense).
int64_t compressedWireBytes(const CodecSpec& spec, int64_t numel);

}  // namespace scalecomm
