// scalecomm comm/nccl: the queued channel of NCCL (builds with CUDA and
// NCCL only).
//
// Contract: implements comm/queued_channel.h over one NcclComm (owned): a
// group is ncclGroupStart, one ncclSend/ncclRecv of bytes per message,
// ncclGroupEnd, on the communicator's stream; the reducer is the CUDA
// reducer on that stream; scratch is cudaMallocAsync / cudaFreeAsync on it.
// Every nonblocking NCCL call is waited for until the deadline set by
// setDeadline() (the call's), after which the communicator is aborted and
// Error(Timeout) raised. native() is NCCL's own allreduce, broadcast,
// reduce, allgather and reduce-scatter (hasNative: ncclNativeTakes). Thread safety: one collective at a time; abort()
// from any thread.
#pragma once

#include <memory>

#include "comm/cuda/cuda_reducer.h"
#include "comm/queued_channel.h"
#include "transport/nccl/nccl_comm.h"

namespace scalecomm::cuda {

class NcclChannel final : public QueuedChannel {
 public:
  explicit NcclChannel(std::unique_ptr<NcclComm> comm);
  ~NcclChannel() override;
  NcclComm& comm() { return *comm_; }
  void setDeadline(const Deadline& d) { deadline_ = d; }

  Reducer& reducer() override { return reducer_; }
  void* stream() const override { return comm_->stream(); }
  void waitEvent(void* event, const Deadline& deadline, const char* what) override;
  bool hasNative(CollectiveKind kind, DataType dtype, ReduceOp op) const override;
  void native(const NativeCall& call) override;
  void abort() override { comm_->abort(); }

 protected:
  void issueGroup(const std::vector<QueuedOp>& ops) override;
  void* allocScratch(int64_t bytes) override;
  void freeScratch(void* p) override;

 private:
  std::unique_ptr<NcclComm> comm_;
  CudaReducer reducer_;
  Deadline deadline_ = Deadline::never();
};

}  // namespace scalecomm::cuda
