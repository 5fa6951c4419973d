#include "torch/work.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

namespace scalecomm {

namespace {

c10::TypePtr futureType() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}

}  // namespace

ScalecommWork::ScalecommWork(int rank, c10d::OpType type, Label collective, uint64_t seq,
                             std::vector<at::Tensor> outputs, std::shared_ptr<GroupState> group)
    // The profiling title ("scalecomm:allreduce:ring") names the op in
    // torch.profiler traces. Only when a profiler listens to the scope c10d's
    // Work records in: without one it would build and drop a RecordFunction
    // per call, and the title is not even formatted (the temporary outlives
    // the base's constructor). This is the test the base's RecordFunction
    // makes (USER_SCOPE), from this thread's cached view of the callbacks
    // (at::hasCallbacks() costs ~200 instructions per call).
    : c10d::Work(rank, type,
                 at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value()
                     ? ("scalecomm:" + collective.str()).c_str()
                     : nullptr),
      collective_(collective),
      seq_(seq),
      outputs_(std::move(outputs)),
      group_(std::move(group)) {}

void ScalecommWork::endProfilingRange() {
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
}

// The Future is made on first use (DDP's comm hooks, get_future()): most
// synchronous calls never ask for one. Whoever of finish/finishError and
// getFuture comes second completes it, outside the lock.
void ScalecommWork::completeFuture(const c10::intrusive_ptr<c10::ivalue::Future>& f) {
  if (error_) {
    f->setError(error_);
  } else {
    f->markCompleted(c10::IValue(outputs()));
  }
}

void ScalecommWork::finish() {
  endProfilingRange();
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> g(mu_);
    done_.store(true, std::memory_order_release);
    f = future_;
  }
  cv_.notify_all();
  if (f) completeFuture(f);
}

void ScalecommWork::finishError(std::exception_ptr error) {
  endProfilingRange();
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> g(mu_);
    error_ = error;
    done_.store(true, std::memory_order_release);
    f = future_;
  }
  cv_.notify_all();
  if (f) completeFuture(f);
}

bool ScalecommWork::isCompleted() { return done_.load(std::memory_order_acquire); }

bool ScalecommWork::isSuccess() const {
  std::lock_guard<std::mutex> g(mu_);
  return done_.load() && !error_;
}

std::exception_ptr ScalecommWork::exception() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

void ScalecommWork::holdOutputsWeaklyIfSucceeded() {
  // error_ is written before done_'s release store and never again.
  if (!done_.load(std::memory_order_acquire) || error_) return;
  for (const at::Tensor& t : outputs_)
    if (!t.defined()) return;
  for (const at::Tensor& t : outputs_) weakOutputs_.emplace_back(t.getIntrusivePtr());
  outputs_.clear();
  weak_ = true;
}

std::vector<at::Tensor> ScalecommWork::outputs() const {
  if (!weak_) return outputs_;
  std::vector<at::Tensor> out;
  out.reserve(weakOutputs_.size());
  for (const auto& w : weakOutputs_) {
    auto impl = w.lock();
    TORCH_CHECK(impl, "scalecomm ", collective_, " (rank ", group_->rank(), ", seq ", seq_.load(),
                "): the output tensors of this completed call were freed; keep them while you use result() or the "
                "Future of a synchronous call");
    out.emplace_back(std::move(impl));
  }
  return out;
}

std::vector<at::Tensor> ScalecommWork::result() { return outputs(); }

bool ScalecommWork::wait(std::chrono::milliseconds timeout) {
  // Complete already (a call run on the caller's thread): no lock, no clock.
  // error_ is written before done_'s release store and never again.
  if (!call_ && done_.load(std::memory_order_acquire)) {
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  // No spinning here: with as many ranks as cores, a spinning caller steals
  // the core its own worker needs (measured: 8-byte latency 28 us -> 120 us).
  std::unique_lock<std::mutex> g(mu_);
  // GPU work: the CPU waits until it is queued (or failed), the stream for the
  // rest. Nobody signals "queued", so that wait looks every 50 us.
  auto ready = [&] { return done_.load() || (call_ && call_->issued()); };
  const auto until = std::chrono::steady_clock::now() +
                     (timeout == kNoTimeout ? std::chrono::milliseconds(std::chrono::hours(24 * 365)) : timeout);
  bool ok = true;
  if (!call_ && timeout == kNoTimeout) cv_.wait(g, ready);
  while (!ready()) {
    const auto slice = call_ ? std::chrono::steady_clock::now() + std::chrono::microseconds(50) : until;
    cv_.wait_until(g, std::min(slice, until), ready);
    if (!ready() && std::chrono::steady_clock::now() >= until) {
      ok = false;
      break;
    }
  }
  if (!ok) {
    g.unlock();
    std::string msg = strCat("scalecomm ", collective_, " (rank ", group_->rank(), ", seq ", seq_.load(),
                             "): wait() Timed out after ", timeout.count(),
                             " ms; the collective was aborted on this rank and the group is now "
                             "unusable: destroy it and create a new one.");
    group_->poison(ErrorKind::Timeout, msg, /*abortComm=*/true);
    C10_THROW_ERROR(DistBackendError, msg);
  }
  if (error_) std::rethrow_exception(error_);
  if (call_) call_->waitOnCurrentStream();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> ScalecommWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  bool complete = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (future_) return future_;
    future_ = f = c10::make_intrusive<c10::ivalue::Future>(futureType());
    complete = done_.load();
  }
  if (complete) completeFuture(f);
  return f;
}

void ScalecommWork::abort() {
  group_->poison(
      ErrorKind::Aborted,
      strCat("scalecomm ", collective_, " (rank ", group_->rank(), ", seq ", seq_.load(), "): Work.abort() was called"),
      /*abortComm=*/true);
}

int ScalecommWork::sourceRank() const {
  const int r = source_ ? source_->load() : -1;
  TORCH_CHECK(r >= 0, "scalecomm ", collective_,
              ": sourceRank() is only known for a completed receive from any source");
  return r;
}

}  // namespace scalecomm
