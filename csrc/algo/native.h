// scalecomm algo: the native algorithms' runners: a library's own collective
// in place of a scalecomm schedule (algo/registry.h, kind Native).
//
// Contract: each runner takes one NativeCall (comm/queued_channel.h) of a
// group of more than one rank moving at least one element, pre-multiplies
// PREMUL_SUM inputs by premulFactor, and runs it with the library's own
// collective; false where it declines the call (the caller then runs the
// collective's default schedule). Semantics as the same-named functions of
// algo/collectives.h.
// - ncclNative: NCCL's collective on the queued channel (CUDA memory);
//   declines an allgather into separate outputs. InvalidArgument on a host
//   channel, or for an op/dtype NCCL lacks.
// - mpiNative: MPI's collective on the group's MPI communicator
//   (comm/mpi_collectives.h); InvalidArgument on device memory.
// Errors name the collective, the rank and what to choose instead.
#pragma once

#include <string>

#include "comm/queued_channel.h"

namespace scalecomm {

class Communicator;
struct CollectiveOptions;

bool ncclNative(Channel& ch, const NativeCall& call, double premulFactor, const CollectiveOptions& opts);
bool mpiNative(Channel& ch, const NativeCall& call, double premulFactor, const CollectiveOptions& opts);

// The stream channel's Communicator, for what runs only on host memory over
// the group's links; InvalidArgument naming `collective` and `algorithm` on a
// queued (device) channel.
Communicator& hostLinks(Channel& ch, const char* collective, const std::string& algorithm);

}  // namespace scalecomm
