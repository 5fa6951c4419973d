#include "torch/nccl_groups.h"

#include "core/error.h"
#include "torch/store_adapter.h"

#ifdef SCALECOMM_WITH_NCCL
#include "comm/nccl/nccl_channel.h"
#endif

namespace scalecomm {

NcclGroups::NcclGroups(c10::intrusive_ptr<c10d::Store> store, std::string keyPrefix, int rank, int size)
    : store_(std::move(store)), keyPrefix_(std::move(keyPrefix)), rank_(rank), size_(size) {}

NcclGroups::~NcclGroups() = default;

void NcclGroups::abort() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [device, ch] : channels_) ch->abort();
}

#ifdef SCALECOMM_WITH_NCCL

bool NcclGroups::available() { return true; }

QueuedChannel& NcclGroups::channel(int device, const Deadline& deadline) {
  cuda::NcclChannel* ch = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = channels_.find(device);
    if (it != channels_.end()) ch = static_cast<cuda::NcclChannel*>(it->second.get());
  }
  if (ch == nullptr) {
    C10dStoreAdapter store(store_);
    // Every rank makes its n-th communicator at its n-th first use of a device.
    const std::string key = strCat(keyPrefix_, "/nccl/", channels_.size());
    auto made = std::make_unique<cuda::NcclChannel>(cuda::NcclComm::create(store, key, rank_, size_, device, deadline));
    ch = made.get();
    std::lock_guard<std::mutex> g(mu_);
    channels_.emplace(device, std::move(made));
  }
  if (ch->comm().aborted()) fail(ErrorKind::Aborted, "scalecomm (rank ", rank_, "): the NCCL communicator was aborted");
  ch->setDeadline(deadline);
  return *ch;
}

#else

bool NcclGroups::available() { return false; }

QueuedChannel& NcclGroups::channel(int, const Deadline&) {
  fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank_,
       "): this build has no NCCL; set SCALECOMM_CUDA_TRANSPORT=host or rebuild with the nvidia-nccl wheel");
}

#endif

}  // namespace scalecomm
