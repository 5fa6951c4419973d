// Where a Group runs device memory (group/group.h Call::deviceIndex,
// Call::stager): on the device's queued channel between the caller's
// DeviceSync events, or in staged chunks through host memory.
#include <algorithm>

#include "algo/registry.h"
#include "core/error.h"
#include "group/group.h"

namespace scalecomm {

namespace {

// Whether the channel's own collective takes `call` (for a compressed
// allreduce: its payloads' sums). A deterministic group folds its reductions
// in rank order, which no transport's own reduction promises.
bool nativeTakes(const QueuedChannel& ch, const Call& call, bool deterministic) {
  const CollectiveKind kind = selectedAs(call.kind);
  const bool reduces =
      kind == CollectiveKind::Allreduce || kind == CollectiveKind::Reduce || kind == CollectiveKind::ReduceScatter;
  if (reduces && deterministic) return false;
  return ch.hasNative(kind, call.dtype, reduces ? call.op : ReduceOp::None);
}

}  // namespace

void Group::runOnDevice(Call& call, CollectiveOptions& o) {
  if (!deviceChannels_) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank_,
         "): this group has no device channel (a build without NCCL)");
  }
  // Elsewhere a host-only algorithm gives way to the device's default; a
  // deterministic group's would not fold in rank order there.
  if (config_.deterministic != 0 && o.algorithm && o.algorithm->rankOrder &&
      o.algorithm->memory == AlgorithmMemory::Host) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank_, "): algorithm ", o.algorithm,
         " folds in rank order on host memory; a deterministic group stages device memory through the host");
  }
  QueuedChannel& ch = deviceChannels_(call.deviceIndex, o.deadline);
  o.algorithm = deviceAlgorithm(o.algorithm, nativeTakes(ch, call, config_.deterministic != 0));
  // A queued channel issues a step as one group and queues its reductions
  // behind the whole group, so segments inside a step overlap nothing; each
  // only adds a message (for NCCL a point-to-point operation with its own
  // handshake). Host pacing does not apply: the transport paces itself.
  o.segmentBytes = deviceSegmentBytes_;
  o.sendAheadBytes = 0;
  call.deviceSync->begin(ch.stream());
  try {
    if (call.before) call.before();
    runBody(call, ch, o);
    if (call.after) call.after();
  } catch (...) {
    call.deviceSync->end(ch.stream());
    throw;
  }
  void* done = call.deviceSync->end(ch.stream());
  if (!call.deviceSync->capturing()) ch.waitEvent(done, o.deadline, call.name.c_str());
}

void Group::runStaged(Call& call, Channel& ch, CollectiveOptions& o) {
  if (call.kind != CallKind::Allreduce && call.kind != CallKind::Broadcast && call.kind != CallKind::Reduce) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank_,
         "): only allreduce, broadcast and reduce run in staged chunks");
  }
  Stager& s = *call.stager;
  const auto es = static_cast<int64_t>(elementSize(call.dtype));
  const int64_t per = std::max<int64_t>(1, s.chunkBytes() / es);  // elements per chunk
  void* const buffer = call.data;
  const int64_t count = call.count;
  const int64_t chunks = std::max<int64_t>(1, (count + per - 1) / per);
  const auto offset = [&](int64_t k) { return k * per * es; };
  const auto bytes = [&](int64_t k) { return std::min(per, count - k * per) * es; };
  try {
    s.down(0, 0, bytes(0));
    for (int64_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) s.down(static_cast<int>((k + 1) & 1), offset(k + 1), bytes(k + 1));
      call.data = s.ready(static_cast<int>(k & 1));
      call.count = bytes(k) / es;
      runBody(call, ch, o);
      s.up(static_cast<int>(k & 1), offset(k), bytes(k));
    }
  } catch (...) {
    call.data = buffer;
    call.count = count;
    try {
      s.finish();
    } catch (...) {  // the collective's own failure is the one to report
    }
    throw;
  }
  call.data = buffer;
  call.count = count;
  s.finish();
}

}  // namespace scalecomm
