#include "comm/nccl/nccl_channel.h"

#include "core/error.h"
#include "cuda/nvtx_ranges.h"

namespace scalecomm::cuda {

NcclChannel::NcclChannel(std::unique_ptr<NcclComm> comm)
    : QueuedChannel(comm->rank(), comm->size()), comm_(std::move(comm)), reducer_(comm_->stream()) {}

NcclChannel::~NcclChannel() { releaseScratch(); }

void NcclChannel::waitEvent(void* event, const Deadline& deadline, const char* what) {
  comm_->waitEvent(static_cast<cudaEvent_t>(event), deadline, what);
}

void NcclChannel::issueGroup(const std::vector<QueuedOp>& ops) {
  // Nsight: "scalecomm group: send 1048576 B to 1; recv 1048576 B from 3;" (host-side issue).
  uint64_t range = 0;
  if (nvtxEnabled()) {
    std::string text = "scalecomm group:";
    for (const auto& op : ops)
      text += strCat(op.send ? " send " : " recv ", op.bytes, op.send ? " B to " : " B from ", op.peer, ";");
    range = nvtxBegin(text);
  }
  NcclComm& c = *comm_;
  c.check(ncclGroupStart(), "ncclGroupStart");
  for (const QueuedOp& op : ops) {
    const size_t n = static_cast<size_t>(op.bytes);
    if (op.send) {
      c.check(ncclSend(op.data, n, ncclUint8, op.peer, c.comm(), c.stream()), "ncclSend");
    } else {
      c.check(ncclRecv(op.data, n, ncclUint8, op.peer, c.comm(), c.stream()), "ncclRecv");
    }
  }
  c.check(ncclGroupEnd(), "ncclGroupEnd");
  c.waitIssued(deadline_, "ncclGroupEnd of a group of sends and receives");
  nvtxEnd(range);
}

void* NcclChannel::allocScratch(int64_t bytes) {
  // Memory allocated inside a graph capture belongs to the graph (it exists
  // only between its replays' allocation and free nodes); the scratch lives on.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  checkCuda(cudaStreamIsCapturing(comm_->stream(), &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    fail(ErrorKind::InvalidArgument, "scalecomm (rank ", rank(), "): this collective needs ", bytes,
         " B of new scratch on the GPU during CUDA graph capture, which a graph cannot keep; run it once with the "
         "same sizes before capturing (the warm-up torch.cuda.graph asks for)");
  }
  void* p = nullptr;
  checkCuda(cudaMallocAsync(&p, static_cast<size_t>(bytes), comm_->stream()), "cudaMallocAsync (scratch)");
  return p;
}

void NcclChannel::freeScratch(void* p) { cudaFreeAsync(p, comm_->stream()); }

bool NcclChannel::hasNative(CollectiveKind kind, DataType dtype, ReduceOp op) const {
  return ncclNativeTakes(kind, dtype, op);
}

void NcclChannel::native(const NativeCall& call) {
  if (!hasNative(call.kind, call.dtype, call.op)) QueuedChannel::native(call);
  NcclComm& c = *comm_;
  const auto count = static_cast<size_t>(call.count);
  ncclDataType_t t = ncclUint8;
  ncclRedOp_t r = ncclSum;
  const bool bytes = call.kind == CollectiveKind::Broadcast || call.kind == CollectiveKind::Allgather;
  const size_t n = bytes ? count * elementSize(call.dtype) : count;
  if (!bytes) {
    ncclTypeOf(call.dtype, &t);
    ncclOpOf(call.op, &r);
  }
  switch (call.kind) {
    case CollectiveKind::Allreduce:
      c.check(ncclAllReduce(call.send, call.recv, n, t, r, c.comm(), c.stream()), "ncclAllReduce");
      break;
    case CollectiveKind::Broadcast:
      c.check(ncclBroadcast(call.send, call.recv, n, t, call.root, c.comm(), c.stream()), "ncclBroadcast");
      break;
    case CollectiveKind::Reduce:
      c.check(ncclReduce(call.send, call.recv, n, t, r, call.root, c.comm(), c.stream()), "ncclReduce");
      break;
    case CollectiveKind::Allgather:
      c.check(ncclAllGather(call.send, call.recv, n, t, c.comm(), c.stream()), "ncclAllGather");
      break;
    case CollectiveKind::ReduceScatter:
      c.check(ncclReduceScatter(call.send, call.recv, n, t, r, c.comm(), c.stream()), "ncclReduceScatter");
      break;
    default: QueuedChannel::native(call);
  }
  c.waitIssued(deadline_, collectiveName(call.kind));
}

}  // namespace scalecomm::cuda
