// scalecomm torch adapter: the codecs as torch operations on a tensor's own
// device, so that a CUDA tensor is compressed, sent and decoded on its GPU
// with no trip through host memory.
//
// Contract: compressedAllreduceTensor() is compressedAllreduce()
// (compress/compressed_allreduce.h) on `x`, a contiguous 1-D float32 tensor
// on any device: the same codecs, wire formats (compress/codec.h), routing
// (summable payloads allreduced in their sum type, the others allgathered
// and decoded in rank order), error feedback and PowerSGD protocol. The
// payloads are tensors on x's device whose memory goes to `comms`, so on a
// CUDA tensor the comms must move device memory (the Group's queued device
// channel) and every operation queues on the current stream. Bit for bit
// as the host codecs: fp16, bf16, random-k (the same positions, drawn on the
// device from the shared seed) and the levels of qsgd (the same rounding
// noise); to the rounding of a sum's order: sign's scales, qsgd's norms and
// PowerSGD; top-k keeps the same set up to ties, and topk_sampled selects
// exactly (as topk) on every device. Non-finite input is handled as there
// (every rank's result non-finite, no infinity or NaN kept in the state),
// with no sync with the host; PowerSGD's dense fallback then restarts the
// residual at zero where the host form keeps the old one.
// The state's residual and warm start live on x's device while calls run
// there (CompressState::device: host vectors restored from a checkpoint are
// moved there at the next call; snapshot() copies them back).
// Errors: top-k of more than 2^31 - 1 values, random-k of 2^31 or more, and
// a top-k payload naming an element outside x (ranks with different sizes)
// raise Error naming the codec.
// Thread safety: as compressedAllreduce (one call per state at a time).
#pragma once

#include <ATen/ATen.h>

#include "compress/compressed_allreduce.h"

namespace scalecomm {

void compressedAllreduceTensor(const at::Tensor& x, const CompressedSite& site, bool errorFeedback,
                               CompressState& state, const CompressComms& comms, const PowerSgdLayout& layout = {});

// One rank's encode of x (with error feedback when `residual` is given, which
// is updated in place), as the host codecs' codec_encode: (payload bytes,
// x's decoded values). For tests and the kernels benchmark.
std::pair<at::Tensor, at::Tensor> encodeTensor(const at::Tensor& x, at::Tensor* residual, const CodecSpec& spec,
                                               uint64_t seed, int rank);

// The i-th draws of codec_random's stream `seed` for int64 i (a device
// tensor): the same 64 bits, as int64, as codec_random::draw.
at::Tensor randomDraws(uint64_t seed, const at::Tensor& i);

}  // namespace scalecomm
