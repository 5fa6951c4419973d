// scalecomm algo: measuring the cost model's parameters on a live group.
//
// Contract: probeCostParams() runs a few ring allreduces over `comm` (8 bytes
// x 20 for latency, 1 MiB x 3 for bandwidth; a few milliseconds on one host),
// derives alpha and beta from the ring's closed form, and agrees on the
// slowest rank's values with one more allreduce, so every rank returns the
// same parameters (and so later picks the same algorithm). The per-extra-
// message overhead is set to alpha: one thread progresses a step's messages
// one after another. Where the ranks share windows it also times shared
// allreduces of 8 bytes (windowAlpha: the fastest of 5 batches of 40) and of
// one window's worth, at most 128 KiB (windowBeta, per byte copied: the
// fastest of 5 batches of 8, less windowAlpha; see windowCopySeconds()).
// Collective: every rank must call it at the same point. Uses sequence
// number 0 in headers (real collectives start at 1).
#pragma once

#include "algo/collectives.h"
#include "algo/cost_model.h"
#include "comm/communicator.h"
#include "core/deadline.h"

namespace scalecomm {

CostParams probeCostParams(Communicator& comm, const Deadline& deadline);

// A copy within the windows (in the cores' caches) is priced at most this many
// times faster than a link byte, which streams from memory.
constexpr double kWindowCopyCeiling = 8.0;

// windowBeta from a timed window call: (tCall - tRound) / copies, where tCall
// is the call's time, tRound the flag round's and copies the bytes the cost
// model says the call copies; at least linkBeta / kWindowCopyCeiling, so a
// probe disturbed by contention (the flag round timed about as slow as the
// whole call) cannot price the window's copies at nothing.
double windowCopySeconds(double tCall, double tRound, double copies, double linkBeta);

// When the group spans several hosts, also times an exchange around each
// host's ranks (1 x 8 B x 20, 1 MiB x 3, shared memory) and sets intraAlpha /
// intraBeta to the slowest host's values (agreed by one more allreduce).
// Collective over the whole group; a no-op on one host.
void probeIntraHost(Communicator& comm, const CollectiveOptions& opts, CostParams& params);

}  // namespace scalecomm
