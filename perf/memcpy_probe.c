// memcpy_probe: this machine's memory yardstick for perf/compare. For each
// size given, one thread copies that many bytes from one buffer to another
// (both allocated and touched once, like the benchmarks' buffers) and prints
// the best of three batches in GB/s = bytes copied / time / 1e9 (the bytes
// moved one way, as mpi_p2p's memcpy column; a STREAM-style figure that
// counts read + write would be twice this).
//
//   memcpy_probe SIZE...        sizes take K/M/G suffixes
//   output: one line per size, "bytes gbs"
//
// Exit status 0, or 2 on a bad size / allocation failure.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "size_arg.h"

static int ParseSize(const char* text, size_t* out) {
  uint64_t v = 0;
  if (ParseSizeArg(text, &v) != 0 || v == 0) return -1;
  *out = (size_t)v;
  return 0;
}

static double Now(void) { return MonotonicSeconds(); }

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: memcpy_probe SIZE...   (sizes take K/M/G suffixes)\n");
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    size_t bytes = 0;
    if (ParseSize(argv[a], &bytes) != 0) {
      fprintf(stderr, "memcpy_probe: size '%s': expected a size >= 1 such as 8, 64K, 1M\n", argv[a]);
      return 2;
    }
    char* src = malloc(bytes);
    char* dst = malloc(bytes);
    if (src == NULL || dst == NULL) {
      fprintf(stderr, "memcpy_probe: cannot allocate 2 x %zu bytes\n", bytes);
      return 2;
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    // About 256 MiB per batch: long enough to time, short enough for 2 cores.
    size_t reps = (256u << 20) / bytes;
    if (reps < 3) reps = 3;
    if (reps > 200000) reps = 200000;
    double best = 1e30;
    for (int k = 0; k < 3; ++k) {
      const double t0 = Now();
      for (size_t r = 0; r < reps; ++r) {
        memcpy(dst, src, bytes);
        __asm__ __volatile__("" : : "r"(dst) : "memory");  // keep every copy
      }
      const double t = Now() - t0;
      if (t < best) best = t;
    }
    printf("%zu %.4f\n", bytes, (double)bytes * (double)reps / best / 1e9);
    fflush(stdout);
    free(src);
    free(dst);
  }
  return 0;
}
