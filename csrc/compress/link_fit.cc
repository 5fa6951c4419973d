#include "compress/link_fit.h"

#include <algorithm>
#include <cmath>

namespace scalecomm {

void LinkFit::add(double busBytes, double seconds, bool fresh) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  const double b = std::max(busBytes, 1.0);
  const int cls = static_cast<int>(std::floor(std::log2(b)));
  std::lock_guard<std::mutex> g(mu_);
  SizeClass& c = classes_[cls];
  if (c.seconds.count == 0 || fresh) {
    c.bytes = b;
    c.seconds.clear();
  } else {
    c.bytes = 0.7 * c.bytes + 0.3 * b;
  }
  c.seconds.add(seconds);
  refit();
}

void LinkFit::refit() {
  const double k = static_cast<double>(classes_.size());
  if (classes_.size() == 1) {
    alpha_ = 0;
    beta_ = classes_.begin()->second.seconds.low() / classes_.begin()->second.bytes;
    return;
  }
  double mx = 0, mt = 0;
  for (const auto& [cls, c] : classes_) {
    mx += c.bytes / k;
    mt += c.seconds.low() / k;
  }
  double cov = 0, var = 0, xt = 0, xx = 0;
  for (const auto& [cls, c] : classes_) {
    const double t = c.seconds.low();
    cov += (c.bytes - mx) * (t - mt);
    var += (c.bytes - mx) * (c.bytes - mx);
    xt += c.bytes * t;
    xx += c.bytes * c.bytes;
  }
  beta_ = var > 0 ? cov / var : 0;
  alpha_ = mt - beta_ * mx;
  if (beta_ < 0) {  // times that fall with size: noise; a flat link
    beta_ = 0;
    alpha_ = mt;
  } else if (alpha_ < 0) {  // through the origin
    alpha_ = 0;
    beta_ = xx > 0 ? xt / xx : 0;
  }
}

double LinkFit::predict(double busBytes) const {
  std::lock_guard<std::mutex> g(mu_);
  return alpha_ + beta_ * std::max(busBytes, 0.0);
}

double LinkFit::alpha() const {
  std::lock_guard<std::mutex> g(mu_);
  return alpha_;
}

double LinkFit::beta() const {
  std::lock_guard<std::mutex> g(mu_);
  return beta_;
}

}  // namespace scalecomm
