#include "core/label.h"

#include <mutex>
#include <unordered_set>

namespace scalecomm {

namespace {

struct Table {
  std::mutex mu;
  std::unordered_set<std::string> texts;  // node-based: element addresses are stable
};

Table& table() {
  static auto* t = new Table();  // never destroyed: Labels may be read during static destruction
  return *t;
}

}  // namespace

const std::string& Label::emptyText() {
  static const std::string* const e = intern(std::string());
  return *e;
}

const std::string* Label::intern(const std::string& text) {
  Table& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  return &*t.texts.insert(text).first;
}

}  // namespace scalecomm
