#include "cuda/nccl_collectives.h"

#include "algo/collectives.h"
#include "algo/step_executor.h"
#include "core/error.h"
#include "cuda/nvtx_ranges.h"
#include "cuda/reduce_kernels.h"

namespace scalecomm::cuda {

namespace {

// One schedule step = one NCCL group of sends and receives on the stream.
class NcclStepTransport : public StepTransport {
 public:
  NcclStepTransport(NcclComm& comm, const Deadline& deadline) : comm_(comm), deadline_(deadline) {}
  ~NcclStepTransport() override {
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, comm_.stream());  // stream-ordered: after the last use
  }
  void exchange(const std::vector<StepOp>& ops) override {
    // Nsight: "scalecomm step 3: send 1048576 B to 1, recv 1048576 B from 3" (host-side issue).
    const uint64_t range = nvtxEnabled() ? nvtxBegin(describeStep(ops)) : 0;
    ++step_;
    comm_.check(ncclGroupStart(), "ncclGroupStart");
    for (const auto& op : ops) {
      const size_t n = static_cast<size_t>(op.bytes);
      if (op.send) {
        comm_.check(ncclSend(op.data, n, ncclUint8, op.peer, comm_.comm(), comm_.stream()), "ncclSend");
      } else {
        comm_.check(ncclRecv(op.data, n, ncclUint8, op.peer, comm_.comm(), comm_.stream()), "ncclRecv");
      }
    }
    comm_.check(ncclGroupEnd(), "ncclGroupEnd");
    comm_.waitIssued(deadline_, "ncclGroupEnd of a schedule step");
    nvtxEnd(range);
  }
  void* scratch(int64_t bytes) override {
    if (scratch_ != nullptr) cudaFreeAsync(scratch_, comm_.stream());
    scratch_ = nullptr;
    checkCuda(cudaMallocAsync(&scratch_, static_cast<size_t>(bytes), comm_.stream()), "cudaMallocAsync (scratch)");
    return scratch_;
  }

 private:
  std::string describeStep(const std::vector<StepOp>& ops) const {
    std::string text = strCat("scalecomm step ", step_, ":");
    for (const auto& op : ops) {
      text += strCat(op.send ? " send " : " recv ", op.bytes, op.send ? " B to " : " B from ", op.peer, ";");
    }
    return text;
  }
  NcclComm& comm_;
  Deadline deadline_;
  void* scratch_ = nullptr;
  int step_ = 0;
};

// Our kernels on the communicator's stream, in issue order with NCCL's work.
class StreamReducer : public Reducer {
 public:
  explicit StreamReducer(cudaStream_t s) : stream_(s) {}
  void reduce(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op) override {
    reduceInto(dst, src, count, dtype, op, stream_);
  }
  void divide(void* data, int64_t count, DataType dtype, int64_t divisor) override {
    divideInPlace(data, count, dtype, divisor, stream_);
  }
  void fence() override { checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_;
};

ncclDataType_t reducibleType(NcclComm& comm, DataType dtype, const char* what) {
  ncclDataType_t t;
  if (!ncclTypeOf(dtype, &t)) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", what, " (rank ", comm.rank(), "): NCCL has no ", dataTypeName(dtype),
         " type; choose a scalecomm algorithm (ring, rhd, ...) for this dtype");
  }
  return t;
}

ncclRedOp_t reduceOp(NcclComm& comm, ReduceOp op, const char* what) {
  ncclRedOp_t r;
  if (!ncclOpOf(op, &r)) {
    fail(ErrorKind::InvalidArgument, "scalecomm ", what, " (rank ", comm.rank(), "): NCCL has no ", reduceOpName(op),
         "; choose a scalecomm algorithm (ring, rhd, ...) for this op");
  }
  return r;
}

}  // namespace

void stepsAllreduce(NcclComm& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                    const std::string& algorithm, const AlgoParams& params, const Deadline& deadline) {
  const int n = comm.size();
  if (op == ReduceOp::PremulSum) scaleInPlace(data, count, dtype, premulFactor, comm.stream());
  if (count == 0) return;
  if (n == 1) return;  // AVG over one rank divides by 1
  const bool avg = op == ReduceOp::Avg;
  Schedule s = allreduceSchedule(algorithm, comm.rank(), n, count, avg, params);
  std::vector<uint8_t*> blocks;
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t c : s.blockCounts) {
    blocks.push_back(p);
    p += c * static_cast<int64_t>(elementSize(dtype));
  }
  NcclStepTransport transport(comm, deadline);
  StreamReducer reducer(comm.stream());
  runSteps(s, blocks, StepRun{dtype, op, avg ? n : 1}, transport, reducer);
}

void nativeAllreduce(NcclComm& comm, void* data, int64_t count, DataType dtype, ReduceOp op, double premulFactor,
                     const Deadline& deadline) {
  const ncclDataType_t t = reducibleType(comm, dtype, "allreduce:nccl");
  const ncclRedOp_t r = reduceOp(comm, op, "allreduce:nccl");
  if (op == ReduceOp::PremulSum) scaleInPlace(data, count, dtype, premulFactor, comm.stream());
  comm.check(ncclAllReduce(data, data, static_cast<size_t>(count), t, r, comm.comm(), comm.stream()), "ncclAllReduce");
  comm.waitIssued(deadline, "ncclAllReduce");
}

}  // namespace scalecomm::cuda
