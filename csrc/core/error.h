// scalecomm core: errors.
//
// Contract: every failure inside scalecomm is a scalecomm::Error with one of
// four kinds. InvalidArgument is raised before any communication and leaves the
// group usable. Io and Timeout mean a peer or the network failed; the group is
// then poisoned (every later call raises). Aborted means abort() was called.
// Internal is our bug and carries file:line. Messages say who (rank, seq),
// what (collective) and what to do.
// Thread safety: value types, no shared state.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace scalecomm {

enum class ErrorKind { InvalidArgument, Io, Timeout, Aborted, Internal };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
std::string strCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, const Args&... args) {
  throw Error(kind, strCat(args...));
}

}  // namespace scalecomm

// Internal invariant check: a failure is a scalecomm bug, reported with file:line.
#define SC_CHECK(cond, ...)                                                                                        \
  do {                                                                                                             \
    if (!(cond)) {                                                                                                 \
      ::scalecomm::fail(::scalecomm::ErrorKind::Internal, "scalecomm internal error at ", __FILE__, ":", __LINE__, \
                        ": check '", #cond, "' failed. ", ##__VA_ARGS__, " Please report this bug.");              \
    }                                                                                                              \
  } while (0)
