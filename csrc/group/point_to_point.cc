// The Group's sends and receives posted without waiting (isend/irecv): they
// progress together, as a batch does. A posted host send or receive is
// handed to the worker like any call; there it becomes an in-flight message
// (algo/collectives.h, PendingMessage), and the worker moves every in-flight
// message a piece at a time until they are all done or another call is
// queued behind them: a ring of isend/irecv larger than a link buffers
// completes, where running each send to its end before the next receive
// would wait for the peer's receive forever. Any other call drains the
// in-flight messages first (finishPointToPoint): collectives use the same
// links, whose streams must be at a message boundary. Worker thread only.
#include <algorithm>

#include "algo/collectives.h"
#include "comm/stream_channel.h"
#include "core/logging.h"
#include "group/group.h"
#include "group/timeline_record.h"

namespace scalecomm {

bool Group::runsInFlight(const Call& call) {
  return (call.kind == CallKind::Send || call.kind == CallKind::Recv) && call.deviceIndex < 0 && !call.stager;
}

void Group::runPointToPoint(Call&& call, uint64_t number, uint64_t recordId) {
  std::vector<Finished> finished;
  {
    std::lock_guard<std::mutex> exec(execMu_);
    const Clock::time_point start = Clock::now();
    watchStarted(recordId, call.algorithm.str(), start);
    std::optional<Error> error;
    if (state_->poisoned()) {
      error = Error(ErrorKind::Aborted,
                    strCat("scalecomm ", call.name, " (rank ", rank_, ", message ", number,
                           "): not run because the group is unusable after an earlier failure: ", state_->reason()));
    } else {
      try {
        if (call.before) call.before();
        CollectiveOptions o;
        o.algorithm = call.algorithm;
        o.segmentBytes = config_.segmentBytes;
        o.timeoutMs = call.timeoutMs;
        o.seq = call.kind == CallKind::Send ? number : ++received_[call.peer];
        o.deadline = Deadline::after(std::chrono::milliseconds(call.timeoutMs), start);
        const PointToPointOp op{
            call.kind == CallKind::Send, call.data, call.count, call.dtype, call.peer, call.tag, o.seq};
        auto message = std::make_unique<PendingMessage>(op, o, size_);
        inFlight_.push_back(
            std::make_unique<InFlight>(InFlight{std::move(call), number, recordId, start, std::move(message)}));
      } catch (const std::exception& e) {
        error = Error(ErrorKind::Io, strCat("scalecomm ", call.name, " (rank ", rank_, "): ", e.what()));
        state_->poison(error->kind(), error->what(), /*abortComm=*/false);
      }
    }
    if (error) {
      watchEnded(recordId, error->what());
      finished.push_back({std::move(call), std::move(error)});
    }
  }
  runDone(finished);
  progressInFlight(/*untilQueued=*/true);
}

void Group::finishPointToPoint() {
  if (!inFlight_.empty()) progressInFlight(/*untilQueued=*/false);
}

void Group::runDone(std::vector<Finished>& finished) {
  for (Finished& f : finished) {
    if (f.call.done) f.call.done(f.error ? &*f.error : nullptr);
  }
  finished.clear();
}

void Group::progressInFlight(bool untilQueued) {
  std::vector<Finished> finished;
  std::vector<int> peers;
  std::vector<uint8_t> busy(2 * static_cast<size_t>(size_));  // per peer and direction: its oldest message moved
  bool idle = false;
  Clock::time_point idleSince;
  while (!inFlight_.empty() && !(untilQueued && worker_->queued() > 0)) {
    bool moved = false;
    {
      std::lock_guard<std::mutex> exec(execMu_);
      Channel& ch = comm_->channel();
      // Only the oldest message per peer and direction moves (posting order on a link).
      std::fill(busy.begin(), busy.end(), 0);
      std::optional<Error> failure;
      uint64_t failedRecord = 0;
      for (auto it = inFlight_.begin(); it != inFlight_.end() && !failure;) {
        InFlight& f = **it;
        const PointToPointOp& op = f.message->op();
        uint8_t& slot = busy[2 * static_cast<size_t>(op.peer) + (op.send ? 1 : 0)];
        if (slot) {
          ++it;
          continue;
        }
        slot = 1;
        bool done = false;
        try {
          if (state_->poisoned()) fail(ErrorKind::Aborted, state_->reason());
          done = f.message->advance(ch, moved);
          if (!done && !moved && f.message->deadline().expired()) f.message->failTimeout(rank_);
          if (done && f.call.after) f.call.after();
        } catch (const Error& e) {
          failure = e;
        } catch (const std::exception& e) {
          failure = Error(ErrorKind::Io, strCat("scalecomm ", f.call.name, " (rank ", rank_, "): ", e.what()));
        }
        if (failure) {
          failedRecord = f.recordId;
          break;
        }
        if (!done) {
          ++it;
          continue;
        }
        const Clock::time_point end = Clock::now();
        state_->record(f.call.name, f.call.bytes, std::chrono::duration<double>(end - f.start).count());
        if (timelineRow_)
          recordOperation(*timelineRow_, f.call.name, f.number, f.call.bytes, f.start, end, ExecTrace(), *comm_, false);
        watchEnded(f.recordId, "", end);
        finished.push_back({std::move(f.call), std::nullopt});
        it = inFlight_.erase(it);
        moved = true;
      }
      if (failure) failInFlight(*failure, failedRecord, finished);
    }
    runDone(finished);
    if (moved) {
      idle = false;
      continue;
    }
    if (!idle) {
      idle = true;
      idleSince = Clock::now();
    }
    peers.clear();
    for (const auto& f : inFlight_) peers.push_back(f->message->op().peer);
    try {
      comm_->idle(peers, idleSince);
    } catch (const Error& e) {  // aborted: the next round fails every message with the reason
      if (!state_->poisoned()) state_->poison(e.kind(), e.what(), /*abortComm=*/false);
    }
  }
}

void Group::failInFlight(const Error& first, uint64_t recordId, std::vector<Finished>& finished) {
  // The first failure is the group's (a timeout says who lags); every other
  // in-flight message fails with it.
  const Error err = explained(first, recordId);
  SC_LOG(Warn, err.what());
  watchFailed(err.what());
  state_->poison(err.kind(), err.what(), /*abortComm=*/false);
  comm_->channel().start();  // forget the messages in flight (the group is unusable now)
  for (auto& f : inFlight_) {
    watchEnded(f->recordId, err.what());
    finished.push_back({std::move(f->call), err});
  }
  inFlight_.clear();
}

}  // namespace scalecomm
