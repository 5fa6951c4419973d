// Minimal unit-test harness for scalecomm's C++ tests (no external framework).
// TEST(name) { ... } registers a test; CHECK(cond) << nothing; CHECK_EQ(a, b).
// A failing check prints file:line and the values, and fails the test; the
// binary exits nonzero if any test failed.
#pragma once

#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace sctest {

struct Registry {
  std::vector<std::pair<std::string, std::function<void()>>> tests;
  static Registry& get() {
    static Registry r;
    return r;
  }
};

struct Failure {
  std::string msg;
};

struct Register {
  Register(const char* name, std::function<void()> fn) { Registry::get().tests.emplace_back(name, std::move(fn)); }
};

template <typename A, typename B>
void checkEq(const A& a, const B& b, const char* ea, const char* eb, const char* file, int line) {
  if (!(a == b)) {
    std::ostringstream os;
    os << file << ":" << line << ": CHECK_EQ(" << ea << ", " << eb << ") failed: " << a << " vs " << b;
    throw Failure{os.str()};
  }
}

inline int runAll() {
  int failed = 0;
  for (auto& [name, fn] : Registry::get().tests) {
    try {
      fn();
      std::printf("[ OK ] %s\n", name.c_str());
    } catch (const Failure& f) {
      ++failed;
      std::printf("[FAIL] %s\n  %s\n", name.c_str(), f.msg.c_str());
    } catch (const std::exception& e) {
      ++failed;
      std::printf("[FAIL] %s\n  exception: %s\n", name.c_str(), e.what());
    }
  }
  std::printf("%zu tests, %d failed\n", Registry::get().tests.size(), failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace sctest

#define TEST(name)                                          \
  static void test_##name();                                \
  static ::sctest::Register reg_##name(#name, test_##name); \
  static void test_##name()

#define CHECK(cond)                                                                                                  \
  do {                                                                                                               \
    if (!(cond))                                                                                                     \
      throw ::sctest::Failure{std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": CHECK(" #cond ") failed"}; \
  } while (0)

#define CHECK_EQ(a, b) ::sctest::checkEq((a), (b), #a, #b, __FILE__, __LINE__)

#define TEST_MAIN() \
  int main() { return ::sctest::runAll(); }
