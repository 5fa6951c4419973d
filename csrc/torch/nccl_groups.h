// scalecomm torch adapter: a group's NCCL communicators (one per CUDA device,
// made on the first CUDA collective that needs one) and the collectives that
// run on them.
//
// Contract: available() says whether this build has NCCL. Each collective
// runs on the worker thread: it orders the communicator's stream after the
// caller's (DeviceCall::orderAfterInputs), queues the work (a scalecomm
// schedule over NCCL send/recv, or NCCL's own collective for algorithm
// "nccl"), marks the DeviceCall issued, and waits for completion until the
// deadline (on timeout the communicator is aborted). The first use of a device
// bootstraps its communicator through the c10d Store, collectively, so every
// rank must issue its CUDA collectives in the same order (as with any
// collective). abort() (any thread) aborts every communicator. Without NCCL,
// every collective raises Error(InvalidArgument) saying so.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "algo/schedule.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "torch/device_call.h"

namespace scalecomm {

namespace cuda {
class NcclComm;
}

class NcclGroups {
 public:
  NcclGroups(c10::intrusive_ptr<c10d::Store> store, std::string keyPrefix, int rank, int size);
  ~NcclGroups();
  static bool available();

  void allreduce(DeviceCall& call, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                 const std::string& algorithm, const AlgoParams& params, const Deadline& deadline);
  void abort();

 private:
  cuda::NcclComm& forDevice(int device, const Deadline& deadline);
  c10::intrusive_ptr<c10d::Store> store_;
  std::string keyPrefix_;
  int rank_, size_;
  std::mutex mu_;  // guards comms_ against abort() from other threads
  std::map<int, std::unique_ptr<cuda::NcclComm>> comms_;
};

}  // namespace scalecomm
