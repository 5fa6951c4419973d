#include "group/call_checks.h"

#include <cstdint>

#include "algo/registry.h"
#include "core/error.h"

namespace scalecomm {

namespace {

// The arguments of one call, checked before it is numbered or queued, so a
// bad one leaves the group usable and nothing half-sent: counts (>= 0, and
// their bytes within int64), buffers present where bytes go, roots in range,
// one block per rank where the kind has them, all-to-all splits, the
// (op, dtype) pair. Peers are checked where the call is numbered.
void checkArguments(const Call& call, int rank, int size) {
  auto bad = [&](const auto&... what) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank, "): ", what...);
  };
  auto checkCount = [&](int64_t count, const char* what) {
    if (count < 0) bad(what, " is ", count, "; it must be >= 0");
    const int64_t es = static_cast<int64_t>(elementSize(call.dtype));
    if (es > 0 && count > INT64_MAX / es) bad(what, " ", count, " of ", dataTypeName(call.dtype), " overflows 64 bits");
  };
  auto checkBuffer = [&](const void* p, int64_t count, const char* what) {
    if (count > 0 && p == nullptr) bad(what, " is null but ", count, " elements go through it");
  };
  auto checkRoot = [&] {
    if (call.root < 0 || call.root >= size) {
      bad("root rank ", call.root, " is out of range; the group has ranks 0..", size - 1);
    }
  };
  auto checkReduction = [&] {
    if (!reduceOpSupports(call.op, call.dtype)) {
      bad("reduce op ", reduceOpName(call.op), " is not defined for ", dataTypeName(call.dtype),
          " (bitwise ops take integers, PREMUL_SUM floating types)");
    }
  };
  auto checkBlocks = [&](size_t want) {
    if (call.blocks.size() != want) bad("expected ", want, " buffers (one per rank), got ", call.blocks.size());
  };
  switch (call.kind) {
    case CallKind::Allreduce:
    case CallKind::ReduceScatter:
      checkCount(call.count, "count");
      checkBuffer(call.data, call.count, "the buffer");
      checkReduction();
      break;
    case CallKind::Broadcast:
      checkCount(call.count, "count");
      checkBuffer(call.data, call.count, "the buffer");
      checkRoot();
      break;
    case CallKind::Reduce:
      checkCount(call.count, "count");
      checkBuffer(call.data, call.count, "the buffer");
      checkRoot();
      checkReduction();
      break;
    case CallKind::Allgather:
      checkCount(call.count, "count");
      checkBlocks(static_cast<size_t>(size));
      for (void* b : call.blocks) checkBuffer(b, call.count, "an output block");
      break;
    case CallKind::Gather:
    case CallKind::Scatter:
      checkCount(call.count, "count");
      checkRoot();
      checkBlocks(static_cast<size_t>(size));
      for (int q = 0; q < size; ++q) {
        if (q == rank || rank == call.root) checkBuffer(call.blocks[q], call.count, "a block");
      }
      break;
    case CallKind::Alltoall: {
      checkBlocks(2 * static_cast<size_t>(size));
      if (call.sendCounts.size() != static_cast<size_t>(size) || call.recvCounts.size() != static_cast<size_t>(size)) {
        bad("expected ", size, " send and receive split sizes, got ", call.sendCounts.size(), " and ",
            call.recvCounts.size());
      }
      for (int q = 0; q < size; ++q) {
        checkCount(call.sendCounts[q], "a send split size");
        checkCount(call.recvCounts[q], "a receive split size");
        checkBuffer(call.blocks[q], call.sendCounts[q], "a send block");
        checkBuffer(call.blocks[size + q], call.recvCounts[q], "a receive block");
      }
      break;
    }
    case CallKind::Send:
    case CallKind::Recv:
    case CallKind::RecvAnySource:
      checkCount(call.count, "count");
      checkBuffer(call.data, call.count, "the buffer");
      break;
    default: break;
  }
}

// An allreduce algorithm named for this call must take its message.
void checkAlgorithmTakes(const Call& call, int rank, int size, int64_t windowBytes) {
  if (call.kind != CallKind::Allreduce || call.algorithm.empty()) return;
  const Algorithm* a = call.algorithm.get();
  if (!a->ours()) return;
  const int64_t bytes = call.count * static_cast<int64_t>(elementSize(call.dtype));
  if (a->maxBytes > 0 && bytes > a->maxBytes) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank, "): algorithm ", a->name,
         " takes messages of at most ", a->maxBytes, " bytes; this one has ", bytes,
         " (choose auto, which uses it where it fits, or ring/rhd)");
  }
  if (a->onWindows() && size > 1 && windowBytes <= 0 && bytes > 0) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call.name, " (rank ", rank, "): algorithm ", a->name,
         " runs on shared windows, which this group has not (every rank on one host, linked by shared memory, "
         "SCALECOMM_SHM_WINDOW_BYTES > 0); choose auto or ring");
  }
}

}  // namespace

void checkCall(const Call& call, int rank, int size, int64_t windowBytes) {
  checkArguments(call, rank, size);
  checkAlgorithmTakes(call, rank, size, windowBytes);
}

}  // namespace scalecomm
