// scalecomm torch adapter: the Work handle of one collective.
//
// Contract: created by the backend when a collective is queued (its profiling
// title, "scalecomm:<collective>[:<algorithm>]", spans queueing to completion
// in torch.profiler traces); completed
// exactly once by the group (finish or finishError) on the thread that ran
// the call, which also completes the Future (List[Tensor] of the outputs)
// that DDP comm hooks chain on (made on first getFuture()). wait() blocks until completion; for a collective on the GPU
// (one with a DeviceCall) it blocks only until the worker has queued the work, then makes the caller's current stream
// wait for it (PyTorch's NCCL semantics; a failure after that poisons the group and shows on the next call). With a
// timeout, expiry poisons the group
// (aborting the running collective on this rank, which its peers then see) and
// raises "Timed out". All methods are thread safe.
#pragma once

#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/label.h"
#include "group/group_state.h"
#include "torch/device_call.h"

namespace scalecomm {

class ScalecommWork : public c10d::Work {
 public:
  ScalecommWork(int rank, c10d::OpType type, Label collective, uint64_t seq, std::vector<at::Tensor> outputs,
                std::shared_ptr<GroupState> group);

  void finish();
  void finishError(std::exception_ptr error);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_.load(); }
  // The group numbers the call after the Work exists (torch/backend.cc run()).
  void setSequence(uint64_t seq) { seq_.store(seq); }
  const std::string& collective() const { return collective_.str(); }
  // Receive from any source: the rank the message came from, which the
  // worker stores in `source` before it completes the Work.
  int sourceRank() const override;
  void setSourceProvider(std::shared_ptr<std::atomic<int>> source) { source_ = std::move(source); }
  void setDeviceCall(std::shared_ptr<DeviceCall> call) { call_ = std::move(call); }
  const std::shared_ptr<DeviceCall>& deviceCall() const { return call_; }
  // A call that already succeeded when its Work is returned: the Work keeps
  // its outputs by weak reference only (result() and the Future still return
  // them while the caller holds them). Dropping the last C++ reference to a
  // tensor that Python owns takes the GIL; this way the caller's frame, not
  // the Work's destructor, drops it. A failed call keeps them: an abandoned
  // MPI request may still write into them. Before the Work is shared, on the caller.
  void holdOutputsWeaklyIfSucceeded();
  void abort() override;

 private:
  void endProfilingRange();
  void completeFuture(const c10::intrusive_ptr<c10::ivalue::Future>& f);
  Label collective_;
  std::atomic<uint64_t> seq_;
  std::vector<at::Tensor> outputs_;
  c10::SmallVector<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>, 1> weakOutputs_;
  bool weak_ = false;
  std::vector<at::Tensor> outputs() const;
  std::shared_ptr<GroupState> group_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made on first getFuture()
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};  // read without the lock by isCompleted()
  std::exception_ptr error_;
  std::shared_ptr<std::atomic<int>> source_;
  std::shared_ptr<DeviceCall> call_;
};

}  // namespace scalecomm
