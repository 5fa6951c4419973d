// scalecomm cuda: collectives on device memory over one NCCL communicator
// (builds with CUDA only).
//
// Contract: every function queues its work on comm.stream() and returns
// without waiting; the caller orders the stream after the inputs' producers
// and waits (NcclComm::waitEvent) before reporting completion. Arguments are
// validated by the caller. Errors of issue (NCCL or CUDA calls) raise Error(Io)
// and leave the communicator unusable (the caller poisons the group).
// - stepsAllreduce runs a scalecomm allreduce schedule (ring, rhd, tree,
//   direct, ps, hier) with the step executor: each step one grouped
//   ncclSend/ncclRecv, then our reduction kernels, on the same stream.
// - native* call NCCL's own collectives (the `nccl` algorithm, the baseline).
//   nativeAllreduce/nativeReduceScatter raise InvalidArgument for ops or types
//   NCCL lacks (bitwise ops, int16), naming what to choose instead.
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
void nativeBroadcast(NcclComm& comm, void* data, int64_t bytes, int root, const Deadline& deadline);
// output holds size x `bytes`; input is this rank's `bytes` (may alias its slot).
void nativeAllgather(NcclComm& comm, const void* input, void* output, int64_t bytes, const Deadline& deadline);
// input holds size x perRank elements; output receives this rank's reduced block.
void nativeReduceScatter(NcclComm& comm, const void* input, void* output, int64_t perRank, DataType dtype, ReduceOp op,
                         double premulFactor, const Deadline& deadline);

}  // namespace scalecomm::cuda
