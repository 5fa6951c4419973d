// scalecomm algo: the `mpi` passthrough algorithm: MPI's own collectives.
//
// Contract: each function runs one collective with the MPI library's
// implementation (MPI_Iallreduce, MPI_Ibcast, ...) on the group's MPI
// communicator (Communicator::mpiGroup()), as a baseline selectable like any
// of our algorithms. Semantics are those of the same-named functions in
// algo/collectives.h (in place, AVG and PREMUL_SUM as there; fp16/bf16 reduce
// through our reducer as an MPI user op, accumulating pairwise). The calls are
// nonblocking underneath, so opts.deadline and abort() bound every wait; a
// timed-out MPI operation is abandoned (MPI cannot cancel collectives) and the
// caller poisons the group. Errors: InvalidArgument when the group has no MPI
// communicator (ranks not started by mpirun, or a build without MPI) or a
// count does not fit MPI's int; Timeout; Io for MPI errors.
// Thread safety: one collective at a time per Communicator (the worker).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algo/collectives.h"
#include "comm/communicator.h"

namespace scalecomm {

void mpiAllreduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                  const CollectiveOptions& opts);
void mpiBroadcast(Communicator& comm, void* data, int64_t count, DataType dtype, int root,
                  const CollectiveOptions& opts);
void mpiReduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
               int root, const CollectiveOptions& opts);
// outputs[r]: rank r's block; outputs[rank] already holds this rank's data.
void mpiAllgather(Communicator& comm, const std::vector<void*>& outputs, int64_t count, DataType dtype,
                  const CollectiveOptions& opts);
// As reduceScatter(): `work` holds n blocks of perRank; block `rank` ends reduced.
void mpiReduceScatter(Communicator& comm, void* work, int64_t perRank, DataType dtype, ReduceOp op, double premulFactor,
                      const CollectiveOptions& opts);
void mpiBarrier(Communicator& comm, const CollectiveOptions& opts);

}  // namespace scalecomm
