// scalecomm comm: a Channel is how the one executor (algo/executor.h) moves a
// plan's messages, whatever memory and transport they live on.
//
// Contract: the executor offers each ready task's message to send() or recv()
// and reads the Progress back:
//   None     nothing moved; offer the same message again later;
//   Partial  some bytes moved (stream channel); offer it again;
//   Issued   queued into the channel's open group; it counts as done once
//            flush() has closed that group (queued channel);
//   Done     finished as far as any later task can tell.
// When nothing moves the executor calls flush(); if that closed no group, it
// calls idle(), which may throw Error(Aborted). When a plan fails the executor
// calls abandon(): messages still in flight are dropped (the plan's memory
// must not be written after the caller sees the error, or is kept). Three
// kinds exist:
// - the stream channel (comm/stream_channel.h): host memory over the
//   Communicator's links; every message carries a WireHeader that the
//   receiver checks (HeaderCheck reports a mismatch); receive-reduce reduces
//   straight out of the link's buffer; flush() never has a group;
// - the mpi channel (comm/mpi_channel.h): host memory over MPI requests
//   posted on the segments themselves, completion tested per message;
// - queued channels (comm/queued_channel.h): device memory over NCCL, or its
//   CPU emulation; messages are issued in groups, reductions are queued on the
//   same queue, nothing is executed by the host, and completion is by event.
// reducer() does the channel's arithmetic (on its memory, in its order).
// What a peer said outside the plan's messages is the channel's to read:
// peerNext() (the header next on its link: its leave notice, or its next
// message) and peerOnWindow() (the header of the last collective it posted
// on its shared window); both are false where the channel has neither
// (queued channels).
// communicator() is a host channel's Communicator (comm/host_channel.h), for
// the algorithms that run on the links or windows themselves (shared
// windows, MPI passthrough, receive from any source); null for a queued
// channel. queuedChannel() is the channel as a queued one (its groups and
// native collectives), null for a host channel.
// Thread safety: one collective at a time per channel.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/reducer.h"
#include "comm/wire.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace scalecomm {

class Communicator;
class QueuedChannel;

// One task's message as a channel sees it.
struct ChannelMessage {
  int peer;
  uint8_t* data;  // the segment's memory
  int64_t count;  // elements of dtype (bytes for Opaque)
  DataType dtype;
  ReduceOp op;  // receives: reduce into data with op; None: overwrite
  // Stream channel: sent, or expected; read on a message's first offer only
  // (a resumed message keeps its own copy). Queued channels ignore it.
  const WireHeader* header;
};

// Raises the error for a received header that differs from the expected one.
class HeaderCheck {
 public:
  [[noreturn]] virtual void mismatch(int peer, const WireHeader& got, const WireHeader& want) const = 0;

 protected:
  ~HeaderCheck() = default;
};

class Channel {
 public:
  enum class Progress : uint8_t { None, Partial, Issued, Done };

  virtual ~Channel() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Host index of every rank (hierarchical schedules); all zeros on one host.
  virtual const std::vector<int>& hostOf() const = 0;
  virtual Reducer& reducer() = 0;
  virtual Communicator* communicator() { return nullptr; }
  virtual QueuedChannel* queuedChannel() { return nullptr; }
  bool queued() { return queuedChannel() != nullptr; }
  // True with the header in *next when a whole header is next on peer's link
  // (its leave notice, or the next message it sent this rank); nothing is consumed.
  virtual bool peerNext(int peer, WireHeader* next) { return false; }
  // True with the header in *posted when peer has posted a collective on its shared window.
  virtual bool peerOnWindow(int peer, WireHeader* posted) { return false; }

  // A plan starts: forget any per-peer progress of an earlier (failed) one.
  virtual void start() = 0;
  virtual Progress send(const ChannelMessage& m) = 0;
  virtual Progress recv(const ChannelMessage& m, const HeaderCheck& check) = 0;
  // Closes the open group, if any, and queues its reductions; true if it did.
  virtual bool flush() = 0;
  // Nothing moved and nothing was left to flush: wait briefly for peers.
  virtual void idle(const std::vector<int>& peers, Clock::time_point idleSince) = 0;
  // A plan failed: drop what is in flight (called before the error propagates).
  virtual void abandon() {}
};

}  // namespace scalecomm
