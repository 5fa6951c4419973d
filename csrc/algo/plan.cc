#include "algo/plan.h"

#include <algorithm>

#include "core/error.h"

namespace scalecomm {

Plan compilePlan(const Schedule& schedule, int worldSize, int64_t segmentElems) {
  SC_CHECK(segmentElems > 0);
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

  for (size_t st = 0; st < schedule.steps.size(); ++st) {
    for (const ScheduleOp& op : schedule.steps[st].ops) {
      SC_CHECK(op.block >= 0 && static_cast<size_t>(op.block) < nblocks, "block ", op.block);
      SC_CHECK(op.kind == OpKind::Finalize || (op.peer >= 0 && op.peer < worldSize), "peer ", op.peer);
      const int64_t count = schedule.blockCounts[op.block];
      const int64_t segs = cellBase[op.block + 1] - cellBase[op.block];
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
  }
  for (int p = 0; p < worldSize; ++p)
    if (peerUsed[p]) plan.peers.push_back(p);
  return plan;
}

}  // namespace scalecomm
