// The Group's algorithm choice and prepared call sites (group/group.h:
// algorithmFor, prepare): the Selector's, for a call kind.
#include "group/group.h"

namespace scalecomm {

CollectiveKind selectedAs(CallKind kind) {
  switch (kind) {
    case CallKind::Allreduce:
    case CallKind::CompressedAllreduce: return CollectiveKind::Allreduce;
    case CallKind::Broadcast: return CollectiveKind::Broadcast;
    case CallKind::Reduce: return CollectiveKind::Reduce;
    case CallKind::Allgather: return CollectiveKind::Allgather;
    case CallKind::ReduceScatter: return CollectiveKind::ReduceScatter;
    case CallKind::Barrier: return CollectiveKind::Barrier;
    default: return CollectiveKind::SendRecv;
  }
}

AlgorithmRef Group::algorithmFor(CallKind kind, int64_t bytes, const std::string& override) {
  return selector_->algorithmFor(selectedAs(kind), bytes, override);
}

const Group::Prepared& Group::prepare(CallKind kind, const char* collective, int64_t bytes) {
  return selector_->prepare(selectedAs(kind), collective, bytes);
}

}  // namespace scalecomm
