// Would a single-copy (CMA, process_vm_readv) two-rank all-reduce beat a
// copy-in two-shot through shared memory? A probe for issue #22, not library
// code: two forked processes, f32 sum, both variants alternating per round
// on the same buffers, every result checked.
//
//   cma:  rank q reads slice q of the peer's input with process_vm_readv
//         (in 128 KiB pieces into private scratch), sums it with its own
//         input into its output, publishes; then reads the peer's summed
//         slice from the peer's output straight into its own; publishes;
//         waits for the peer's read of its output.
//   shm:  each rank copies its input into a shared buffer, publishes, sums
//         slice q of both shared copies into its output and into its shared
//         copy, publishes; copies the peer's summed slice out of the peer's
//         shared copy. (The shape of ciuic's direct two-shot, unpipelined.)
//
// Two input sets alternate from call to call, so a read of the peer's
// previous result shows in the last call's output, which is checked. A rank
// that fails sets `abort`, which stops the other's waits.
//
// usage: cma_allreduce_probe [bytes ...]   (default 1M 4M 16M)
// prints, per size and variant: median and min us per all-reduce over the
// rounds, and #wrong.
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kRounds = 21, kIters = 20, kPiece = 128 * 1024 };

typedef struct {
  _Alignas(64) _Atomic uint64_t flag[2][3][8];  // [rank][start, reduced, done], a line each
  _Atomic int abort;
  pid_t pid[2];
  float* in[2][2];  // [rank][input set]
  float* out[2];
  double us[2][kRounds];  // [variant][round], rank 0's
  long wrong[2];
} Ctl;

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void Post(Ctl* c, int r, int which, uint64_t v) {
  atomic_store_explicit(&c->flag[r][which][0], v, memory_order_release);
}
static int Await(Ctl* c, int r, int which, uint64_t v) {
  while (atomic_load_explicit(&c->flag[r][which][0], memory_order_acquire) < v) {
    if (atomic_load_explicit(&c->abort, memory_order_relaxed)) return -1;
    __builtin_ia32_pause();
  }
  return 0;
}

static int Value(int rank, int set, size_t i) { return rank + 1 + (int)(i % (set ? 5 : 7)); }

static void Sum(float* d, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
}

static int Pull(pid_t pid, void* local, const void* remote, size_t bytes) {
  struct iovec l = {local, bytes}, r = {(void*)remote, bytes};
  ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
  if (got != (ssize_t)bytes) {
    fprintf(stderr, "process_vm_readv: %s (got %zd of %zu)\n", got < 0 ? strerror(errno) : "short", got, bytes);
    return -1;
  }
  return 0;
}

static int RankBody(Ctl* c, int me, size_t bytes, float* shared[2], float* scratch) {
  const int peer = 1 - me;
  const size_t n = bytes / sizeof(float), half = n / 2;
  const size_t mine = me == 0 ? 0 : half, mine_n = me == 0 ? half : n - half;
  const size_t theirs = me == 0 ? half : 0, theirs_n = n - mine_n;
  float* out = c->out[me];
  uint64_t seq = 0;
  for (int set = 0; set < 2; ++set) {
    for (size_t i = 0; i < n; ++i) c->in[me][set][i] = (float)Value(me, set, i);
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int v = 0; v < 2; ++v) {
      const int variant = (round & 1) ? 1 - v : v;  // who goes first alternates
      memset(out, 0, bytes);
      double t0 = 0;
      int set = 0;
      for (int it = 0; it < kIters + 1; ++it) {
        if (it == 1) t0 = Now();  // the first is a warm-up
        set = it & 1;
        const float* in = c->in[me][set];
        ++seq;
        Post(c, me, 0, seq);
        if (Await(c, peer, 0, seq) != 0) return 1;
        if (variant == 0) {
          const float* rin = c->in[peer][set];
          for (size_t at = 0; at < mine_n; at += kPiece / sizeof(float)) {
            size_t k = mine_n - at < kPiece / sizeof(float) ? mine_n - at : kPiece / sizeof(float);
            if (Pull(c->pid[peer], scratch, rin + mine + at, k * sizeof(float)) != 0) return 1;
            Sum(out + mine + at, in + mine + at, scratch, k);
          }
          Post(c, me, 1, seq);
          if (Await(c, peer, 1, seq) != 0) return 1;
          if (Pull(c->pid[peer], out + theirs, c->out[peer] + theirs, theirs_n * sizeof(float)) != 0) return 1;
        } else {
          memcpy(shared[me], in, bytes);
          Post(c, me, 1, seq);
          if (Await(c, peer, 1, seq) != 0) return 1;
          Sum(out + mine, shared[me] + mine, shared[peer] + mine, mine_n);
          memcpy(shared[me] + mine, out + mine, mine_n * sizeof(float));
          // "reduced" reuses the done flag's slot here: the two phases need
          // two waits, as cma's do.
          Post(c, me, 2, seq);
          if (Await(c, peer, 2, seq) != 0) return 1;
          memcpy(out + theirs, shared[peer] + theirs, theirs_n * sizeof(float));
        }
        ++seq;
        Post(c, me, 2, seq);
        Post(c, me, 1, seq);
        Post(c, me, 0, seq);
        if (Await(c, peer, 2, seq) != 0) return 1;
      }
      const double us = (Now() - t0) / kIters;
      if (me == 0) c->us[variant][round] = us;
      long wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += out[i] != (float)(Value(0, set, i) + Value(1, set, i));
      __atomic_fetch_add(&c->wrong[variant], wrong, __ATOMIC_RELAXED);
    }
  }
  return 0;
}

