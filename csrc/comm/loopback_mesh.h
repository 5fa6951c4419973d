// scalecomm comm: communicators for n virtual ranks over a LoopbackFabric.
//
// Contract: returns one Communicator per rank, each holding loopback links to
// every other rank; rank r's communicator must be used by one thread. The
// fabric must outlive them. For tests and microbenchmarks (ranks as threads).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "transport/loopback.h"

namespace scalecomm {

inline std::vector<std::unique_ptr<Communicator>> loopbackCommunicators(LoopbackFabric& fabric,
                                                                        int64_t spinMicros = 50) {
  const int n = fabric.worldSize();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) {
    std::vector<std::unique_ptr<Link>> links(n);
    for (int q = 0; q < n; ++q)
      if (q != r) links[q] = fabric.link(r, q);
    comms.push_back(std::make_unique<Communicator>(r, n, std::move(links), spinMicros));
  }
  return comms;
}

}  // namespace scalecomm
