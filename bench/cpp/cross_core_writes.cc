// What a core's writes into lines another core has read cost.
//
//   build/cpp/cross_core_writes BYTES SLOTS   e.g. 262144 2, then 262144 8
//   (after the CMake build)
//
// A writer process copies BYTES into slot i mod SLOTS of a shared mapping
// and publishes i; a reader process copies slot i out to private memory and
// acknowledges it; one message in flight. Prints each side's mean time per
// copy. With slots spanning well under a core's L2 the writer rewrites lines
// the reader's core still holds; with slots spanning twice the L2 or more it
// does not (docs/performance.md, "Shared window log").
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BYTES SLOTS\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoul(argv[1], nullptr, 10);
  const long slots = atol(argv[2]);
  const long iters = 3000;
  if (bytes == 0 || slots < 1) return 2;
  void* mapped = mmap(nullptr, bytes * slots + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return 1;
  char* area = static_cast<char*>(mapped);
  memset(area, 0, bytes * slots + 4096);
  auto* written = new (area + bytes * slots) std::atomic<long>(0);
  auto* read = new (area + bytes * slots + 64) std::atomic<long>(0);  // its own cache line
  auto* readerSeconds = reinterpret_cast<double*>(area + bytes * slots + 256);
  char* own = static_cast<char*>(aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  memset(own, 3, bytes);
  const pid_t child = fork();
  if (child < 0) return 1;
  double spent = 0;
  if (child == 0) {  // the reader
    for (long i = 1; i <= iters; i++) {
      while (written->load() < i) {
      }
      const double t = now();
      memcpy(own, area + ((i - 1) % slots) * bytes, bytes);
      spent += now() - t;
      read->store(i);
    }
    *readerSeconds = spent / iters;
    _exit(0);
  }
  for (long i = 1; i <= iters; i++) {
    while (read->load() < i - 1) {
    }
    const double t = now();
    memcpy(area + ((i - 1) % slots) * bytes, own, bytes);
    spent += now() - t;
    written->store(i);
  }
  waitpid(child, nullptr, 0);
  printf("bytes=%zu slots=%ld write %.2f us read %.2f us\n", bytes, slots, spent / iters * 1e6, *readerSeconds * 1e6);
  return 0;
}
