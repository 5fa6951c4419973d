// scalecomm torch adapter: a group's NCCL channels, one per CUDA device, made
// on the first CUDA collective that needs one.
//
// Contract: available() says whether this build has NCCL. channel(device,
// deadline) returns the device's queued channel (comm/nccl), first
// bootstrapping its communicator through the c10d Store, collectively: every
// rank makes its n-th channel at its n-th first use of a device, so every rank
// must issue its CUDA collectives in the same order (as with any collective).
// The channel's waits end at `deadline` (the call's). The Group runs every
// CUDA collective on it (Group::setDeviceChannels). abort() (any thread)
// aborts every communicator. Without NCCL, channel() raises
// Error(InvalidArgument) saying so.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "comm/queued_channel.h"
#include "core/deadline.h"

namespace scalecomm {

class NcclGroups {
 public:
  NcclGroups(c10::intrusive_ptr<c10d::Store> store, std::string keyPrefix, int rank, int size);
  ~NcclGroups();
  static bool available();

  QueuedChannel& channel(int device, const Deadline& deadline);
  void abort();

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string keyPrefix_;
  int rank_, size_;
  std::mutex mu_;  // guards channels_ against abort() from other threads
  std::map<int, std::unique_ptr<QueuedChannel>> channels_;
};

}  // namespace scalecomm
