#include "algo/step_executor.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace scalecomm {

int64_t stepScratchBytes(const Schedule& s, DataType dtype) {
  const int64_t es = static_cast<int64_t>(elementSize(dtype));
  int64_t most = 0;
  for (const auto& step : s.steps) {
    int64_t bytes = 0;
    for (const auto& op : step.ops) {
      if (op.kind == OpKind::RecvReduce) bytes += s.blockCounts[op.block] * es;
    }
    most = std::max(most, bytes);
  }
  return most;
}

// A step's sends go out before its reductions and finalizes run, and a plain
// receive races with a send of the same block in one group: refuse schedules
// whose steps need another order. Linear in the step's ops: `firstWriter` and
// `received` are indexed by block, sized once per schedule and reset after
// each step for the blocks it touched.
namespace {
struct StepChecker {
  std::vector<size_t> firstWriter;  // index of the first non-send op per block (SIZE_MAX: none)
  std::vector<uint8_t> received;    // a plain Recv of the block in this step

  explicit StepChecker(size_t blocks) : firstWriter(blocks, SIZE_MAX), received(blocks, 0) {}

  void check(const Schedule& s, size_t index) {
    const auto& ops = s.steps[index].ops;
    for (size_t k = 0; k < ops.size(); ++k) {
      if (ops[k].kind == OpKind::Send) continue;
      const size_t b = static_cast<size_t>(ops[k].block);
      firstWriter[b] = std::min(firstWriter[b], k);
      if (ops[k].kind == OpKind::Recv) received[b] = 1;
    }
    int conflict = -1;
    for (size_t j = 0; j < ops.size() && conflict < 0; ++j) {
      const size_t b = static_cast<size_t>(ops[j].block);
      if (ops[j].kind == OpKind::Send && (received[b] || firstWriter[b] < j)) conflict = ops[j].block;
    }
    for (const auto& op : ops) {
      firstWriter[static_cast<size_t>(op.block)] = SIZE_MAX;
      received[static_cast<size_t>(op.block)] = 0;
    }
    if (conflict >= 0) {
      fail(ErrorKind::InvalidArgument, "scalecomm step executor: ", s.algorithm, " step ", index, " sends block ",
           conflict, " and also writes it; a grouped exchange cannot order the two");
    }
  }
};
}  // namespace

void runSteps(const Schedule& s, const std::vector<uint8_t*>& blockPtrs, const StepRun& run, StepTransport& transport,
              Reducer& reducer) {
  const int64_t es = static_cast<int64_t>(elementSize(run.dtype));
  const int64_t scratchBytes = stepScratchBytes(s, run.dtype);
  auto* scratch = static_cast<uint8_t*>(scratchBytes > 0 ? transport.scratch(scratchBytes) : nullptr);
  std::vector<StepOp> exchange;
  struct PendingReduce {
    int block;
    uint8_t* from;
  };
  std::vector<PendingReduce> reduces;
  StepChecker checker(s.blockCounts.size());
  for (size_t i = 0; i < s.steps.size(); ++i) {
    checker.check(s, i);
    exchange.clear();
    reduces.clear();
    int64_t used = 0;
    for (const auto& op : s.steps[i].ops) {
      const int64_t bytes = s.blockCounts[op.block] * es;
      switch (op.kind) {
        case OpKind::Send: exchange.push_back({true, op.peer, blockPtrs[op.block], bytes}); break;
        case OpKind::Recv: exchange.push_back({false, op.peer, blockPtrs[op.block], bytes}); break;
        case OpKind::RecvReduce:
          exchange.push_back({false, op.peer, scratch + used, bytes});
          reduces.push_back({op.block, scratch + used});
          used += bytes;
          break;
        case OpKind::Finalize: break;
      }
    }
    if (!exchange.empty()) transport.exchange(exchange);
    for (const auto& r : reduces) {
      reducer.reduce(blockPtrs[r.block], r.from, s.blockCounts[r.block], run.dtype, run.op);
    }
    for (const auto& op : s.steps[i].ops) {
      if (op.kind == OpKind::Finalize) {
        reducer.divide(blockPtrs[op.block], s.blockCounts[op.block], run.dtype, run.finalizeDivisor);
      }
    }
  }
}

}  // namespace scalecomm
