#include "algo/native.h"

#include <atomic>

#include "algo/options.h"
#include "comm/communicator.h"
#include "comm/mpi_collectives.h"
#include "core/error.h"
#include "core/logging.h"

namespace scalecomm {

Communicator& hostLinks(Channel& ch, const char* collective, const std::string& algorithm) {
  if (Communicator* c = ch.communicator()) return *c;
  fail(ErrorKind::InvalidArgument, "scalecomm ", collective, " (rank ", ch.rank(), "): algorithm ", algorithm,
       " runs on host memory over the group's links, not on device memory; choose a schedule (ring, rhd, tree, ...) "
       "or nccl");
}

bool ncclNative(Channel& ch, const NativeCall& c, double premulFactor, const CollectiveOptions&) {
  const char* what = collectiveName(c.kind);
  QueuedChannel* q = ch.queuedChannel();
  if (q == nullptr) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", what, " (rank ", ch.rank(),
         "): algorithm nccl takes CUDA tensors (and a build with NCCL); choose a scalecomm algorithm such as ring");
  }
  NativeCall call = c;
  if (call.kind == CollectiveKind::Allgather) {
    const int n = ch.size();
    const auto& outputs = *call.outputs;
    const int64_t block = call.count * static_cast<int64_t>(elementSize(call.dtype));
    bool contiguous = true;
    for (int q = 0; q < n; ++q)
      contiguous = contiguous && static_cast<uint8_t*>(outputs[q]) == static_cast<uint8_t*>(outputs[0]) + q * block;
    if (!contiguous) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        SC_LOG(Info,
               "scalecomm allgather:nccl: the outputs are separate tensors, which NCCL's allgather cannot fill; "
               "they are gathered with the ring schedule over NCCL send/recv instead");
      }
      return false;
    }
    call.send = outputs[ch.rank()];
    call.recv = outputs[0];
  }
  if (call.op == ReduceOp::PremulSum) {
    const int64_t elems = call.kind == CollectiveKind::ReduceScatter ? call.count * ch.size() : call.count;
    ch.reducer().scale(const_cast<void*>(call.send), elems, call.dtype, premulFactor);
    ch.reducer().fence();
    call.op = ReduceOp::Sum;
  }
  if (!q->hasNative(call.kind, call.dtype, call.op)) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", what, ":nccl (rank ", ch.rank(), "): NCCL has no ",
         reduceOpName(call.op), " on ", dataTypeName(call.dtype),
         "; choose a scalecomm algorithm (ring, rhd, tree, ...) for this op and dtype");
  }
  q->native(call);
  return true;
}

bool mpiNative(Channel& ch, const NativeCall& c, double premulFactor, const CollectiveOptions& opts) {
  const char* what = collectiveName(c.kind);
  Communicator& comm = hostLinks(ch, what, "mpi");
  const MpiCallLimits limits{opts.seq, opts.deadline, opts.timeoutMs};
  auto* data = static_cast<void*>(c.recv);
  switch (c.kind) {
    case CollectiveKind::Allreduce: mpiAllreduce(comm, data, c.count, c.dtype, c.op, premulFactor, limits); break;
    case CollectiveKind::Broadcast: mpiBroadcast(comm, data, c.count, c.dtype, c.root, limits); break;
    case CollectiveKind::Reduce: mpiReduce(comm, data, c.count, c.dtype, c.op, premulFactor, c.root, limits); break;
    case CollectiveKind::Allgather: mpiAllgather(comm, *c.outputs, c.count, c.dtype, limits); break;
    case CollectiveKind::ReduceScatter:
      mpiReduceScatter(comm, const_cast<void*>(c.send), c.count, c.dtype, c.op, premulFactor, limits);
      break;
    case CollectiveKind::Barrier: mpiBarrier(comm, limits); break;
    default: fail(ErrorKind::InvalidArgument, "scalecomm ", what, " (rank ", ch.rank(), "): has no mpi form");
  }
  return true;
}

}  // namespace scalecomm
