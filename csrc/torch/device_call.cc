#include "torch/device_call.h"

#include "torch/validate.h"

#include <c10/util/Exception.h>

#ifdef SCALECOMM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "core/error.h"

namespace scalecomm {

#ifdef SCALECOMM_WITH_CUDA

static void cudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(ErrorKind::Io, "scalecomm: ", what, " failed: ", cudaGetErrorString(e));
}

std::shared_ptr<DeviceCall> DeviceCall::begin(c10::ArrayRef<at::Tensor> tensors, const char* collective, int rank) {
  int device = -1;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    TORCH_CHECK_VALUE(device < 0 || device == t.device().index(), "scalecomm ", collective, " (rank ", rank,
                      "): tensors are on cuda:", device, " and cuda:", t.device().index(),
                      "; one collective takes tensors on one device");
    device = t.device().index();
  }
  if (device < 0) return nullptr;
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(!t.defined() || t.is_cuda(), "scalecomm ", collective, " (rank ", rank,
                      "): mixes CPU and CUDA tensors; pass all on cuda:", device, " or all on the CPU");
  }
  std::shared_ptr<DeviceCall> call(new DeviceCall());
  call->device_ = device;
  call->tensors_ = tensors.vec();
  c10::cuda::CUDAGuard guard(device);
  cudaEvent_t ready, done;
  cudaCheck(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
  cudaCheck(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  call->ready_ = ready;
  call->done_ = done;
  const cudaStream_t current = c10::cuda::getCurrentCUDAStream(device).stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaCheck(cudaStreamIsCapturing(current, &capture), "cudaStreamIsCapturing");
  call->capturing_ = capture == cudaStreamCaptureStatusActive;
  cudaCheck(cudaEventRecord(ready, current), "cudaEventRecord");
  return call;
}

DeviceCall::~DeviceCall() {
  if (ready_) cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
  if (done_) cudaEventDestroy(static_cast<cudaEvent_t>(done_));
}

void DeviceCall::orderAfterInputs(void* stream) {
  c10::cuda::CUDAGuard guard(device_);
  auto s = static_cast<cudaStream_t>(stream);
  cudaCheck(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(ready_), 0), "cudaStreamWaitEvent");
  const auto ext = c10::cuda::getStreamFromExternal(s, device_);
  for (const auto& t : tensors_) {
    if (t.defined() && t.storage().data_ptr())
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), ext);
  }
}

void DeviceCall::markIssued(void* stream) {
  c10::cuda::CUDAGuard guard(device_);
  cudaCheck(cudaEventRecord(static_cast<cudaEvent_t>(done_), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  issued_.store(true, std::memory_order_release);
}

void DeviceCall::waitOnCurrentStream() {
  c10::cuda::CUDAGuard guard(device_);
  cudaCheck(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), static_cast<cudaEvent_t>(done_), 0),
            "cudaStreamWaitEvent");
}

void DeviceCall::begin(void* stream) {
  orderAfterInputs(stream);
  current_ =
      std::make_unique<c10::StreamGuard>(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), device_));
}

void* DeviceCall::end(void* stream) {
  current_.reset();
  markIssued(stream);
  return done_;
}

at::Tensor HostStage::stage(const at::Tensor& t, bool down, bool up) {
  if (!call_ || !t.is_cuda() || direct_) return stageCpu(t, down, up);
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  pairs_.push_back({t, host, down, up});
  return host;
}

void HostStage::toHost() {
  copyCpuIn();
  if (!call_ || direct_ || pairs_.empty()) return;
  c10::cuda::CUDAGuard guard(call_->device());
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, call_->device());
  call_->orderAfterInputs(stream.stream());
  {
    c10::cuda::CUDAStreamGuard sg(stream);
    for (auto& p : pairs_) {
      if (p.down) p.host.copy_(p.device, /*non_blocking=*/true);
    }
  }
  cudaCheck(cudaStreamSynchronize(stream.stream()), "cudaStreamSynchronize (staging to host)");
}

void HostStage::toDevice() {
  copyCpuOut();
  if (!call_ || direct_ || pairs_.empty()) return;
  c10::cuda::CUDAGuard guard(call_->device());
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, call_->device());
  {
    c10::cuda::CUDAStreamGuard sg(stream);
    for (auto& p : pairs_) {
      if (p.up) p.device.copy_(p.host, /*non_blocking=*/true);
    }
  }
  call_->markIssued(stream.stream());
  cudaCheck(cudaStreamSynchronize(stream.stream()), "cudaStreamSynchronize (staging to device)");
}

