// scalecomm torch adapter: one collective's CUDA tensors, ordered with the
// caller's stream as PyTorch defines it.
//
// Contract:
// - DeviceCall::begin() runs on the caller's thread when a collective gets
//   CUDA tensors (null for CPU-only calls): it checks they share one device and
//   records a "ready" event on that device's current stream, so the
//   collective's work runs after everything the caller queued before the call.
// - The worker orders its stream after `ready` (orderAfterInputs), queues the
//   collective, records `done` on that stream (markIssued) and waits for it;
//   tensors used on that stream are recorded with the caching allocator so an
//   early free cannot recycle them.
// - Work::wait() calls waitOnCurrentStream(): the caller's current stream waits
//   for `done` without blocking the CPU (after the worker issued the work).
// - CUDA graph capture: a call made while the caller's stream is capturing
//   (capturing()) joins the capture through `ready` (the worker's stream
//   waits on it) and leaves it through `done` (wait() joins it back, as a
//   synchronous call does); the group issues it without waiting for it, since
//   a captured call runs at each replay, not now.
// - HostStage carries CUDA tensors through pinned host memory for the CPU
//   transports (shm, tcp, mpi): input()/output()/inout() hand the body a
//   pinned host tensor; toHost() before the body copies inputs down (after
//   `ready`), toDevice() after it copies outputs up and waits for the copies;
//   for allreduce, broadcast and reduce of large tensors chunked() instead
//   overlaps the copies with the collective, chunk by chunk (group.h Stager).
//   With direct(), CUDA tensors are not staged: the Group runs the call on
//   the device's queued channel (DeviceSync). Non-contiguous CPU tensors (and
//   CUDA ones on the direct path) go through a contiguous copy the same way
//   (made when the call runs, copied back after it). For contiguous CPU
//   tensors every method is the identity and nothing is copied.
// Builds without CUDA compile all of this to "no CUDA tensors here": begin()
// refuses CUDA tensors with a ValueError naming the collective and rank.
// Thread safety: begin/input/output on the caller; the rest on the worker,
// except waitOnCurrentStream (caller) and issued() (any thread).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>

#include <atomic>
#include <memory>
#include <vector>

#include "group/group.h"

namespace scalecomm {

class DeviceCall final : public DeviceSync {
 public:
  static std::shared_ptr<DeviceCall> begin(c10::ArrayRef<at::Tensor> tensors, const char* collective, int rank);
  ~DeviceCall();
  int device() const { return device_; }
  // Worker side. `stream` is a cudaStream_t.
  void orderAfterInputs(void* stream);
  void markIssued(void* stream);
  void* doneEvent() const { return done_; }
  bool issued() const { return issued_.load(std::memory_order_acquire); }
  // Caller side (Work::wait): the current stream waits for the collective.
  void waitOnCurrentStream();
  // DeviceSync (the Group, for a call on a device's queued channel):
  // begin() orders `stream` after the inputs and makes it this thread's
  // current stream (so the call's copies queue on it); end() restores the
  // thread's stream, records `done` on `stream` and returns it.
  void begin(void* stream) override;
  void* end(void* stream) override;
  // The caller's stream was being captured into a CUDA graph when the call was made.
  bool capturing() const override { return capturing_; }

 private:
  DeviceCall() = default;
  int device_ = -1;
  bool capturing_ = false;
  void* ready_ = nullptr;  // cudaEvent_t
  void* done_ = nullptr;
  std::vector<at::Tensor> tensors_;
  std::atomic<bool> issued_{false};
  std::unique_ptr<c10::StreamGuard> current_;
};

class HostStage {
 public:
  explicit HostStage(std::shared_ptr<DeviceCall> call, bool direct = false, const char* collective = "collective",
                     int rank = -1)
      : call_(std::move(call)), direct_(direct && call_ != nullptr), collective_(collective), rank_(rank) {}
  // A stage for a call on `tensors` (`call`: their DeviceCall, null for CPU
  // tensors); for contiguous CPU tensors one shared, stateless instance, so
  // that path allocates nothing per call. `direct`: CUDA tensors stay on the
  // device (the call runs on the device's queued channel); only
  // non-contiguous ones get a contiguous copy on the device, made and copied
  // back on the channel's stream.
  // An output (or in-out) tensor that is not contiguous is checked when it
  // is staged: one whose elements share memory (an expanded, stride-0 view)
  // cannot hold a result and raises ValueError naming `collective` and
  // `rank`, before anything is sent (a contiguous tensor never does).
  static std::shared_ptr<HostStage> forCall(std::shared_ptr<DeviceCall> call, c10::ArrayRef<at::Tensor> tensors,
                                            bool direct = false, const char* collective = "collective", int rank = -1) {
    static const auto cpuOnly = std::make_shared<HostStage>(nullptr);
    if (call) return std::make_shared<HostStage>(std::move(call), direct, collective, rank);
    for (const auto& t : tensors)
      if (t.defined() && !t.is_contiguous()) return std::make_shared<HostStage>(nullptr, false, collective, rank);
    return cpuOnly;
  }
  // Copies run around the call (device staging or contiguous copies).
  bool active() const { return call_ != nullptr || !cpuPairs_.empty(); }
  // Device work is involved (the call must run on the worker).
  bool onDevice() const { return call_ != nullptr; }
  // The buffers stay on the device: the call runs on its queued channel.
  bool direct() const { return direct_; }
  const std::shared_ptr<DeviceCall>& deviceCall() const { return call_; }
  at::Tensor input(const at::Tensor& t) { return stage(t, true, false); }
  at::Tensor output(const at::Tensor& t) { return stage(t, false, true); }
  at::Tensor inout(const at::Tensor& t) { return stage(t, true, true); }
  std::vector<at::Tensor> inputs(const std::vector<at::Tensor>& ts) { return stageAll(ts, true, false); }
  std::vector<at::Tensor> outputs(const std::vector<at::Tensor>& ts) { return stageAll(ts, false, true); }
  std::vector<at::Tensor> inouts(const std::vector<at::Tensor>& ts) { return stageAll(ts, true, true); }
  void toHost();
  void toDevice();
  // Allreduce, broadcast and reduce of a CUDA tensor staged through host
  // memory (not direct): a Stager that moves it in chunks of `chunkBytes`
  // through two pinned host buffers on one copy stream ordered after the
  // caller's inputs (`down`: this rank's input goes down; `up`: its result
  // comes up; finish() marks the call issued). Null when the tensor fits in
  // one chunk or needs no staging: stage it whole with input()/inout().
  std::shared_ptr<Stager> chunked(const at::Tensor& t, bool down, bool up, int64_t chunkBytes);

 private:
  struct Pair {
    at::Tensor device, host;
    bool down, up;
  };
  at::Tensor stage(const at::Tensor& t, bool down, bool up);
  at::Tensor stageCpu(const at::Tensor& t, bool down, bool up);  // non-contiguous CPU tensors
  void copyCpuIn();
  void copyCpuOut();
  std::vector<at::Tensor> stageAll(const std::vector<at::Tensor>& ts, bool down, bool up) {
    std::vector<at::Tensor> out;
    for (const auto& t : ts) out.push_back(stage(t, down, up));
    return out;
  }
  std::shared_ptr<DeviceCall> call_;
  bool direct_;
  const char* collective_;  // for errors
  int rank_;
  std::vector<Pair> pairs_;     // CUDA tensor, pinned host copy
  std::vector<Pair> cpuPairs_;  // non-contiguous CPU tensor, contiguous copy
};

}  // namespace scalecomm
