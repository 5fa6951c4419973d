#include <cuda_runtime.h>

#include <algorithm>

#include "comm/cuda/reduce_kernels.h"
#include "core/elementwise.h"
#include "core/error.h"
#include "core/type_dispatch.h"

namespace scalecomm::cuda {

namespace {

constexpr int kThreads = 256;

template <typename E>
struct alignas(16) Vec16 {
  static constexpr int kN = 16 / sizeof(E);
  E v[kN];
};

// dst[i] = op(dst[i], src[i]) over a grid-stride loop; `vectorized` (both
// pointers 16-byte aligned) moves 16 bytes per load, the tail element-wise.
template <typename Tag, ReduceOp Op>
__global__ void reduceKernel(typename Storage<Tag>::Elem* dst, const typename Storage<Tag>::Elem* src, int64_t n,
                             bool vectorized) {
  using E = typename Storage<Tag>::Elem;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vectorized) {
    constexpr int V = Vec16<E>::kN;
    const int64_t nvec = n / V;
    auto* dv = reinterpret_cast<Vec16<E>*>(dst);
    const auto* sv = reinterpret_cast<const Vec16<E>*>(src);
    for (int64_t i = first; i < nvec; i += stride) {
      Vec16<E> a = dv[i];
      const Vec16<E> b = sv[i];
#pragma unroll
      for (int k = 0; k < V; ++k) a.v[k] = reduceElement<Tag, Op>(a.v[k], b.v[k]);
      dv[i] = a;
    }
    done = nvec * V;
  }
  for (int64_t i = done + first; i < n; i += stride) dst[i] = reduceElement<Tag, Op>(dst[i], src[i]);
}

template <typename Tag>
__global__ void scaleKernel(typename Storage<Tag>::Elem* p, int64_t n, double factor) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = scaleElement<Tag>(p[i], factor);
  }
}

template <typename Tag>
__global__ void divideKernel(typename Storage<Tag>::Elem* p, int64_t n, int64_t divisor) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    p[i] = divideElement<Tag>(p[i], divisor);
  }
}

unsigned blocksFor(int64_t items) {
  const int64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 8192)));
}

void checkLaunch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    fail(ErrorKind::Io, "scalecomm cuda: launching ", kernel, " failed: ", cudaGetErrorString(err));
  }
}

}  // namespace

void reduceInto(void* dst, const void* src, int64_t count, DataType dtype, ReduceOp op, void* stream) {
  SC_CHECK(reduceOpSupports(op, dtype), reduceOpName(op), " on ", dataTypeName(dtype));
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) % 16 == 0) && (reinterpret_cast<uintptr_t>(src) % 16 == 0);
  dispatchReduction(dtype, op, [&](auto tag, auto opc) {
    using Tag = decltype(tag);
    using E = typename Storage<Tag>::Elem;
    constexpr ReduceOp Op = decltype(opc)::value;
    const int64_t items = aligned ? count / Vec16<E>::kN + 1 : count;
    reduceKernel<Tag, Op>
        <<<blocksFor(items), kThreads, 0, s>>>(static_cast<E*>(dst), static_cast<const E*>(src), count, aligned);
    checkLaunch("reduceKernel");
  });
}

void scaleInPlace(void* data, int64_t count, DataType dtype, double factor, void* stream) {
  SC_CHECK(isFloating(dtype));
  if (count == 0) return;
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    scaleKernel<Tag><<<blocksFor(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<typename Storage<Tag>::Elem*>(data), count, factor);
    checkLaunch("scaleKernel");
  });
}

void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor, void* stream) {
  if (count == 0) return;
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    divideKernel<Tag><<<blocksFor(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<typename Storage<Tag>::Elem*>(data), count, divisor);
    checkLaunch("divideKernel");
  });
}

}  // namespace scalecomm::cuda