namespace {

class CudaStager final : public Stager {
 public:
  CudaStager(std::shared_ptr<DeviceCall> call, const at::Tensor& t, bool down, bool up, int64_t chunkBytes)
      : call_(std::move(call)),
        tensor_(t),
        base_(static_cast<uint8_t*>(t.data_ptr())),
        down_(down),
        up_(up),
        chunk_(chunkBytes),
        stream_(c10::cuda::getStreamFromPool(false, call_->device())) {
    c10::cuda::CUDAGuard guard(call_->device());
    for (int s = 0; s < 2; ++s) {
      slots_[s] = at::empty({chunk_}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      cudaEvent_t e;
      cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
      downDone_[s] = e;
    }
  }
  ~CudaStager() override {
    c10::cuda::CUDAGuard guard(call_->device());
    cudaStreamSynchronize(stream_.stream());  // the slots outlive their copies
    for (cudaEvent_t e : downDone_)
      if (e) cudaEventDestroy(e);
  }
  int64_t chunkBytes() const override { return chunk_; }
  void down(int slot, int64_t offset, int64_t bytes) override {
    c10::cuda::CUDAGuard guard(call_->device());
    if (!ordered_) {
      call_->orderAfterInputs(stream_.stream());
      ordered_ = true;
    }
    if (down_ && bytes > 0) {
      cudaCheck(cudaMemcpyAsync(slots_[slot].data_ptr(), base_ + offset, static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToHost, stream_.stream()),
                "cudaMemcpyAsync (staging a chunk to host)");
    }
    cudaCheck(cudaEventRecord(downDone_[slot], stream_.stream()), "cudaEventRecord");
  }
  void* ready(int slot) override {
    cudaCheck(cudaEventSynchronize(downDone_[slot]), "cudaEventSynchronize (staging a chunk to host)");
    return slots_[slot].data_ptr();
  }
  void up(int slot, int64_t offset, int64_t bytes) override {
    if (!up_ || bytes == 0) return;
    c10::cuda::CUDAGuard guard(call_->device());
    cudaCheck(cudaMemcpyAsync(base_ + offset, slots_[slot].data_ptr(), static_cast<size_t>(bytes),
                              cudaMemcpyHostToDevice, stream_.stream()),
              "cudaMemcpyAsync (staging a chunk to the device)");
  }
  void finish() override {
    c10::cuda::CUDAGuard guard(call_->device());
    call_->markIssued(stream_.stream());
    cudaCheck(cudaStreamSynchronize(stream_.stream()), "cudaStreamSynchronize (staging to device)");
  }

 private:
  std::shared_ptr<DeviceCall> call_;
  at::Tensor tensor_;  // kept alive while copies may run
  uint8_t* base_;
  bool down_, up_;
  int64_t chunk_;
  c10::cuda::CUDAStream stream_;
  at::Tensor slots_[2];
  cudaEvent_t downDone_[2] = {nullptr, nullptr};
  bool ordered_ = false;
};

}  // namespace

std::shared_ptr<Stager> HostStage::chunked(const at::Tensor& t, bool down, bool up, int64_t chunkBytes) {
  if (!call_ || direct_) return nullptr;  // every CPU call, on its per-call path: nothing else to look at
  const auto bytes = static_cast<int64_t>(t.nbytes());
  const auto es = static_cast<int64_t>(t.element_size());
  const int64_t chunk = chunkBytes - chunkBytes % es;
  if (!t.is_cuda() || !t.is_contiguous() || bytes <= chunk || chunk <= 0) return nullptr;
  return std::make_shared<CudaStager>(call_, t, down, up, chunk);
}

#else  // no CUDA in this build

std::shared_ptr<DeviceCall> DeviceCall::begin(c10::ArrayRef<at::Tensor> tensors, const char* collective, int rank) {
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(!t.defined() || t.device().is_cpu(), "scalecomm ", collective, " (rank ", rank,
                      "): tensor is on ", t.device(),
                      " but this scalecomm build has no CUDA (built with SCALECOMM_CUDA=0 or without a toolkit); "
                      "move it to the CPU or rebuild with CUDA_HOME set");
  }
  return nullptr;
}
DeviceCall::~DeviceCall() = default;
void DeviceCall::orderAfterInputs(void*) {}
void DeviceCall::markIssued(void*) { issued_.store(true); }
void DeviceCall::waitOnCurrentStream() {}
void DeviceCall::begin(void*) {}
void* DeviceCall::end(void*) { return nullptr; }
at::Tensor HostStage::stage(const at::Tensor& t, bool down, bool up) { return stageCpu(t, down, up); }
std::shared_ptr<Stager> HostStage::chunked(const at::Tensor&, bool, bool, int64_t) { return nullptr; }
void HostStage::toHost() { copyCpuIn(); }
void HostStage::toDevice() { copyCpuOut(); }

#endif

at::Tensor HostStage::stageCpu(const at::Tensor& t, bool down, bool up) {
  if (!t.defined() || t.is_contiguous()) return t;
  if (up) checkWritable(collective_, rank_, t);
  at::Tensor dense = at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  cpuPairs_.push_back({t, dense, down, up});
  return dense;
}

void HostStage::copyCpuIn() {
  for (auto& p : cpuPairs_)
    if (p.down) p.host.copy_(p.device);
}

void HostStage::copyCpuOut() {
  for (auto& p : cpuPairs_)
    if (p.up) p.device.copy_(p.host);
}

}  // namespace scalecomm
