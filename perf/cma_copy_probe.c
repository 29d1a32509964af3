// How fast does process_vm_readv copy here, next to memcpy? A probe for
// issue #22: the single-copy all-reduce is only worth running where the
// kernel's cross-process copy comes near a user-space copy.
//
// A forked child owns a buffer (its own pages: it writes them after the
// fork); the parent reads it with process_vm_readv in pieces of `piece`
// bytes, and copies a MAP_SHARED buffer of the same size with memcpy; both
// alternate round by round, fastest and median of 21 rounds each. Every
// read is checked against the child's pattern (#wrong: bytes that differ).
//
// usage: cma_copy_probe [bytes ...]   (default 1M 4M 16M; pieces 128K and whole)
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { kRounds = 21 };

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int Cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static size_t Parse(const char* s) {
  char* end = NULL;
  size_t v = strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

static unsigned char Pattern(size_t i) { return (unsigned char)(i * 131 + 7); }

// One size: returns the number of wrong bytes, or -1 on an error.
static long Probe(size_t bytes) {
  unsigned char* child_buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  unsigned char* shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  unsigned char* dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int ready[2];
  if (child_buf == MAP_FAILED || shared == MAP_FAILED || dst == MAP_FAILED || pipe(ready) != 0) {
    perror("cma_copy_probe: mmap/pipe");
    return -1;
  }
  for (size_t i = 0; i < bytes; ++i) shared[i] = Pattern(i);
  memset(dst, 0, bytes);
  const pid_t child = fork();
  if (child < 0) {
    perror("cma_copy_probe: fork");
    return -1;
  }
  if (child == 0) {
    for (size_t i = 0; i < bytes; ++i) child_buf[i] = Pattern(i);  // the child's own pages
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char one = 0;
  long wrong = 0;
  if (read(ready[0], &one, 1) != 1) {
    fprintf(stderr, "cma_copy_probe: the child did not start\n");
    wrong = -1;
  }
  const size_t pieces[2] = {128u << 10, bytes};
  double t[3][kRounds];
  for (int r = 0; r < kRounds && wrong >= 0; ++r) {
    for (int v = 0; v < 2 && wrong >= 0; ++v) {
      memset(dst, 0, bytes);
      const double t0 = Now();
      for (size_t at = 0; at < bytes; at += pieces[v]) {
        const size_t len = bytes - at < pieces[v] ? bytes - at : pieces[v];
        struct iovec l = {dst + at, len}, rm = {child_buf + at, len};
        const ssize_t got = process_vm_readv(child, &l, 1, &rm, 1, 0);
        if (got != (ssize_t)len) {
          fprintf(stderr, "cma_copy_probe: process_vm_readv: %s\n", got < 0 ? strerror(errno) : "short read");
          wrong = -1;
          break;
        }
      }
      t[v][r] = Now() - t0;
      for (size_t i = 0; i < bytes && wrong >= 0; ++i) wrong += dst[i] != Pattern(i);
    }
    memset(dst, 0, bytes);
    const double t0 = Now();
    memcpy(dst, shared, bytes);
    t[2][r] = Now() - t0;
    for (size_t i = 0; i < bytes && wrong >= 0; ++i) wrong += dst[i] != Pattern(i);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  if (wrong >= 0) {
    const char* names[3] = {"pvr 128K", "pvr whole", "memcpy"};
    for (int v = 0; v < 3; ++v) {
      qsort(t[v], kRounds, sizeof(double), Cmp);
      printf("%10zu %10s %10.1f %10.1f %8.2f %8.2f %8ld\n", bytes, names[v], t[v][kRounds / 2], t[v][0],
             (double)bytes / t[v][kRounds / 2] / 1e3, (double)bytes / t[v][0] / 1e3, wrong);
    }
  }
  munmap(child_buf, bytes);
  munmap(shared, bytes);
  munmap(dst, bytes);
  close(ready[0]);
  close(ready[1]);
  return wrong;
}

int main(int argc, char** argv) {
  struct utsname u;
  char host[160] = "?";
  if (uname(&u) == 0) snprintf(host, sizeof(host), "%s, kernel %s", u.nodename, u.release);
  printf("# cma_copy_probe on %s, %ld cpus; median and min of %d rounds\n", host, sysconf(_SC_NPROCESSORS_ONLN),
         kRounds);
  printf("# %8s %10s %10s %10s %8s %8s %8s\n", "bytes", "copy", "median_us", "min_us", "med_GB/s", "max_GB/s",
         "#wrong");
  const char* defaults[] = {"1M", "4M", "16M"};
  const int n = argc > 1 ? argc - 1 : 3;
  long bad = 0;
  for (int i = 0; i < n; ++i) {
    const size_t bytes = Parse(argc > 1 ? argv[i + 1] : defaults[i]);
    if (bytes == 0) {
      fprintf(stderr, "cma_copy_probe: bad size '%s'\n", argc > 1 ? argv[i + 1] : defaults[i]);
      return 2;
    }
    const long w = Probe(bytes);
    if (w != 0) bad = 1;
  }
  return bad ? 1 : 0;
}
