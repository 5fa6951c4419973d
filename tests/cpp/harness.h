// Minimal unit-test harness for scalecomm's C++ tests (no external framework).
// TEST(name) { ... } registers a test; CHECK(cond) << nothing; CHECK_EQ(a, b).
// A failing check prints file:line and the values, and fails the test; the
// binary exits nonzero if any test failed.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace sctest {

// Element i of p (of dtype t) = v, converted as a C++ cast (fp16/bf16: rounded).
inline void storeValue(void* p, int64_t i, scalecomm::DataType t, double v) {
  using scalecomm::DataType;
  switch (t) {
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
    case DataType::Float16: static_cast<uint16_t*>(p)[i] = scalecomm::floatToFp16(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<uint16_t*>(p)[i] = scalecomm::floatToBf16(static_cast<float>(v)); break;
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::Int16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    default: break;
  }
}

// Element i of p (of dtype t) as a double.
inline double loadValue(const void* p, int64_t i, scalecomm::DataType t) {
  using scalecomm::DataType;
  switch (t) {
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    case DataType::Float16: return scalecomm::fp16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return scalecomm::bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::Int8: return static_cast<const int8_t*>(p)[i];
    case DataType::Int16: return static_cast<const int16_t*>(p)[i];
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::Int64: return static_cast<const int64_t*>(p)[i];
    case DataType::UInt8: return static_cast<const uint8_t*>(p)[i];
    default: return 0;
  }
}

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

// n standard normal floats from `seed`.
inline std::vector<float> gaussian(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// ||a - b|| / ||b||.
inline double relativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Runs fn(i) on one thread per i in [0, n) and returns each thread's
// failure ("" when it passed): a failed check's message or an exception's.
inline std::vector<std::string> onThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const Failure& f) {
        errors[i] = f.msg;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Runs every test, or with SCTEST_FILTER set, those whose name contains it.
inline int runAll() {
  int failed = 0, ran = 0;
  const char* filter = std::getenv("SCTEST_FILTER");
  for (auto& [name, fn] : Registry::get().tests) {
    if (filter != nullptr && name.find(filter) == std::string::npos) continue;
    ++ran;
    const auto start = std::chrono::steady_clock::now();
    const auto took = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    try {
      fn();
      std::printf("[ OK ] %s (%.2f s)\n", name.c_str(), took());
    } catch (const Failure& f) {
      ++failed;
      std::printf("[FAIL] %s (%.2f s)\n  %s\n", name.c_str(), took(), f.msg.c_str());
    } catch (const std::exception& e) {
      ++failed;
      std::printf("[FAIL] %s (%.2f s)\n  exception: %s\n", name.c_str(), took(), e.what());
    }
  }
  std::printf("%d tests, %d failed\n", ran, failed);
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
