// scalecomm core: which x86 vector extensions this CPU runs.
//
// Contract: each answer is read from the CPU once, at its first call, by
// __builtin_cpu_supports (no ifunc: a resolver runs before the sanitizers'
// runtimes start); false on other architectures and compilers. Code built
// with __attribute__((target(...))) for an extension runs only where its
// answer here is true. Thread safe.
#pragma once

namespace scalecomm {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
inline bool cpuHasAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
inline bool cpuHasAvx2F16c() {  // AVX2 and F16C's fp16 conversions
  static const bool have = cpuHasAvx2() && __builtin_cpu_supports("f16c");
  return have;
}
#else
inline bool cpuHasAvx2() { return false; }
inline bool cpuHasAvx2F16c() { return false; }
#endif

}  // namespace scalecomm
