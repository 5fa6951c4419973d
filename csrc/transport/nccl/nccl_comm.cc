#include "transport/nccl/nccl_comm.h"

#include <sched.h>

#include <cstring>

#include "core/error.h"

namespace scalecomm::cuda {

void checkCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(ErrorKind::Io, "scalecomm: ", what, " failed: ", cudaGetErrorString(e));
}

void NcclComm::check(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess || r == ncclInProgress) return;
  fail(ErrorKind::Io, "scalecomm (rank ", rank_, "): ", what, " failed: ", ncclGetErrorString(r), " (",
       comm_ ? ncclGetLastError(comm_) : "", ")");
}

std::unique_ptr<NcclComm> NcclComm::create(Store& store, const std::string& key, int rank, int size, int device,
                                           const Deadline& deadline) {
  std::unique_ptr<NcclComm> c(new NcclComm(rank, size, device));
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) {
    c->check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string v = store.get(key, deadline);
    if (v.size() != sizeof(id)) fail(ErrorKind::Io, "scalecomm: NCCL unique id under '", key, "' has a wrong size");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait polls, so a missing peer ends at the deadline
  c->check(ncclCommInitRankConfig(&c->comm_, size, id, rank, &config), "ncclCommInitRankConfig");
  c->waitIssued(deadline, "NCCL communicator initialisation (are all ranks on distinct GPUs?)");
  checkCuda(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  return c;
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) {
    if (aborted_.load()) {
      // ncclCommAbort already released it.
    } else {
      ncclCommDestroy(comm_);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclComm::waitIssued(const Deadline& deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check(state, what);
    if (deadline.expired()) {
      abort();
      fail(ErrorKind::Timeout, "scalecomm (rank ", rank_, "): timed out in ", what,
           "; the NCCL communicator was aborted");
    }
    sched_yield();
  }
}

void NcclComm::waitEvent(cudaEvent_t event, const Deadline& deadline, const char* what) {
  for (;;) {
    const cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) checkCuda(q, what);
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) check(state, what);
    if (aborted_.load()) fail(ErrorKind::Aborted, "scalecomm (rank ", rank_, "): ", what, ": the group was aborted");
    if (deadline.expired()) {
      abort();
      fail(ErrorKind::Timeout, "scalecomm (rank ", rank_, "): ", what,
           " did not complete on the GPU before the timeout (a peer is dead, slow or called a different "
           "collective); the NCCL communicator was aborted");
    }
    sched_yield();
  }
}

void NcclComm::abort() {
  if (comm_ != nullptr && !aborted_.exchange(true)) ncclCommAbort(comm_);
}

bool ncclTypeOf(DataType t, ncclDataType_t* out) {
  switch (t) {
    case DataType::Float32: *out = ncclFloat32; return true;
    case DataType::Float64: *out = ncclFloat64; return true;
    case DataType::Float16: *out = ncclFloat16; return true;
    case DataType::BFloat16: *out = ncclBfloat16; return true;
    case DataType::Int8: *out = ncclInt8; return true;
    case DataType::Int32: *out = ncclInt32; return true;
    case DataType::Int64: *out = ncclInt64; return true;
    case DataType::UInt8: *out = ncclUint8; return true;
    default: return false;
  }
}

bool ncclOpOf(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::PremulSum: *out = ncclSum; return true;  // premultiplied by a scale kernel first
    case ReduceOp::Avg: *out = ncclAvg; return true;
    case ReduceOp::Product: *out = ncclProd; return true;
    case ReduceOp::Min: *out = ncclMin; return true;
    case ReduceOp::Max: *out = ncclMax; return true;
    default: return false;
  }
}

}  // namespace scalecomm::cuda
