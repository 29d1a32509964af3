// shared_cache_probe: how much working set the cores' shared cache holds
// when they copy at once. Each thread, pinned to one CPU, copies its own
// source to its own destination and back (half the thread's share of the
// working set each), all threads together; then one thread alone at the same
// total. Per size: GB/s per core together, GB/s alone, and #wrong (bytes not
// as copied).
//
// Why: the cost model takes the last-level cache from topology
// (ciuic-tune's `memory_shared ... beyond`), but on a VM that cache is the
// host's, shared with other guests. Where the per-core rate together falls
// (toward memory_shared's DRAM figure) is the size the ranks actually share.
//
//   shared_cache_probe [--threads T] [--sizes MiB,MiB,...] [--bytes TOTAL_MIB]
//   output: a header line naming the CPUs, then per size
//           "total_mib M together_gbps G alone_gbps A wrong W"
//
// Default: 2 threads on the first CPUs this process may run on, sizes
// 4,8,16,24,32,48,64,128 MiB, 2048 MiB copied per size and thread. Exit 2 on
// bad usage, fewer CPUs than threads or a thread that cannot start, be pinned
// or get its buffers; 1 when a copy came out wrong.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define kMaxThreads 64
#define kMaxSizes 32

struct Job {
  int cpu;
  size_t half;  // bytes of the source, and of the destination
  size_t reps;  // round trips (source to destination and back)
  atomic_int* ready;
  int nthreads;
  double seconds;
  size_t wrong;
  int pin_failed;
  int alloc_failed;
};

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void* Run(void* arg) {
  struct Job* j = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(j->cpu, &set);
  j->pin_failed = pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0;
  unsigned char* a = malloc(j->half);
  unsigned char* b = malloc(j->half);
  if (a == NULL || b == NULL) {
    j->alloc_failed = 1;
    free(a);
    free(b);
    atomic_fetch_add(j->ready, 1);
    return NULL;
  }
  for (size_t i = 0; i < j->half; ++i) a[i] = (unsigned char)(i * 131u + (unsigned)j->cpu);
  memcpy(b, a, j->half);  // warm both, as a rank's buffers are
  // Start together: each copy's working set meets the others' in the cache.
  atomic_fetch_add(j->ready, 1);
  while (atomic_load(j->ready) < j->nthreads) {
  }
  const double t0 = Now();
  for (size_t r = 0; r < j->reps; ++r) {
    memcpy(b, a, j->half);
    memcpy(a, b, j->half);
  }
  j->seconds = Now() - t0;
  for (size_t i = 0; i < j->half; ++i) j->wrong += a[i] != (unsigned char)(i * 131u + (unsigned)j->cpu);
  free(a);
  free(b);
  return NULL;
}

// GB/s per thread of `n` threads on `cpus`, each copying its share of
// `total` bytes; adds bytes not as copied to *wrong; -1 when a thread could
// not start, be pinned or get its buffers.
static double Copying(int n, const int* cpus, size_t total, size_t copied, size_t* wrong) {
  struct Job jobs[kMaxThreads];
  pthread_t tid[kMaxThreads];
  atomic_int ready = 0;
  const size_t half = total / (size_t)n / 2;
  size_t reps = copied / (2 * half);
  if (reps < 2) reps = 2;
  int started = 0;
  for (int i = 0; i < n; ++i) {
    jobs[i] = (struct Job){cpus[i], half, reps, &ready, n, 0, 0, 0, 0};
    if (pthread_create(&tid[i], NULL, Run, &jobs[i]) != 0) break;
    ++started;
  }
  // Those that started wait for n: count the rest as ready so they go on.
  atomic_fetch_add(&ready, n - started);
  double gbps = 0;
  int failed = started < n;
  for (int i = 0; i < started; ++i) {
    pthread_join(tid[i], NULL);
    failed |= jobs[i].pin_failed | jobs[i].alloc_failed;
    *wrong += jobs[i].wrong;
    gbps += jobs[i].seconds > 0 ? 2.0 * (double)reps * (double)half / jobs[i].seconds / 1e9 : 0;
  }
  return failed ? -1 : gbps / n;
}

static int Usage(void) {
  fprintf(stderr, "usage: shared_cache_probe [--threads T] [--sizes MiB,MiB,...] [--bytes TOTAL_MIB]\n");
  return 2;
}

// A whole number in [lo, hi], the whole text.
static int Number(const char* s, long lo, long hi, long* out) {
  char* end = NULL;
  const long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  long threads = 2, copied_mib = 2048;
  long sizes[kMaxSizes] = {4, 8, 16, 24, 32, 48, 64, 128};
  int nsizes = 8;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return Usage();
    if (strcmp(argv[i], "--threads") == 0) {
      if (!Number(argv[++i], 1, kMaxThreads, &threads)) return Usage();
    } else if (strcmp(argv[i], "--bytes") == 0) {
      if (!Number(argv[++i], 1, 1L << 20, &copied_mib)) return Usage();
    } else if (strcmp(argv[i], "--sizes") == 0) {
      char buf[512];
      snprintf(buf, sizeof buf, "%s", argv[++i]);
      nsizes = 0;
      for (char* tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (nsizes == kMaxSizes || !Number(tok, 1, 1L << 20, &sizes[nsizes])) return Usage();
        ++nsizes;
      }
      if (nsizes == 0) return Usage();
    } else {
      return Usage();
    }
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return Usage();
  int cpus[kMaxThreads];
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < threads; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus[n++] = c;
  }
  if (n < threads) {
    fprintf(stderr, "shared_cache_probe: %ld threads need as many CPUs; this process may use %d\n", threads, n);
    return 2;
  }
  printf("# shared_cache_probe: %ld threads on CPUs", threads);
  for (int i = 0; i < n; ++i) printf("%s%d", i ? "," : " ", cpus[i]);
  printf("; %ld MiB copied per size and thread\n", copied_mib);
  size_t wrong_all = 0;
  for (int k = 0; k < nsizes; ++k) {
    const size_t total = (size_t)sizes[k] << 20, copied = (size_t)copied_mib << 20;
    size_t wrong = 0;
    const double together = Copying((int)threads, cpus, total, copied, &wrong);
    const double alone = Copying(1, cpus, total, copied, &wrong);
    if (together < 0 || alone < 0) {
      fprintf(stderr, "shared_cache_probe: a thread could not start, be pinned to its CPU or get %zu B\n",
              total / (size_t)threads);
      return 2;
    }
    printf("total_mib %ld together_gbps %.1f alone_gbps %.1f wrong %zu\n", sizes[k], together, alone, wrong);
    fflush(stdout);
    wrong_all += wrong;
  }
  return wrong_all == 0 ? 0 : 1;
}
