#include "comm/mpi_collectives.h"

#include <sched.h>

#include <climits>
#include <cstring>

#include "comm/reducer.h"
#include "core/error.h"

#ifdef SCALECOMM_WITH_MPI
#include "transport/mpi_detail.h"
#endif

namespace scalecomm {

namespace {

const MpiGroup& groupOf(Communicator& comm, const char* collective, const MpiCallLimits& limits) {
  if (!comm.mpiGroup()) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", collective, " (rank ", comm.rank(), ", seq ", limits.seq,
         "): algorithm mpi needs an MPI communicator: ",
         mpiCompiledIn() ? "start every rank with one mpirun/mpiexec (or srun with MPI), and leave SCALECOMM_MPI on"
                         : "this build has no MPI (install libopenmpi-dev and rebuild)");
  }
  return *comm.mpiGroup();
}

int checkedInt(int64_t count, const char* collective, int rank) {
  if (count > INT_MAX) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", collective, " (rank ", rank, "): ", count,
         " elements exceed what MPI's int counts hold; use one of scalecomm's own algorithms (e.g. ring)");
  }
  return static_cast<int>(count);
}

}  // namespace

#ifdef SCALECOMM_WITH_MPI

namespace {

constexpr int64_t kPieceElems = int64_t{1} << 30;  // MPI counts are ints: larger calls go in pieces

template <DataType D, ReduceOp O>
void userReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduceInto(inout, in, *len, D, O);
}

MPI_Datatype halfType() {
  static MPI_Datatype t = [] {
    MPI_Datatype x;
    MPI_Type_contiguous(2, MPI_BYTE, &x);
    MPI_Type_commit(&x);
    return x;
  }();
  return t;
}

template <DataType D>
MPI_Op halfOp(ReduceOp op) {
  static const MPI_Op ops[4] = {
      [] {
        MPI_Op o;
        MPI_Op_create(&userReduce<D, ReduceOp::Sum>, 1, &o);
        return o;
      }(),
      [] {
        MPI_Op o;
        MPI_Op_create(&userReduce<D, ReduceOp::Min>, 1, &o);
        return o;
      }(),
      [] {
        MPI_Op o;
        MPI_Op_create(&userReduce<D, ReduceOp::Max>, 1, &o);
        return o;
      }(),
      [] {
        MPI_Op o;
        MPI_Op_create(&userReduce<D, ReduceOp::Product>, 1, &o);
        return o;
      }(),
  };
  switch (op) {
    case ReduceOp::Min: return ops[1];
    case ReduceOp::Max: return ops[2];
    case ReduceOp::Product: return ops[3];
    default: return ops[0];
  }
}

MPI_Datatype mpiType(DataType t) {
  switch (t) {
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Float16:
    case DataType::BFloat16: return halfType();
    case DataType::Int8: return MPI_INT8_T;
    case DataType::Int16: return MPI_INT16_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Int64: return MPI_INT64_T;
    case DataType::UInt8: return MPI_UINT8_T;
    case DataType::Opaque: return MPI_BYTE;
  }
  return MPI_BYTE;
}

MPI_Op mpiOp(ReduceOp op, DataType t) {
  if (t == DataType::Float16) return halfOp<DataType::Float16>(op);
  if (t == DataType::BFloat16) return halfOp<DataType::BFloat16>(op);
  switch (op) {
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Product: return MPI_PROD;
    case ReduceOp::BAnd: return MPI_BAND;
    case ReduceOp::BOr: return MPI_BOR;
    case ReduceOp::BXor: return MPI_BXOR;
    default: return MPI_SUM;  // Sum, Avg (divided after), PremulSum (scaled before)
  }
}

// Waits for a nonblocking MPI collective within limits.deadline. MPI progresses
// its nonblocking collectives (Open MPI's libnbc) only inside MPI calls, so
// this polls MPI_Test without sleeping (yielding the core between polls), as
// MPI's own blocking calls do.
void finish(Communicator& comm, MPI_Request& req, const char* collective, const MpiCallLimits& limits) {
  for (;;) {
    int done = 0;
    {
      MpiCallGuard guard;
      mpiCheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
    if (done) return;
    if (limits.deadline.expired()) {
      noteMpiRequestAbandoned();  // MPI may still write into the buffers: their owner keeps them
      fail(ErrorKind::Timeout, "scalecomm ", collective, ":mpi (rank ", comm.rank(), ", seq ", limits.seq,
           "): MPI's collective did not complete within the timeout (", limits.timeoutMs,
           " ms); a rank did not call it or is stuck. The MPI operation is abandoned (its buffers stay "
           "allocated until the process exits).");
    }
    if (comm.aborted()) {
      noteMpiRequestAbandoned();
      fail(ErrorKind::Aborted, "scalecomm ", collective, ":mpi (rank ", comm.rank(), "): aborted");
    }
    sched_yield();
  }
}

template <typename Start>
void run(Communicator& comm, const char* collective, const MpiCallLimits& limits, Start start) {
  MPI_Request req = MPI_REQUEST_NULL;
  {
    MpiCallGuard guard;
    mpiCheck(start(&req), collective);
  }
  finish(comm, req, collective, limits);
}

}  // namespace

void mpiAllreduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                  const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "allreduce", limits));
  if (op == ReduceOp::PremulSum) scaleInPlace(data, count, dtype, premulFactor);
  const size_t es = elementSize(dtype);
  for (int64_t off = 0; off < count; off += kPieceElems) {
    const int n = static_cast<int>(std::min(kPieceElems, count - off));
    void* p = static_cast<uint8_t*>(data) + off * es;
    run(comm, "allreduce", limits,
        [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, p, n, mpiType(dtype), mpiOp(op, dtype), c, r); });
  }
  if (op == ReduceOp::Avg) divideInPlace(data, count, dtype, comm.size());
}

void mpiBroadcast(Communicator& comm, void* data, int64_t count, DataType dtype, int root,
                  const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "broadcast", limits));
  const size_t es = elementSize(dtype);
  for (int64_t off = 0; off < count; off += kPieceElems) {
    const int n = static_cast<int>(std::min(kPieceElems, count - off));
    void* p = static_cast<uint8_t*>(data) + off * es;
    run(comm, "broadcast", limits, [&](MPI_Request* r) { return MPI_Ibcast(p, n, mpiType(dtype), root, c, r); });
  }
}

void mpiReduce(Communicator& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
               int root, const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "reduce", limits));
  if (op == ReduceOp::PremulSum) scaleInPlace(data, count, dtype, premulFactor);
  const size_t es = elementSize(dtype);
  const bool atRoot = comm.rank() == root;
  for (int64_t off = 0; off < count; off += kPieceElems) {
    const int n = static_cast<int>(std::min(kPieceElems, count - off));
    void* p = static_cast<uint8_t*>(data) + off * es;
    run(comm, "reduce", limits, [&](MPI_Request* r) {
      return MPI_Ireduce(atRoot ? MPI_IN_PLACE : p, atRoot ? p : nullptr, n, mpiType(dtype), mpiOp(op, dtype), root, c,
                         r);
    });
  }
  if (atRoot && op == ReduceOp::Avg) divideInPlace(data, count, dtype, comm.size());
}

void mpiAllgather(Communicator& comm, const std::vector<void*>& outputs, int64_t count, DataType dtype,
                  const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "allgather", limits));
  const int n = checkedInt(count, "allgather", comm.rank());
  const size_t bytes = static_cast<size_t>(count) * elementSize(dtype);
  bool contiguous = true;
  for (size_t r = 0; r < outputs.size(); ++r) {
    contiguous = contiguous && static_cast<uint8_t*>(outputs[r]) == static_cast<uint8_t*>(outputs[0]) + r * bytes;
  }
  std::vector<uint8_t> staging;
  uint8_t* out = static_cast<uint8_t*>(outputs[0]);
  if (!contiguous) {
    staging.resize(bytes * outputs.size());
    out = staging.data();
    std::memcpy(out + comm.rank() * bytes, outputs[comm.rank()], bytes);
  }
  run(comm, "allgather", limits,
      [&](MPI_Request* r) { return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, n, mpiType(dtype), c, r); });
  if (!contiguous) {
    for (size_t r = 0; r < outputs.size(); ++r) std::memcpy(outputs[r], out + r * bytes, bytes);
  }
}

void mpiReduceScatter(Communicator& comm, void* work, int64_t perRank, DataType dtype, ReduceOp op, double premulFactor,
                      const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "reduce_scatter", limits));
  const int n = checkedInt(perRank, "reduce_scatter", comm.rank());
  const int64_t total = perRank * comm.size();
  if (op == ReduceOp::PremulSum) scaleInPlace(work, total, dtype, premulFactor);
  // The result lands at the start of `work`; move it to block `rank`.
  run(comm, "reduce_scatter", limits, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(MPI_IN_PLACE, work, n, mpiType(dtype), mpiOp(op, dtype), c, r);
  });
  const size_t bytes = static_cast<size_t>(perRank) * elementSize(dtype);
  auto* base = static_cast<uint8_t*>(work);
  if (comm.rank() != 0) std::memcpy(base + comm.rank() * bytes, base, bytes);
  if (op == ReduceOp::Avg) divideInPlace(base + comm.rank() * bytes, perRank, dtype, comm.size());
}

void mpiBarrier(Communicator& comm, const MpiCallLimits& limits) {
  MPI_Comm c = mpiComm(groupOf(comm, "barrier", limits));
  run(comm, "barrier", limits, [&](MPI_Request* r) { return MPI_Ibarrier(c, r); });
}

#else  // !SCALECOMM_WITH_MPI: every call explains how to get MPI

void mpiAllreduce(Communicator& comm, void*, int64_t, DataType, ReduceOp, double, const MpiCallLimits& limits) {
  groupOf(comm, "allreduce", limits);
}
void mpiBroadcast(Communicator& comm, void*, int64_t, DataType, int, const MpiCallLimits& limits) {
  groupOf(comm, "broadcast", limits);
}
void mpiReduce(Communicator& comm, void*, int64_t, DataType, ReduceOp, double, int, const MpiCallLimits& limits) {
  groupOf(comm, "reduce", limits);
}
void mpiAllgather(Communicator& comm, const std::vector<void*>&, int64_t count, DataType, const MpiCallLimits& limits) {
  checkedInt(count, "allgather", comm.rank());
  groupOf(comm, "allgather", limits);
}
void mpiReduceScatter(Communicator& comm, void*, int64_t, DataType, ReduceOp, double, const MpiCallLimits& limits) {
  groupOf(comm, "reduce_scatter", limits);
}
void mpiBarrier(Communicator& comm, const MpiCallLimits& limits) { groupOf(comm, "barrier", limits); }

#endif

}  // namespace scalecomm
