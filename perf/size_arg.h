// size_arg.h: the byte-size arguments of the C benchmark drivers and probes
// in perf/ ("4096", "64K", "1M", "2G": binary multiples, an optional B), as
// allreduce_perf and transport_perf take them.
#ifndef CIUIC_PERF_SIZE_ARG_H_
#define CIUIC_PERF_SIZE_ARG_H_

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

// 0 on success; -1 on a malformed size or one above 16 GiB (callers check
// their own lower and upper bounds).
static inline int ParseSizeArg(const char* text, uint64_t* out) {
  char* end = NULL;
  if (text == NULL || *text < '0' || *text > '9') return -1;
  const unsigned long long v = strtoull(text, &end, 10);
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ull << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1ull << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1ull << 30, ++end;
  if (*end == 'B') ++end;
  if (*end != '\0' || v > (1ull << 34) || v * mult > (1ull << 34)) return -1;
  *out = (uint64_t)(v * mult);
  return 0;
}

// Seconds on the monotonic clock.
static inline double MonotonicSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif  // CIUIC_PERF_SIZE_ARG_H_
