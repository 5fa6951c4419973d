#include "algo/plan.h"

#include <algorithm>

#include "core/error.h"

namespace scalecomm {

namespace {

// The ops of one step as compiled: first task id and number of segments.
struct CompiledOp {
  OpKind kind;
  int32_t first;
  int64_t segments;
};

// Pacing (see plan.h): in a pairwise-exchange step, send segment s waits for
// receive segment s - window (clamped to the receive's last segment), and so
// does receive segment s.
void paceStep(Plan& plan, const std::vector<CompiledOp>& ops, int64_t window) {
  const CompiledOp* send = nullptr;
  const CompiledOp* recv = nullptr;
  for (const CompiledOp& op : ops) {
    if (op.kind == OpKind::Send) {
      if (send) return;
      send = &op;
    } else if (op.kind == OpKind::Recv || op.kind == OpKind::RecvReduce) {
      if (recv) return;
      recv = &op;
    }
  }
  if (!send || !recv || recv->segments == 0) return;
  for (int64_t s = window; s < send->segments; ++s) {
    const int64_t r = std::min(s - window, recv->segments - 1);
    plan.tasks[send->first + s].deps.push_back(recv->first + static_cast<int32_t>(r));
  }
  for (int64_t s = window; s < recv->segments; ++s) {
    plan.tasks[recv->first + s].pacedBy = recv->first + static_cast<int32_t>(s - window);
  }
}

}  // namespace

Plan compilePlan(const Schedule& schedule, int worldSize, int64_t segmentElems, int64_t paceSegments) {
  SC_CHECK(segmentElems > 0 && paceSegments >= 0);
  Plan plan;
  plan.blockCounts = schedule.blockCounts;
  plan.sendQueue.resize(worldSize);
  plan.recvQueue.resize(worldSize);
  const size_t nblocks = schedule.blockCounts.size();
  std::vector<int64_t> cellBase(nblocks + 1, 0);
  for (size_t b = 0; b < nblocks; ++b) {
    int64_t segs = (schedule.blockCounts[b] + segmentElems - 1) / segmentElems;
    if (segs == 0 && schedule.emptyBlocksAreMessages) segs = 1;
    cellBase[b + 1] = cellBase[b] + segs;
  }
  std::vector<int32_t> lastWriter(cellBase[nblocks], -1);
  std::vector<std::vector<int32_t>> readers(cellBase[nblocks]);
  std::vector<bool> peerUsed(worldSize, false);

  std::vector<CompiledOp> compiled;  // this step's ops, kept only when pacing
  for (size_t st = 0; st < schedule.steps.size(); ++st) {
    compiled.clear();
    for (const ScheduleOp& op : schedule.steps[st].ops) {
      SC_CHECK(op.block >= 0 && static_cast<size_t>(op.block) < nblocks, "block ", op.block);
      SC_CHECK(op.kind == OpKind::Finalize || (op.peer >= 0 && op.peer < worldSize), "peer ", op.peer);
      const int64_t count = schedule.blockCounts[op.block];
      const int64_t segs = cellBase[op.block + 1] - cellBase[op.block];
      if (paceSegments > 0) compiled.push_back({op.kind, static_cast<int32_t>(plan.tasks.size()), segs});
      for (int64_t s = 0; s < segs; ++s) {
        Task t;
        t.kind = op.kind;
        t.peer = op.peer;
        t.step = static_cast<int>(st);
        t.block = op.block;
        t.wireBlock = op.wire >= 0 ? op.wire : op.block;
        t.segment = s;
        t.offset = s * segmentElems;
        t.count = std::min(segmentElems, count - t.offset);
        const int64_t cell = cellBase[op.block] + s;
        const int32_t id = static_cast<int32_t>(plan.tasks.size());
        if (lastWriter[cell] >= 0) t.deps.push_back(lastWriter[cell]);
        if (op.kind == OpKind::Send) {
          readers[cell].push_back(id);
          plan.sendQueue[op.peer].push_back(id);
        } else {
          t.deps.insert(t.deps.end(), readers[cell].begin(), readers[cell].end());
          readers[cell].clear();
          lastWriter[cell] = id;
          if (op.kind == OpKind::Finalize) {
            plan.localQueue.push_back(id);
          } else {
            plan.recvQueue[op.peer].push_back(id);
          }
        }
        if (op.kind != OpKind::Finalize) peerUsed[op.peer] = true;
        plan.tasks.push_back(std::move(t));
      }
    }
    if (paceSegments > 0) paceStep(plan, compiled, paceSegments);
  }
  for (int p = 0; p < worldSize; ++p)
    if (peerUsed[p]) plan.peers.push_back(p);
  return plan;
}

}  // namespace scalecomm
