// scalecomm transport: in-process loopback links, for unit tests.
//
// Contract: LoopbackFabric owns, for n virtual ranks (threads of one process),
// one SpscRing per ordered pair. link(from, to) returns rank `from`'s Link to
// `to`; each Link must be used by one thread (its rank's). Closing a link closes
// both directions of that pair. The fabric must outlive its links.
#pragma once

#include <memory>
#include <vector>

#include "transport/link.h"
#include "transport/spsc_ring.h"

namespace scalecomm {

class LoopbackFabric {
 public:
  LoopbackFabric(int worldSize, size_t ringBytes);
  std::unique_ptr<Link> link(int from, int to);
  int worldSize() const { return n_; }
  struct Ring;  // one direction of one pair (defined in loopback.cc)

 private:
  int n_;
  std::vector<std::shared_ptr<Ring>> rings_;  // index from * n + to
  std::shared_ptr<Ring> ring(int from, int to) { return rings_[from * n_ + to]; }
};

}  // namespace scalecomm
