// scalecomm algo: ordered, the reductions whose bits depend on nothing but the inputs.
//
// Contract: every element of the result is the left fold of the ranks'
// values in rank order, op(...op(op(v0, v1), v2)..., v(n-1)), each step with
// the bits of reduceInto (comm/reducer.h: fp16 and bf16 widened to fp32 and
// rounded back), then divided by n for AVG (PREMUL_SUM scales each input
// first). So the result is the same bit for bit whatever the segment size,
// the transport, the ranks' hosts and the bucket the element travels in;
// `shared` (algo/shared.h) folds the same way and gives the same bits.
//   allreduce: where every rank shares this host's windows, the `shared`
//     allreduce. Over links, a small message (orderedStarServes): every
//     rank's buffer to rank 0, which folds them, and the result back (a
//     tree's two hops). Across hosts that each hold several consecutive
//     ranks, a chain in rank order and back, pipelined in segments, n-1 hops
//     each way: a host's link carries N out (2N for hosts between others),
//     as `hier`'s leaders at two hosts, where the phases below would carry
//     2 R (n-R)/n N out of a host of R ranks. Where orderedRelayServes
//     (one host, mid-size): the relay, the star pipelined (orderedRelay).
//     Otherwise three phases: every rank sends chunk q of its buffer to rank
//     q (all pairs at once, each chunk into its own scratch slot), rank q
//     folds the n copies of chunk q in rank order (foldInto: one pass), then
//     sends its folded chunk to every rank. Bytes sent per rank 2 (n-1)/n N,
//     as ring; 2 alpha.
//     Scratch (the slots) is held by the calling thread between calls.
//   reduce_scatter: where every rank shares this host's windows, block q of
//     every rank's input folded by rank q straight from the windows
//     (sharedReduceScatter); otherwise the first two phases, with block q of
//     the input as chunk q.
//   reduce: a small message as the star's first half (the root folds);
//     where orderedRelayServes, the relay's fold at rank 0 and its result
//     to the root; a larger one as a chain in rank order, pipelined in
//     segments (each rank adds its values to the fold so far and passes it
//     on: a + b == b + a) to rank n-2, whose fold and rank n-1's values meet
//     at the root: n-1 hops, as chain's, N per hop (the root receives 2N
//     where it is neither n-2 nor n-1). Non-root ranks' buffers end as
//     scratch.
// Allreduce, reduce_scatter and the star take host memory only (the stream
// channel's links or windows): a device (queued) channel is refused with
// Error(InvalidArgument); deterministic groups stage CUDA tensors through
// host memory instead. Errors as the other collectives
// (algo/collectives.h). Thread safety: one call at a time per channel.
// The schedules are pure data (algo/schedule.h); in the phases blocks
// 0..n-1 are the buffer's chunks and n..2n-1 the scratch slots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algo/options.h"
#include "algo/schedule.h"
#include "comm/channel.h"
#include "comm/queued_channel.h"

namespace scalecomm {

// Phase 1: chunk q of every rank to rank q's slot n + (sender).
Schedule orderedToOwners(int rank, int n, const std::vector<int64_t>& chunkCounts);
// Phase 3 of allreduce: rank q's folded chunk to every rank's chunk q.
Schedule orderedFromOwners(int rank, int n, const std::vector<int64_t>& chunkCounts);
// Small messages (orderedStarServes): every rank's whole buffer to the root
// (slots 1 + q of its blocks), which folds them; for allreduce then the
// root's result to every rank (the star broadcast).
Schedule orderedGather(int rank, int n, int root, int64_t count);
Schedule orderedStarBroadcast(int rank, int n, int root, int64_t count);
// Where the star serves: the root takes in (n-1) messages of `bytes` at most
// kOrderedStarBytes in all (it then costs a tree's latency: one hop in, one
// out, where the phases send n-1 messages per rank twice and the chains
// take n-1 hops).
constexpr int64_t kOrderedStarBytes = 256 * 1024;
inline bool orderedStarServes(int n, int64_t bytes) { return bytes * (n - 1) <= kOrderedStarBytes; }
// Mid-size messages where orderedRelayServes: every rank's buffer to rank
// 0, one step per rank in rank order, rank 0 adding rank k's values to the
// fold so far at step k, segment by segment (rank k+1's segment s folds
// while rank k's segment s+1 arrives; no scratch); [AVG's finalize at 0];
// then the result to every rank (`toAll`: allreduce) or to `root` (reduce;
// nothing more where it is 0). A tree's two hops, pipelined.
Schedule orderedRelay(int rank, int n, int root, int64_t count, bool finalize, bool toAll);
// Where the relay serves: 3 ranks or more (2: the star, then the phases'
// halves), all on one host (rank 0 takes in and sends (n-1) N: on links
// that a byte count bounds, the phases' 2 (n-1)/n N per rank win), and at
// most kOrderedRelayBytes through rank 0, or any size at 3 ranks (rank 0
// then takes in 2N, as a binary tree's root does).
constexpr int64_t kOrderedRelayBytes = 2 * 1024 * 1024;
inline bool orderedRelayServes(int n, int64_t bytes, const std::vector<int>& hostOf) {
  return n > 2 && (n == 3 || bytes * (n - 1) <= kOrderedRelayBytes) && !spansHosts(hostOf);
}
// Allreduce across hosts that each hold a run of consecutive ranks: the
// chain 0 -> 1 -> ... -> n-1 (each rank adds its values to the fold so far),
// [AVG's finalize at n-1], then the result back n-1 -> ... -> 0.
Schedule orderedChainAllreduce(int rank, int n, int64_t count, bool finalize);
// The chain's segment: the group's, or smaller so that a message travels in
// 4 segments (a segment's way back then overlaps later ones' way up, each
// host link being full duplex), but not under 64 KiB.
inline int64_t orderedChainSegmentBytes(int64_t segmentBytes, int64_t bytes) {
  if (segmentBytes <= 0) return segmentBytes;
  return std::min(segmentBytes, std::max<int64_t>(int64_t{64} << 10, bytes / 4));
}
// Whether that chain runs: some host holds several ranks, and each host's
// ranks are consecutive (the chain crosses each host boundary once each way).
bool orderedChainPays(const std::vector<int>& hostOf);
// Reduce: a chain 0 -> 1 -> ... -> n-2 (each rank adds its own values to
// the fold so far), then the root adds that fold and rank n-1's values;
// [AVG's finalize at the root].
Schedule orderedChainReduce(int rank, int n, int root, int64_t count, bool finalize);

// The entry's runner (algo/registry.h): allreduce (in place in call.recv),
// reduce_scatter (call.send holds the n blocks of call.count elements, block
// `rank` ends reduced) and a reduce the star or the relay serves
// (call.recv, to call.root); PREMUL_SUM inputs are pre-multiplied by
// premulFactor first. Declines a larger reduce, whose schedule is the
// entry's (orderedChainReduce).
bool orderedRun(Channel& ch, const NativeCall& call, double premulFactor, const CollectiveOptions& opts);

}  // namespace scalecomm
