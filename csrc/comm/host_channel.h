// scalecomm comm: host channels: channels on host memory over one
// Communicator's links (the stream channel, comm/stream_channel.h; the mpi
// channel, comm/mpi_channel.h).
//
// Contract: rank, size and hosts are the Communicator's; communicator() is
// it. peerNext() peeks the peer's link for a whole header (a message's, or
// a leave notice: comm/wire.h); a closed or failed link, or a partial
// header, reads as none. peerOnWindow() reads the header of the last call the peer posted
// on its shared window (transport/shm.h); false without windows or before the
// peer's first post. Both only read: nothing is consumed. The Communicator
// outlives the channel. Thread safety: the channel's (one collective at a time).
#pragma once

#include <vector>

#include "comm/channel.h"

namespace scalecomm {

class HostChannel : public Channel {
 public:
  explicit HostChannel(Communicator& comm) : comm_(comm) {}
  int rank() const override;
  int size() const override;
  const std::vector<int>& hostOf() const override;
  Communicator* communicator() override { return &comm_; }
  bool peerNext(int peer, WireHeader* next) override;
  bool peerOnWindow(int peer, WireHeader* posted) override;

 protected:
  Communicator& comm_;
};

}  // namespace scalecomm
