#include "compress/sign_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compress/codec.h"

namespace scalecomm {

at::Tensor signEncodeCpu(const at::Tensor& x, at::Tensor* residual) {
  const int64_t n = x.numel(), blocks = (n + kSignBlock - 1) / kSignBlock, bytes = (n + 7) / 8;
  const float* xp = x.data_ptr<float>();
  float* rp = nullptr;
  if (residual) {
    if (!residual->defined() || residual->numel() != n) {
      *residual = at::zeros({n}, x.options());
    } else if (!(residual->scalar_type() == at::kFloat && residual->is_contiguous() && residual->is_cpu())) {
      *residual = residual->to(x.options()).contiguous();  // e.g. restored from a checkpoint
    }
    rp = residual->data_ptr<float>();
  }
  at::Tensor payload = at::zeros({4 * blocks + bytes}, x.options().dtype(at::kByte));
  uint8_t* scales = payload.data_ptr<uint8_t>();
  uint8_t* bits = scales + 4 * blocks;
  float acc[kSignBlock];
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kSignBlock, len = std::min<int64_t>(kSignBlock, n - lo);
    float sum = 0.f;
    for (int64_t j = 0; j < len; ++j) {
      acc[j] = rp ? xp[lo + j] + rp[lo + j] : xp[lo + j];
      sum += std::fabs(acc[j]);
    }
    const float scale = sum / static_cast<float>(len);
    std::memcpy(scales + 4 * b, &scale, 4);
    for (int64_t j = 0; j < len; j += 8) {  // blocks start at multiples of 8 elements
      uint8_t byte = 0;
      for (int64_t t = 0; t < 8 && j + t < len; ++t) {
        const bool positive = acc[j + t] >= 0.f;
        byte |= static_cast<uint8_t>(positive) << t;
        if (rp) rp[lo + j + t] = acc[j + t] - (positive ? scale : -scale);
      }
      bits[(lo + j) >> 3] = byte;
    }
  }
  return payload;
}

void signDecodeAddCpu(at::Tensor& out, const at::Tensor& payload) {
  const int64_t n = out.numel(), blocks = (n + kSignBlock - 1) / kSignBlock;
  float* o = out.data_ptr<float>();
  const uint8_t* scales = payload.data_ptr<uint8_t>();
  const uint8_t* bits = scales + 4 * blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, scales + 4 * b, 4);
    const int64_t lo = b * kSignBlock, hi = std::min<int64_t>(n, lo + kSignBlock);
    for (int64_t i = lo; i < hi; i += 8) {
      const unsigned byte = bits[i >> 3];
      const int64_t m = std::min<int64_t>(8, hi - i);
      for (int64_t t = 0; t < m; ++t) o[i + t] += scale * static_cast<float>(2 * static_cast<int>((byte >> t) & 1) - 1);
    }
  }
}

}  // namespace scalecomm
