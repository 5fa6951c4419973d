#include "comm/host_channel.h"

#include <atomic>
#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"

namespace scalecomm {

int HostChannel::rank() const { return comm_.rank(); }
int HostChannel::size() const { return comm_.size(); }
const std::vector<int>& HostChannel::hostOf() const { return comm_.hostOf(); }

bool HostChannel::peerNext(int peer, WireHeader* next) {
  if (!comm_.hasLink(peer)) return false;
  try {
    return comm_.link(peer).peek(next, sizeof(*next)) == sizeof(*next);
  } catch (const Error&) {
    return false;
  }
}

bool HostChannel::peerOnWindow(int peer, WireHeader* posted) {
  ShmWindows* w = comm_.windows();
  if (w == nullptr) return false;
  const uint64_t call = w->posted(peer).load(std::memory_order_acquire);
  if (call == 0) return false;
  std::memcpy(posted, w->header(peer, call), sizeof(*posted));
  return true;
}

}  // namespace scalecomm
