// scalecomm comm: the mpi channel: host memory over MPI point-to-point
// messages, without staging copies.
//
// Contract: implements comm/channel.h over a communicator of its own (a
// duplicate of the group's MPI communicator, so nothing else matches its
// messages). Communicator::connectMesh makes one when every pair of the group
// is linked by mpi and mpi_zero_copy is on (the same answer on every rank);
// the group runs its collectives on it, and point-to-point calls on the
// stream channel (receive from any source peeks the links).
// - A message is its WireHeader (tag 1) and then its payload (tag 2, in
//   pieces of at most 1 GiB), sent straight from the segment's memory with
//   MPI_Isend. A receive posts the header's MPI_Irecv, checks the header when
//   it arrives (HeaderCheck on a mismatch: nothing was written), then posts
//   the payload's receive straight into the segment (overwrite) or into a
//   per-peer scratch buffer that the reducer then reduces into the segment.
// - send() and recv() return Partial when they post, None while MPI has not
//   finished, Done once it has (one message per peer and direction at a time:
//   the executor offers queue heads).
// - idle() looks for the close notices (a peer that failed, aborted or left)
//   of the peers a message is in flight with, on their mpi links; a notice
//   fails the call once it has been known for 50 ms (it travels on another
//   tag, so the peer's last message may land just after it). Then it waits
//   as Communicator::idle.
// - abandon() (a plan failed): cancels receives in flight and gives sends
//   200 ms; requests MPI does not give back are abandoned
//   (noteMpiRequestAbandoned: the call's owner keeps its buffers) and the
//   channel's own buffers they use are leaked on purpose.
// Without MPI at build time makeMpiChannel returns null.
// Thread safety: one thread at a time; every MPI call holds MpiCallGuard.
#pragma once

#include <memory>

#include "comm/channel.h"

namespace scalecomm {

class Communicator;
class MpiGroup;

// `group` is the channel's own communicator; `comm` supplies links (close
// notices) and idling.
std::unique_ptr<Channel> makeMpiChannel(Communicator& comm, std::shared_ptr<MpiGroup> group);

}  // namespace scalecomm
