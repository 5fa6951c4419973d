#include "algo/tree.h"

#include <algorithm>

#include "core/error.h"

namespace scalecomm {

namespace {

int depthOf(int v) {
  int d = 0;
  while (v > 0) {
    v = (v - 1) / 2;
    ++d;
  }
  return d;
}

struct TreeNode {
  int depth;                  // of this rank
  int treeDepth;              // D
  int parent = -1;            // real rank, -1 at the root
  std::vector<int> children;  // real ranks
};

// The heap tree over virtual ranks v = toVirtual(rank); toReal inverts it.
template <typename ToVirtual, typename ToReal>
TreeNode heapNode(int rank, int n, ToVirtual toVirtual, ToReal toReal) {
  const int v = toVirtual(rank);
  TreeNode t;
  t.depth = depthOf(v);
  t.treeDepth = depthOf(n - 1);
  if (v > 0) t.parent = toReal((v - 1) / 2);
  for (int c : {2 * v + 1, 2 * v + 2}) {
    if (c < n) t.children.push_back(toReal(c));
  }
  return t;
}

TreeNode nodeOf(int rank, int n, int root) {
  return heapNode(rank, n, [&](int r) { return modRank(r - root, n); }, [&](int v) { return modRank(v + root, n); });
}

// The second tree of the double binary tree: the heap over v = n-1-rank.
TreeNode mirroredNodeOf(int rank, int n) {
  return heapNode(rank, n, [&](int r) { return n - 1 - r; }, [&](int v) { return n - 1 - v; });
}

// Appends the D reduce steps (children reduced into ours, then sent up) from
// step `base` on, for block `block`.
void addReduce(Schedule& s, size_t base, const TreeNode& t, int block) {
  s.steps.resize(std::max(s.steps.size(), base + t.treeDepth));
  for (int c : t.children) s.steps[base + t.treeDepth - t.depth - 1].ops.push_back({OpKind::RecvReduce, c, block});
  if (t.parent >= 0) s.steps[base + t.treeDepth - t.depth].ops.push_back({OpKind::Send, t.parent, block});
}

// Appends the D broadcast steps (received from the parent, sent down).
void addBroadcast(Schedule& s, size_t base, const TreeNode& t, int block) {
  s.steps.resize(std::max(s.steps.size(), base + t.treeDepth));
  if (t.parent >= 0) s.steps[base + t.depth - 1].ops.push_back({OpKind::Recv, t.parent, block});
  for (int c : t.children) s.steps[base + t.depth].ops.push_back({OpKind::Send, c, block});
}

void appendReduce(Schedule& s, const TreeNode& t) { addReduce(s, s.steps.size(), t, 0); }
void appendBroadcast(Schedule& s, const TreeNode& t) { addBroadcast(s, s.steps.size(), t, 0); }

Schedule treeSchedule(int rank, int n, int root, int64_t count) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && root >= 0 && root < n && count >= 0);
  Schedule s;
  s.algorithm = "tree";
  s.blockCounts = {count};
  return s;
}

void appendFinalize(Schedule& s, bool finalize, int rank, int root) {
  if (!finalize) return;
  ScheduleStep fin;
  if (rank == root) fin.ops.push_back({OpKind::Finalize, -1, 0});
  s.steps.push_back(fin);
}

}  // namespace

Schedule treeAllreduce(int rank, int n, int64_t count, bool finalize) {
  Schedule s = treeSchedule(rank, n, 0, count);
  const TreeNode t = nodeOf(rank, n, 0);
  appendReduce(s, t);
  appendFinalize(s, finalize, rank, 0);
  appendBroadcast(s, t);
  return s;
}

Schedule doubleTreeAllreduce(int rank, int n, int64_t count, bool finalize) {
  SC_CHECK(n >= 1 && rank >= 0 && rank < n && count >= 0);
  Schedule s;
  s.algorithm = "dbtree";
  s.blockCounts = {count - count / 2, count / 2};
  const TreeNode first = nodeOf(rank, n, 0);
  const TreeNode second = mirroredNodeOf(rank, n);
  // Both trees in the same steps (same depth D), the first tree's ops first
  // in every step on both ends of a pair, so a pair linked in both trees
  // sends and receives in one order.
  addReduce(s, 0, first, 0);
  addReduce(s, 0, second, 1);
  if (finalize) {
    ScheduleStep fin;
    if (rank == 0) fin.ops.push_back({OpKind::Finalize, -1, 0});
    if (rank == n - 1) fin.ops.push_back({OpKind::Finalize, -1, 1});
    s.steps.push_back(fin);
  }
  const size_t down = s.steps.size();
  addBroadcast(s, down, first, 0);
  addBroadcast(s, down, second, 1);
  return s;
}

Schedule treeBroadcast(int rank, int n, int root, int64_t count) {
  Schedule s = treeSchedule(rank, n, root, count);
  appendBroadcast(s, nodeOf(rank, n, root));
  return s;
}

Schedule treeReduce(int rank, int n, int root, int64_t count, bool finalize) {
  Schedule s = treeSchedule(rank, n, root, count);
  appendReduce(s, nodeOf(rank, n, root));
  appendFinalize(s, finalize, rank, root);
  return s;
}

}  // namespace scalecomm
