#include "compress/compression_states.h"

namespace scalecomm {

std::shared_ptr<CompressSlot> CompressionStates::slot(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  auto& s = slots_[key];
  if (!s) s = std::make_shared<CompressSlot>();
  return s;
}

void CompressionStates::forget(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  slots_.erase(key);
}

std::map<std::string, CompressState> CompressionStates::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  std::map<std::string, CompressState> out;
  for (const auto& [key, s] : slots_) {
    std::lock_guard<std::mutex> gs(s->mu);
    CompressState st = s->state;
    st.toHost();
    if (st.steps != 0 || !st.residual.empty() || !st.warm.q.empty()) out.emplace(key, std::move(st));
  }
  return out;
}

std::map<std::string, AutoChoice> CompressionStates::choices() const {
  std::lock_guard<std::mutex> g(mu_);
  std::map<std::string, AutoChoice> out;
  for (const auto& [key, s] : slots_) {
    std::lock_guard<std::mutex> gs(s->mu);
    if (s->state.choice.decided) out.emplace(key, s->state.choice);
  }
  return out;
}

void CompressionStates::restore(std::map<std::string, CompressState> states) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [key, s] : slots_) {
    std::lock_guard<std::mutex> gs(s->mu);
    s->state = CompressState{};
  }
  for (auto& [key, st] : states) {
    auto& s = slots_[key];
    if (!s) s = std::make_shared<CompressSlot>();
    std::lock_guard<std::mutex> gs(s->mu);
    s->state = std::move(st);
  }
}

void CompressionStates::reset() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [key, s] : slots_) {
    std::lock_guard<std::mutex> gs(s->mu);
    s->state = CompressState{};
  }
}

}  // namespace scalecomm
