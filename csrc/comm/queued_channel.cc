#include "comm/queued_channel.h"

#include "core/error.h"

namespace scalecomm {

void QueuedChannel::start() {
  open_.clear();
  scratchOps_.clear();
  reductions_.clear();
  scratchUsed_ = 0;
}

Channel::Progress QueuedChannel::send(const ChannelMessage& m) {
  open_.push_back({true, m.peer, m.data, m.count * static_cast<int64_t>(elementSize(m.dtype))});
  return Progress::Issued;
}

Channel::Progress QueuedChannel::recv(const ChannelMessage& m, const HeaderCheck&) {
  const int64_t bytes = m.count * static_cast<int64_t>(elementSize(m.dtype));
  if (m.op == ReduceOp::None) {
    open_.push_back({false, m.peer, m.data, bytes});
    return Progress::Issued;
  }
  // Received into scratch; reduced into place once the group is issued.
  scratchOps_.push_back(open_.size());
  open_.push_back({false, m.peer, reinterpret_cast<void*>(static_cast<intptr_t>(scratchUsed_)), bytes});
  reductions_.push_back({m.data, scratchUsed_, m.count, m.dtype, m.op});
  scratchUsed_ += (bytes + 255) / 256 * 256;  // kernels like aligned operands
  return Progress::Issued;
}

bool QueuedChannel::flush() {
  if (open_.empty()) return false;
  if (scratchUsed_ > scratchBytes_) {
    releaseScratch();
    scratch_ = static_cast<uint8_t*>(allocScratch(scratchUsed_));
    scratchBytes_ = scratchUsed_;
  }
  for (size_t i : scratchOps_) open_[i].data = scratch_ + reinterpret_cast<intptr_t>(open_[i].data);
  issueGroup(open_);
  Reducer& r = reducer();
  for (const PendingReduce& p : reductions_) r.reduce(p.dst, scratch_ + p.offset, p.count, p.dtype, p.op);
  start();
  return true;
}

void QueuedChannel::idle(const std::vector<int>&, Clock::time_point) {
  // A queued channel issues whatever is ready; a plan that stops with nothing
  // to issue has a dependency no group can satisfy.
  fail(ErrorKind::Internal, "scalecomm queued channel (rank ", rank_,
       "): the plan stalled with nothing left to issue (a bug in its dependencies)");
}

void QueuedChannel::native(const NativeCall& call) {
  fail(ErrorKind::InvalidArgument, "scalecomm ", collectiveName(call.kind), " (rank ", rank_,
       "): this channel has no native collectives; choose a scalecomm algorithm (ring, rhd, ...)");
}

void QueuedChannel::releaseScratch() {
  if (scratch_ != nullptr) freeScratch(scratch_);
  scratch_ = nullptr;
  scratchBytes_ = 0;
}

}  // namespace scalecomm
