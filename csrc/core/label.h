// scalecomm core: interned names of calls and algorithms.
//
// Contract: a Label is a pointer to one immutable string in a process-wide
// table that is never freed, so copying, comparing and hashing a Label are
// pointer operations, and a Label stays valid in any object that outlives the
// group or thread that made it (an abandoned MPI call kept until exit, a
// completion callback run at shutdown). Two Labels are equal exactly when
// their texts are. Making one from text (Label("allreduce:ring")) looks the
// text up under a lock: do it once per distinct name (a group's prepared call
// sites), not once per call. The table grows by the distinct names a process
// uses (collectives x algorithms: tens), which is why it may be immortal.
// The default Label is the empty text. SC_LABEL("send") is the Label of a
// string literal, made once per place it is written (a per-call path names
// its calls with it).
#pragma once

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

namespace scalecomm {

class Label {
 public:
  Label() : text_(&emptyText()) {}
  Label(const std::string& text) : text_(intern(text)) {}  // NOLINT: names convert as strings did
  Label(const char* text) : text_(intern(text)) {}         // NOLINT

  const std::string& str() const { return *text_; }
  operator const std::string&() const { return *text_; }  // NOLINT
  const char* c_str() const { return text_->c_str(); }
  bool empty() const { return text_->empty(); }
  size_t size() const { return text_->size(); }

  friend bool operator==(Label a, Label b) { return a.text_ == b.text_; }
  friend bool operator!=(Label a, Label b) { return a.text_ != b.text_; }
  friend bool operator==(Label a, const std::string& b) { return *a.text_ == b; }
  friend bool operator!=(Label a, const std::string& b) { return *a.text_ != b; }
  friend bool operator==(Label a, const char* b) { return *a.text_ == b; }
  friend bool operator!=(Label a, const char* b) { return *a.text_ != b; }
  friend std::string operator+(const std::string& a, Label b) { return a + *b.text_; }
  friend std::string operator+(const char* a, Label b) { return a + *b.text_; }
  friend std::string operator+(Label a, const char* b) { return *a.text_ + b; }
  friend std::ostream& operator<<(std::ostream& os, Label l) { return os << *l.text_; }

  // Identity of the text, for hashing (equal texts, equal keys).
  const void* key() const { return text_; }

 private:
  static const std::string& emptyText();
  static const std::string* intern(const std::string& text);
  const std::string* text_;
};

}  // namespace scalecomm

#define SC_LABEL(literal)                       \
  ([]() -> ::scalecomm::Label {                 \
    static const ::scalecomm::Label l(literal); \
    return l;                                   \
  }())

template <>
struct std::hash<scalecomm::Label> {
  size_t operator()(scalecomm::Label l) const noexcept { return std::hash<const void*>()(l.key()); }
};