static int Rank(Ctl* c, int me, size_t bytes, float* shared[2]) {
  float* scratch = aligned_alloc(64, kPiece);
  int rc = scratch == NULL ? 1 : RankBody(c, me, bytes, shared, scratch);
  free(scratch);
  if (rc != 0) atomic_store(&c->abort, 1);
  return rc;
}

static void* Map(size_t bytes) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("cma_allreduce_probe: mmap");
    exit(1);
  }
  return p;
}

static float* Private(size_t bytes) {
  float* p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == NULL) {
    fprintf(stderr, "cma_allreduce_probe: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

static int Cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static size_t ParseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char** argv) {
  const char* defaults[] = {"1M", "4M", "16M"};
  int nsizes = argc > 1 ? argc - 1 : 3;
  char host[64] = "?";
  gethostname(host, sizeof host);
  printf("# cma_allreduce_probe on %s, %ld cpus; 2 ranks, f32 sum, %d rounds x %d all-reduces\n", host,
         sysconf(_SC_NPROCESSORS_ONLN), kRounds, kIters);
  printf("%10s %8s %10s %10s %8s\n", "bytes", "variant", "median_us", "min_us", "#wrong");
  for (int s = 0; s < nsizes; ++s) {
    const size_t bytes = ParseSize(argc > 1 ? argv[s + 1] : defaults[s]) / 64 * 64;
    if (bytes == 0) {
      fprintf(stderr, "cma_allreduce_probe: size '%s' is below 64 bytes\n", argv[s + 1]);
      return 2;
    }
    Ctl* c = Map(sizeof(Ctl));
    float* shared[2];
    for (int r = 0; r < 2; ++r) {
      shared[r] = Map(bytes);
      // Private buffers at the same addresses in both processes (allocated
      // before the fork); each process's own copy after it.
      c->in[r][0] = Private(bytes);
      c->in[r][1] = Private(bytes);
      c->out[r] = Private(bytes);
    }
    c->pid[0] = getpid();
    // Under Yama's ptrace_scope 1 only an ancestor may read a process's
    // memory: let the child read the parent's.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    pid_t child = fork();
    if (child == 0) {
      c->pid[1] = getpid();
      _exit(Rank(c, 1, bytes, shared));
    }
    c->pid[1] = child;
    int rc = Rank(c, 0, bytes, shared);
    int st = 0;
    waitpid(child, &st, 0);
    if (rc != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "cma_allreduce_probe: a rank failed\n");
      return 1;
    }
    const char* names[2] = {"cma", "shm"};
    for (int v = 0; v < 2; ++v) {
      qsort(c->us[v], kRounds, sizeof(double), Cmp);
      printf("%10zu %8s %10.1f %10.1f %8ld\n", bytes, names[v], c->us[v][kRounds / 2], c->us[v][0], c->wrong[v]);
    }
    fflush(stdout);
    for (int r = 0; r < 2; ++r) {
      free(c->in[r][0]);
      free(c->in[r][1]);
      free(c->out[r]);
      munmap(shared[r], bytes);
    }
    munmap(c, sizeof(Ctl));
  }
  return 0;
}
