#include "group/call_checks.h"

#include <cstdint>

#include "algo/registry.h"
#include "core/error.h"

namespace scalecomm {

namespace {

// The checks one call's arguments take, each failing with
// InvalidArgument naming the call and the rank.
class ArgumentChecks {
 public:
  ArgumentChecks(const Call& call, int rank, int size) : call_(call), rank_(rank), size_(size) {}

  template <typename... What>
  [[noreturn]] void bad(const What&... what) const {
    fail(ErrorKind::InvalidArgument, "scalecomm ", call_.name, " (rank ", rank_, "): ", what...);
  }
  void count(int64_t n, const char* what) const {
    if (n < 0) bad(what, " is ", n, "; it must be >= 0");
    const auto es = static_cast<int64_t>(elementSize(call_.dtype));
    if (es > 0 && n > INT64_MAX / es) bad(what, " ", n, " of ", dataTypeName(call_.dtype), " overflows 64 bits");
  }
  void buffer(const void* p, int64_t n, const char* what) const {
    if (n > 0 && p == nullptr) bad(what, " is null but ", n, " elements go through it");
  }
  void root() const {
    if (call_.root < 0 || call_.root >= size_) {
      bad("root rank ", call_.root, " is out of range; the group has ranks 0..", size_ - 1);
    }
  }
  void reduction() const {
    if (!reduceOpSupports(call_.op, call_.dtype)) {
      bad("reduce op ", reduceOpName(call_.op), " is not defined for ", dataTypeName(call_.dtype),
          " (bitwise ops take integers, PREMUL_SUM floating types)");
    }
  }
  void blocks(size_t want) const {
    if (call_.blocks.size() != want) bad("expected ", want, " buffers (one per rank), got ", call_.blocks.size());
  }
  // The count and the one buffer of a call that has them.
  void single() const {
    count(call_.count, "count");
    buffer(call_.data, call_.count, "the buffer");
  }
  // A compressed allreduce: float32 values, a prepared site and a state slot.
  void compressed() const {
    single();
    if (call_.dtype != DataType::Float32)
      bad("compressed allreduce takes float32 values, not ", dataTypeName(call_.dtype));
    if (!call_.compressed || (!call_.compressed->site == !call_.compressed->chooser) || !call_.compressed->slot) {
      bad("a compressed allreduce needs its prepared site or chooser (one of them) and its state slot "
          "(Group::compressedSite, autoCompression, compressionStates)");
    }
    if (call_.compressed && call_.compressed->chooser && call_.compressed->body)
      bad("compress=auto runs scalecomm's host codecs; it takes no body of its own");
    if (call_.deviceIndex >= 0 && !call_.compressed->body)
      bad("a compressed allreduce of device memory needs its own body (the host codecs cannot read that memory)");
  }
  void alltoall() const {
    blocks(2 * static_cast<size_t>(size_));
    if (call_.sendCounts.size() != static_cast<size_t>(size_) ||
        call_.recvCounts.size() != static_cast<size_t>(size_)) {
      bad("expected ", size_, " send and receive split sizes, got ", call_.sendCounts.size(), " and ",
          call_.recvCounts.size());
    }
    for (int q = 0; q < size_; ++q) {
      count(call_.sendCounts[q], "a send split size");
      count(call_.recvCounts[q], "a receive split size");
      buffer(call_.blocks[q], call_.sendCounts[q], "a send block");
      buffer(call_.blocks[size_ + q], call_.recvCounts[q], "a receive block");
    }
  }

 private:
  const Call& call_;
  int rank_, size_;
};

// The arguments of one call, checked before it is numbered or queued, so a
// bad one leaves the group usable and nothing half-sent: counts (>= 0, and
// their bytes within int64), buffers present where bytes go, roots in range,
// one block per rank where the kind has them, all-to-all splits, the
// (op, dtype) pair. Peers are checked where the call is numbered.
void checkArguments(const Call& call, int rank, int size) {
  const ArgumentChecks check(call, rank, size);
  switch (call.kind) {
    case CallKind::Allreduce:
    case CallKind::ReduceScatter:
      check.single();
      check.reduction();
      break;
    case CallKind::Broadcast:
      check.single();
      check.root();
      break;
    case CallKind::Reduce:
      check.single();
      check.root();
      check.reduction();
      break;
    case CallKind::Allgather:
      check.count(call.count, "count");
      check.blocks(static_cast<size_t>(size));
      for (void* b : call.blocks) check.buffer(b, call.count, "an output block");
      break;
    case CallKind::Gather:
    case CallKind::Scatter:
      check.count(call.count, "count");
      check.root();
      check.blocks(static_cast<size_t>(size));
      for (int q = 0; q < size; ++q) {
        if (q == rank || rank == call.root) check.buffer(call.blocks[q], call.count, "a block");
      }
      break;
    case CallKind::Alltoall: check.alltoall(); break;
    case CallKind::Send:
    case CallKind::Recv:
    case CallKind::RecvAnySource: check.single(); break;
    case CallKind::CompressedAllreduce: check.compressed(); break;
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
