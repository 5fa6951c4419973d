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

// p[i] = f(p[i]) over a grid-stride loop; `vectorized` (p 16-byte aligned)
// moves 16 bytes per load, the tail element-wise.
template <typename E, typename F>
__global__ void mapKernel(E* p, int64_t n, bool vectorized, F f) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vectorized) {
    constexpr int V = Vec16<E>::kN;
    const int64_t nvec = n / V;
    auto* pv = reinterpret_cast<Vec16<E>*>(p);
    for (int64_t i = first; i < nvec; i += stride) {
      Vec16<E> a = pv[i];
#pragma unroll
      for (int k = 0; k < V; ++k) a.v[k] = f(a.v[k]);
      pv[i] = a;
    }
    done = nvec * V;
  }
  for (int64_t i = done + first; i < n; i += stride) p[i] = f(p[i]);
}

template <typename Tag>
struct ScaleBy {
  double factor;
  __device__ typename Storage<Tag>::Elem operator()(typename Storage<Tag>::Elem x) const {
    return scaleElement<Tag>(x, factor);
  }
};

template <typename Tag>
struct DivideBy {
  int64_t divisor;
  __device__ typename Storage<Tag>::Elem operator()(typename Storage<Tag>::Elem x) const {
    return divideElement<Tag>(x, divisor);
  }
};

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

// Launches mapKernel over `count` elements of `data` with f(tag) on `stream`.
template <typename MakeF>
void mapInPlace(void* data, int64_t count, DataType dtype, void* stream, const char* what, MakeF makeF) {
  if (count == 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
  dispatchType(dtype, [&](auto tag) {
    using Tag = decltype(tag);
    using E = typename Storage<Tag>::Elem;
    const int64_t items = aligned ? count / Vec16<E>::kN + 1 : count;
    mapKernel<<<blocksFor(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<E*>(data), count,
                                                                                    aligned, makeF(tag));
    checkLaunch(what);
  });
}

void scaleInPlace(void* data, int64_t count, DataType dtype, double factor, void* stream) {
  SC_CHECK(isFloating(dtype));
  mapInPlace(data, count, dtype, stream, "scaleKernel", [&](auto tag) { return ScaleBy<decltype(tag)>{factor}; });
}

void divideInPlace(void* data, int64_t count, DataType dtype, int64_t divisor, void* stream) {
  mapInPlace(data, count, dtype, stream, "divideKernel", [&](auto tag) { return DivideBy<decltype(tag)>{divisor}; });
}

}  // namespace scalecomm::cuda
