// scalecomm transport/nccl: one NCCL communicator and the CUDA stream it works on
// (builds with CUDA only).
//
// Contract: create() bootstraps through the Store (rank 0 makes the unique id
// and publishes it under `key`; the others read it), then initialises a
// nonblocking NCCL communicator on `device`, so that every wait, init
// included, ends at the deadline: on timeout the communicator is aborted
// (ncclCommAbort) and Error(Timeout) names what it waited for. Each
// communicator owns a nonblocking CUDA stream; everything scalecomm queues for
// the group goes on it, in issue order. check() turns an NCCL result into
// Error(Io) with NCCL's message; waitIssued() waits for a nonblocking call to
// leave ncclInProgress; waitEvent() polls an event and NCCL's async error.
// abort() may be called from any thread; everything else from one thread at a
// time (the group's worker). Destruction aborts if still needed, else destroys.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <string>

#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/store.h"

namespace scalecomm::cuda {

class NcclComm {
 public:
  static std::unique_ptr<NcclComm> create(Store& store, const std::string& key, int rank, int size, int device,
                                          const Deadline& deadline);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void check(ncclResult_t r, const char* what) const;
  void waitIssued(const Deadline& deadline, const char* what);
  // Returns once `event` has completed; Error(Timeout) (after aborting) at the deadline.
  void waitEvent(cudaEvent_t event, const Deadline& deadline, const char* what);
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  NcclComm(int rank, int size, int device) : rank_(rank), size_(size), device_(device) {}
  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> aborted_{false};
};

// NCCL's type for a scalecomm dtype; false for Int16 and Opaque (NCCL has
// none; they can still move as bytes).
bool ncclTypeOf(DataType t, ncclDataType_t* out);
// NCCL's op, or false where NCCL has none (bitwise ops): use a scalecomm schedule.
bool ncclOpOf(ReduceOp op, ncclRedOp_t* out);
void checkCuda(cudaError_t e, const char* what);

}  // namespace scalecomm::cuda
