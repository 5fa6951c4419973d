#include "torch/nccl_groups.h"

#include "core/error.h"
#include "torch/store_adapter.h"

#ifdef SCALECOMM_WITH_NCCL
#include "cuda/nccl_collectives.h"
#include "cuda/nccl_comm.h"
#endif

namespace scalecomm {

NcclGroups::NcclGroups(c10::intrusive_ptr<c10d::Store> store, std::string keyPrefix, int rank, int size)
    : store_(std::move(store)), keyPrefix_(std::move(keyPrefix)), rank_(rank), size_(size) {}

#ifdef SCALECOMM_WITH_NCCL

NcclGroups::~NcclGroups() = default;
bool NcclGroups::available() { return true; }

cuda::NcclComm& NcclGroups::forDevice(int device, const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = comms_.find(device);
    if (it != comms_.end()) {
      if (it->second->aborted())
        fail(ErrorKind::Aborted, "scalecomm (rank ", rank_, "): the NCCL communicator was aborted");
      return *it->second;
    }
  }
  C10dStoreAdapter store(store_);
  // Every rank makes its n-th communicator at its n-th first-use of a device.
  const std::string key = strCat(keyPrefix_, "/nccl/", comms_.size());
  auto comm = cuda::NcclComm::create(store, key, rank_, size_, device, deadline);
  std::lock_guard<std::mutex> g(mu_);
  return *comms_.emplace(device, std::move(comm)).first->second;
}

void NcclGroups::allreduce(DeviceCall& call, void* data, int64_t count, DataType dtype, ReduceOp op,
                           double premulFactor, const std::string& algorithm, const AlgoParams& params,
                           const Deadline& deadline) {
  cuda::NcclComm& comm = forDevice(call.device(), deadline);
  call.orderAfterInputs(comm.stream());
  if (algorithm == "nccl") {
    cuda::nativeAllreduce(comm, data, count, dtype, op, premulFactor, deadline);
  } else {
    cuda::stepsAllreduce(comm, data, count, dtype, op, premulFactor, algorithm, params, deadline);
  }
  call.markIssued(comm.stream());
  comm.waitEvent(static_cast<cudaEvent_t>(call.doneEvent()), deadline, "allreduce");
}

void NcclGroups::abort() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [device, comm] : comms_) comm->abort();
}

#else

namespace cuda {
class NcclComm {};  // never made without NCCL; complete so the map can be destroyed
}  // namespace cuda

NcclGroups::~NcclGroups() = default;
bool NcclGroups::available() { return false; }
cuda::NcclComm& NcclGroups::forDevice(int, const Deadline&) {
  fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank_, "): this build has no NCCL");
}
void NcclGroups::allreduce(DeviceCall&, void*, int64_t, DataType, ReduceOp, double, const std::string&,
                           const AlgoParams&, const Deadline&) {
  fail(ErrorKind::InvalidArgument, "scalecomm allreduce (rank ", rank_,
       "): this build has no NCCL; set SCALECOMM_CUDA_TRANSPORT=host or rebuild with the nvidia-nccl wheel");
}
void NcclGroups::abort() {}

#endif

}  // namespace scalecomm
