// scalecomm cuda: collectives on device memory over one NCCL communicator
// (builds with CUDA only).
//
// Contract: every function queues its work on comm.stream() and returns
// without waiting; the caller orders the stream after the inputs' producers
// and waits (NcclComm::waitEvent) before reporting completion. Arguments are
// validated by the caller. Errors of issue (NCCL or CUDA calls) raise Error(Io)
// and leave the communicator unusable (the caller poisons the group).
// - stepsAllreduce runs a scalecomm allreduce schedule (any registry entry,
//   algo/registry.h) with the step executor: each step one grouped
//   ncclSend/ncclRecv, then our reduction kernels, on the same stream.
// - nativeAllreduce calls NCCL's own allreduce (the `nccl` algorithm, the
//   baseline); it raises InvalidArgument for ops or types NCCL lacks (bitwise
//   ops, int16), naming what to choose instead.
// Thread safety: one call at a time per communicator.
#pragma once

#include <cstdint>
#include <string>

#include "algo/schedule.h"
#include "cuda/nccl_comm.h"

namespace scalecomm::cuda {

void stepsAllreduce(NcclComm& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                    const std::string& algorithm, const AlgoParams& params, const Deadline& deadline);

void nativeAllreduce(NcclComm& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                     const Deadline& deadline);

}  // namespace scalecomm::cuda
