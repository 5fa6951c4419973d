// scalecomm algo: pipelined binary-tree schedules.
//
// The tree is a binary heap over virtual ranks v = (rank - root) mod n: the
// children of v are 2v+1 and 2v+2, its parent (v-1)/2, its depth
// floor(log2(v+1)); D = depth of v = n-1 (ceil(log2(n+1)) - 1).
// Tree reduce: at step D-h every node at depth h sends its buffer to its
// parent, which has reduced both children into its own copy first (RecvReduce
// from each child at step D-h-1). The buffer is one block cut into segments,
// so segment s climbs a level while segment s+1 is still below (pipelined).
// Tree broadcast: the mirror image; at step h-1 a node at depth h-1 sends to
// its children at depth h.
// Tree allreduce: reduce to rank 0, [finalize at the root], broadcast from it.
//   bytes sent per rank: N up + 2N down (an inner node feeds two children)
//   latency: 2 D alpha for the first segment, then one segment time per
//   further segment; T ~ 2 ceil(log2 n) alpha + 3 N beta (pipelined), so it
//   beats the ring (2 (n-1) alpha + 2 N beta) when n is large and N is not.
// Double binary tree allreduce ("dbtree"): the buffer's two halves reduce
// and broadcast concurrently over two trees: the heap tree rooted at rank 0
// and its mirror image (virtual rank n-1-rank, rooted at rank n-1). A rank
// inner in one tree is a leaf in the other (at odd n the middle rank is a
// leaf in both), so a rank sends and receives at most 2N in all where an
// inner node of one tree moves 3N; the latency stays 2 D alpha.
// Steps are numbered alike on every rank (idle ranks hold empty steps).
#pragma once

#include "algo/schedule.h"

namespace scalecomm {

Schedule treeAllreduce(int rank, int n, int64_t count, bool finalize);
Schedule doubleTreeAllreduce(int rank, int n, int64_t count, bool finalize);
Schedule treeBroadcast(int rank, int n, int root, int64_t count);
Schedule treeReduce(int rank, int n, int root, int64_t count, bool finalize);

}  // namespace scalecomm
