// scalecomm comm: the stream channel: host memory over a Communicator's links.
//
// Contract: implements comm/channel.h (a host channel, comm/host_channel.h)
// for the links of one Communicator.
// send() writes the message's WireHeader, its payload and zero padding to a
// multiple of 64 bytes (comm/wire.h); messages up to 8 KiB go out as one copy
// through a per-peer buffer. recv() reads the header, hands it to the
// HeaderCheck unless it equals the expected one byte for byte, then copies
// the payload into place or reduces it straight out of the link's buffer with
// reducer() (fenced before Done), skipping the padding. Both return Partial
// while bytes move and None when the link has nothing to give or take. A
// message in flight per peer and direction is resumed on the next call with
// the same message, whose header is read on the first call only (the channel
// keeps a copy); start() forgets it. flush() has nothing to close. idle()
// is Communicator::idle. The reducer is the host reducer unless setReducer()
// gave another (tests, queuing reducers). takeCollectiveTraffic() says
// whether a collective's message (not point-to-point) was offered since it
// was last asked: a call on the shared windows then looks for messages a
// peer sent that this rank never received (algo/shared.cc). Owned by its Communicator
// (Communicator::channel()); one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/host_channel.h"

namespace scalecomm {

class StreamChannel final : public HostChannel {
 public:
  explicit StreamChannel(Communicator& comm);
  ~StreamChannel() override;
  Reducer& reducer() override { return *reducer_; }
  // nullptr: the host reducer.
  void setReducer(Reducer* r) { reducer_ = r != nullptr ? r : &hostReducer(); }

  void start() override;
  Progress send(const ChannelMessage& m) override;
  Progress recv(const ChannelMessage& m, const HeaderCheck& check) override;
  bool flush() override { return false; }
  void idle(const std::vector<int>& peers, Clock::time_point idleSince) override;

  bool takeCollectiveTraffic() {
    const bool had = collectiveTraffic_;
    collectiveTraffic_ = false;
    return had;
  }

  static constexpr size_t kSmallMessage = 8192;

 private:
  struct Outgoing {
    Outgoing() {}  // buf is not zeroed per peer (it is filled before it is read)
    uint64_t pos = 0;
    bool active = false;
    bool small = false;
    WireHeader hdr{};
    std::array<uint8_t, kSmallMessage> buf;
  };
  class Incoming;
  Reducer* reducer_;
  std::vector<Outgoing> out_;
  std::vector<std::unique_ptr<Incoming>> in_;
  bool collectiveTraffic_ = false;
};

}  // namespace scalecomm
