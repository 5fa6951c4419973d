// scalecomm comm: MPI's own collectives on a Communicator's MPI group (what
// the `mpi` algorithm runs, algo/native.h).
//
// Contract: each function runs one collective with the MPI library's
// implementation (MPI_Iallreduce, MPI_Ibcast, ...) on the group's MPI
// communicator (Communicator::mpiGroup()), as a baseline selectable like any
// of our algorithms. Semantics are those of the same-named functions in
// algo/collectives.h (in place; AVG divides by the world size; PREMUL_SUM
// scales by premulFactor before summing; fp16/bf16 reduce
// through our reducer as an MPI user op, accumulating pairwise). The calls are
// nonblocking underneath, so limits.deadline and abort() bound every wait; a
// timed-out MPI operation is abandoned (MPI cannot cancel collectives) and the
// caller poisons the group. Errors: InvalidArgument when the group has no MPI
// communicator (ranks not started by mpirun, or a build without MPI) or a
// count does not fit MPI's int; Timeout; Io for MPI errors.
// Thread safety: one collective at a time per Communicator (the worker).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

// What bounds one call: its number (named in errors) and its deadline.
struct MpiCallLimits {
  uint64_t seq = 0;
  Deadline deadline = Deadline::never();
  int64_t timeoutMs = 0;
};

void mpiAllreduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                  const MpiCallLimits& limits);
void mpiBroadcast(Communicator& comm, void* data, int64_t count, DataType dtype, int root, const MpiCallLimits& limits);
void mpiReduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
               int root, const MpiCallLimits& limits);
// outputs[r]: rank r's block; outputs[rank] already holds this rank's data.
void mpiAllgather(Communicator& comm, const std::vector<void*>& outputs, int64_t count, DataType dtype,
                  const MpiCallLimits& limits);
// As reduceScatter(): `work` holds n blocks of perRank; block `rank` ends reduced.
void mpiReduceScatter(Communicator& comm, void* work, int64_t perRank, DataType dtype, ReduceOp op, double premulFactor,
                      const MpiCallLimits& limits);
void mpiBarrier(Communicator& comm, const MpiCallLimits& limits);

}  // namespace scalecomm
