#include "algo/tree.h"

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

TreeNode nodeOf(int rank, int n, int root) {
  const int v = modRank(rank - root, n);
  TreeNode t;
  t.depth = depthOf(v);
  t.treeDepth = depthOf(n - 1);
  if (v > 0) t.parent = modRank((v - 1) / 2 + root, n);
  for (int c : {2 * v + 1, 2 * v + 2}) {
    if (c < n) t.children.push_back(modRank(c + root, n));
  }
  return t;
}

// Appends the D reduce steps (children reduced into ours, then sent up).
void appendReduce(Schedule& s, const TreeNode& t) {
  const size_t base = s.steps.size();
  s.steps.resize(base + t.treeDepth);
  if (!t.children.empty()) {
    for (int c : t.children) s.steps[base + t.treeDepth - t.depth - 1].ops.push_back({OpKind::RecvReduce, c, 0});
  }
  if (t.parent >= 0) s.steps[base + t.treeDepth - t.depth].ops.push_back({OpKind::Send, t.parent, 0});
}

// Appends the D broadcast steps (received from the parent, sent down).
void appendBroadcast(Schedule& s, const TreeNode& t) {
  const size_t base = s.steps.size();
  s.steps.resize(base + t.treeDepth);
  if (t.parent >= 0) s.steps[base + t.depth - 1].ops.push_back({OpKind::Recv, t.parent, 0});
  for (int c : t.children) s.steps[base + t.depth].ops.push_back({OpKind::Send, c, 0});
}

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
