// core_pair_probe: how far apart two CPUs are right now, as the round trip of
// one cache line between them. Two threads, each pinned to one CPU, hand a
// counter back and forth through one shared line; the figure is the median
// over SAMPLES batches of ROUNDS round trips each, in ns.
//
// Why: on a VM the host may move the vCPUs. On this project's CI machine the
// two vCPUs flip every few seconds between a near placement (~90 ns round
// trip) and a far one (~400 ns), and every shm figure up to 4 MiB follows:
// a 2-rank 64 KiB all-reduce takes ~5 us near and ~14 us far. A benchmark
// that must compare measurements (perf/sim_validate: a prediction and the run
// it predicts) probes before and after and keeps what ran in one placement.
//
//   core_pair_probe [--cpus A,B] [--samples N] [--rounds R]
//   output: "cpus A,B rtt_ns MEDIAN min MIN max MAX samples N"
//
// Default CPUs: the first two this process may run on. With one CPU there is
// no pair: "cpus A rtt_ns 0 (one cpu)", exit 0. Exit 2 on bad usage or when a
// thread cannot be pinned.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The line the two threads hand back and forth, padded to its own 64
// bytes so nothing else bounces with it.
static struct {
  _Alignas(64) atomic_long turn;
  char pad[64 - sizeof(atomic_long)];
} g_line;
static long g_rounds_total;
// Set by the answering thread once it has tried to pin itself: 1 pinned,
// -1 not (then it answers nothing and the probe fails at once instead of
// ping-ponging two threads on one CPU).
static atomic_int g_ready;

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct Peer {
  int cpu;
  int pinned;  // 0 ok, else the error of pthread_setaffinity_np
};

// The far side: waits for each odd value and answers with the next even one.
static void* Answer(void* arg) {
  struct Peer* p = arg;
  p->pinned = Pin(p->cpu);
  atomic_store(&g_ready, p->pinned == 0 ? 1 : -1);
  if (p->pinned != 0) return NULL;
  for (long v = 1; v < 2 * g_rounds_total; v += 2) {
    while (atomic_load_explicit(&g_line.turn, memory_order_acquire) != v) {
    }
    atomic_store_explicit(&g_line.turn, v + 1, memory_order_release);
  }
  return NULL;
}

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int ParseInt(const char* text, long lo, long hi, long* out) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int main(int argc, char** argv) {
  long cpus[2] = {-1, -1};
  long samples = 21, rounds = 2000;
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--cpus") == 0 && v) {
      char* comma = strchr(v, ',');
      char first[32];
      if (!comma || (size_t)(comma - v) >= sizeof first) goto usage;
      memcpy(first, v, (size_t)(comma - v));
      first[comma - v] = '\0';
      if (ParseInt(first, 0, CPU_SETSIZE - 1, &cpus[0]) || ParseInt(comma + 1, 0, CPU_SETSIZE - 1, &cpus[1]) ||
          cpus[0] == cpus[1])
        goto usage;
      ++i;
    } else if (strcmp(argv[i], "--samples") == 0 && v) {
      if (ParseInt(v, 1, 100000, &samples)) goto usage;
      ++i;
    } else if (strcmp(argv[i], "--rounds") == 0 && v) {
      if (ParseInt(v, 1, 100000000, &rounds)) goto usage;
      ++i;
    } else {
      goto usage;
    }
  }
  if (cpus[0] < 0) {
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
      perror("core_pair_probe: sched_getaffinity");
      return 2;
    }
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
      if (CPU_ISSET(c, &mine)) cpus[found++] = c;
    if (found < 2) {
      printf("cpus %ld rtt_ns 0 (one cpu)\n", cpus[0]);
      return 0;
    }
  }

  g_rounds_total = samples * rounds;
  struct Peer peer = {(int)cpus[1], 0};
  int rc = Pin((int)cpus[0]);
  if (rc != 0) {
    fprintf(stderr, "core_pair_probe: cannot run on cpu %ld: %s\n", cpus[0], strerror(rc));
    return 2;
  }
  pthread_t t;
  rc = pthread_create(&t, NULL, Answer, &peer);
  if (rc != 0) {
    fprintf(stderr, "core_pair_probe: pthread_create: %s\n", strerror(rc));
    return 2;
  }
  while (atomic_load(&g_ready) == 0) {
  }
  if (atomic_load(&g_ready) < 0) {
    pthread_join(t, NULL);
    fprintf(stderr, "core_pair_probe: cannot run on cpu %ld: %s\n", cpus[1], strerror(peer.pinned));
    return 2;
  }
  double* ns = calloc((size_t)samples, sizeof *ns);
  if (!ns) return 2;
  long v = 0;
  for (long s = 0; s < samples; ++s) {
    double t0 = Now();
    for (long r = 0; r < rounds; ++r) {
      atomic_store_explicit(&g_line.turn, v + 1, memory_order_release);
      v += 2;
      while (atomic_load_explicit(&g_line.turn, memory_order_acquire) != v) {
      }
    }
    ns[s] = (Now() - t0) / (double)rounds * 1e9;
  }
  pthread_join(t, NULL);
  qsort(ns, (size_t)samples, sizeof *ns, CompareDoubles);
  printf("cpus %ld,%ld rtt_ns %.1f min %.1f max %.1f samples %ld\n", cpus[0], cpus[1], ns[samples / 2], ns[0],
         ns[samples - 1], samples);
  free(ns);
  return 0;

usage:
  fprintf(stderr,
          "usage: core_pair_probe [--cpus A,B] [--samples N] [--rounds R]\n"
          "  the cache-line round trip between CPUs A and B (default: the first two this process may use)\n");
  return 2;
}
