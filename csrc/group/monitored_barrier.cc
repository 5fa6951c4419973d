#include "group/monitored_barrier.h"

#include "comm/communicator.h"
#include "comm/stream_channel.h"

#include "core/error.h"

namespace scalecomm {

namespace {

constexpr int kMonitoredBarrierTag = -0x4d42;  // "MB"; user tags are not negative in practice

}  // namespace

void monitoredBarrier(Communicator& comm, bool waitAllRanks, std::vector<uint64_t>& received,
                      const std::vector<uint64_t>& outSeq, const CollectiveOptions& base) {
  const int n = comm.size(), rank = comm.rank();
  uint8_t token = 1;
  auto withSeq = [&](uint64_t seq) {
    CollectiveOptions o = base;
    o.seq = seq;
    // A rank heard after the deadline is still heard if its message is
    // already here: give each later receive a short grace period.
    if (o.deadline.remainingMs() <= 0) o.deadline = Deadline::after(std::chrono::milliseconds(100));
    return o;
  };
  if (rank != 0) {
    try {
      sendTo(comm.channel(), &token, 1, DataType::UInt8, 0, kMonitoredBarrierTag, withSeq(outSeq[0]));
      recvFrom(comm.channel(), &token, 1, DataType::UInt8, 0, kMonitoredBarrierTag, withSeq(++received[0]));
    } catch (const Error& e) {
      fail(e.kind(), "scalecomm monitored_barrier: Rank ", rank,
           " successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0 "
           "(rank 0 reports which ranks did not arrive): ",
           e.what());
    }
    return;
  }
  std::string missing;
  int count = 0;
  for (int r = 1; r < n; ++r) {
    try {
      recvFrom(comm.channel(), &token, 1, DataType::UInt8, r, kMonitoredBarrierTag, withSeq(++received[r]));
    } catch (const Error&) {
      missing += strCat(missing.empty() ? "" : ", ", r);
      ++count;
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    fail(ErrorKind::Timeout, "scalecomm monitored_barrier (rank 0): ", count == 1 ? "Rank " : "Ranks ", missing,
         " failed to pass monitoredBarrier in ", base.timeoutMs, " ms",
         waitAllRanks ? "" : " (the first one missing; wait_all_ranks=True lists all)",
         ". Check those ranks for a hang, a crash or a different code path.");
  }
  for (int r = 1; r < n; ++r)
    sendTo(comm.channel(), &token, 1, DataType::UInt8, r, kMonitoredBarrierTag, withSeq(outSeq[r]));
}

}  // namespace scalecomm
