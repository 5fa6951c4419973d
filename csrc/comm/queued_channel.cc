#include "comm/queued_channel.h"

#include "core/error.h"

namespace scalecomm {

void QueuedChannel::start() {
  open_.clear();
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
  reductions_.push_back({open_.size(), m.data, scratchUsed_, m.count, m.dtype, m.op});
  open_.push_back({false, m.peer, nullptr, bytes});
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
  for (const PendingReduce& p : reductions_) open_[p.recv].data = scratch_ + p.offset;
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

bool ncclNativeTakes(CollectiveKind kind, DataType dtype, ReduceOp op) {
  switch (kind) {
    case CollectiveKind::Broadcast:
    case CollectiveKind::Allgather: return true;
    case CollectiveKind::Allreduce:
    case CollectiveKind::Reduce:
    case CollectiveKind::ReduceScatter: break;
    default: return false;
  }
  if (dtype == DataType::Int16 || dtype == DataType::Opaque) return false;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Product:
    case ReduceOp::Min:
    case ReduceOp::Max: return true;
    case ReduceOp::Avg: return isFloating(dtype);
    default: return false;
  }
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
