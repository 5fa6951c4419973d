// scalecomm core: the pause instruction of a polling loop.
//
// Contract: SC_CPU_RELAX() tells the CPU that the thread is spinning on
// memory another core writes (x86 pause, Arm yield; nothing elsewhere): it
// saves power and the pipeline flush when the value changes. No ordering.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SC_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define SC_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define SC_CPU_RELAX() ((void)0)
#endif
