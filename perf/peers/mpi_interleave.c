// mpi_interleave: ciuic and Open MPI in the same processes, called the way a
// user's program calls them (issue #22): a communicator made from
// MPI_COMM_WORLD (include/ciuic/ciuic_mpi.h), and per size R rounds of
//   compute (a loop that writes the send buffer and reads the receive
//   buffer, as a training step leaves fresh gradients), MPI_Allreduce,
//   compute, ciuic_allreduce
// on the same buffers, which library goes first alternating by round. Each
// call is timed alone (a barrier before it; the slowest rank's time) and
// checked (#wrong: elements that differ from the exact sum; the inputs are
// small integers, exact in float; each call sums other inputs). Per size:
// the median and range of each library, the speedup MPI / ciuic of the
// medians, and the memory yardstick measured in the same process on
// the same buffers: one copy of the bytes plus one 2-input reduction of them
// (ciuic_reduce_local) on one core. An all-reduce that splits that work
// between its ranks (as the direct one of 2 ranks does) can go below it.
//
//   mpirun -np N mpi_interleave [-b 8] [-e 256M] [-f 8] [-r 11] [-c PASSES]
//                               [-B mpi|own] [-W WARM]
//
// -c: passes of the compute loop over the buffers between calls (1-100,
// default 1; the first writes the inputs the check expects). -B: the
// barrier before each timed call is MPI's (default) or the timed library's
// own. -W: untimed calls of the same library right before each timed one
// (default 0). Prints the host, the ranks and the libraries; exit status 0 when no
// element was wrong, 1 otherwise, 2 on bad flags.
#define _GNU_SOURCE
#include <mpi.h>
#include <ciuic/ciuic_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../size_arg.h"

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// The compute between calls: writes every send element from a value the
// salt and rank fix (small integers, exact in any summation order) and
// folds the receive buffer into a checksum, so both buffers are the
// caller's freshly touched lines.
static float Compute(float* send, const float* recv, size_t count, int rank, int salt, int passes) {
  float fold = 0;
  for (int p = 0; p < passes; ++p) {
    for (size_t i = 0; i < count; ++i) {
      fold += recv[i] * 0x1p-20f;
      send[i] = (float)((rank * 3 + (int)(i % 1021) * 5 + salt) % 7 + 1);
    }
  }
  return fold;
}

static long long Wrong(const float* recv, size_t count, int n, int salt) {
  long long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += (float)((r * 3 + (int)(i % 1021) * 5 + salt) % 7 + 1);
    wrong += recv[i] != want;
  }
  return wrong;
}

// How each call is lined up (-B): 0 an MPI_Barrier before either library's
// call (which leaves MPI's code and lines warm), 1 the timed library's own
// barrier, so each starts from its own last step.
static int g_own_barrier = 0;
// Untimed calls of the same library and size right before the timed one
// (-W), to tell a cold call's cost from a warm one's.
static int g_warm_calls = 0;

static void Call(int lib, ciuic_comm_t comm, float* send, float* recv, size_t count) {
  if (lib == 0) {
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  } else if (ciuic_allreduce(send, recv, count, CIUIC_FLOAT32, CIUIC_SUM, comm) != CIUIC_SUCCESS) {
    fprintf(stderr, "ciuic_allreduce: %s\n", ciuic_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Seconds of the slowest rank for one call of `lib` (0 MPI, 1 ciuic).
static double TimeCall(int lib, ciuic_comm_t comm, float* send, float* recv, size_t count) {
  for (int w = 0; w < g_warm_calls; ++w) Call(lib, comm, send, recv, count);
  if (g_own_barrier && lib == 1) {
    if (ciuic_barrier(comm) != CIUIC_SUCCESS) {
      fprintf(stderr, "ciuic_barrier: %s\n", ciuic_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  const double t0 = MonotonicSeconds();
  Call(lib, comm, send, recv, count);
  double t = MonotonicSeconds() - t0, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// One memcpy of `bytes` plus one 2-input sum of them, the fastest of 5.
static double MemoryLimit(float* send, float* recv, float* other, size_t count) {
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    const double t0 = MonotonicSeconds();
    memcpy(other, send, count * sizeof(float));
    const void* srcs[2] = {send, other};
    if (ciuic_reduce_local(recv, srcs, 2, count, CIUIC_FLOAT32, CIUIC_SUM) != CIUIC_SUCCESS) return -1;
    const double t = MonotonicSeconds() - t0;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  uint64_t min_bytes = 8, max_bytes = 256u << 20, factor = 8;
  int rounds = 11, passes = 1;
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = v == NULL;
    if (!bad && strcmp(argv[i], "-b") == 0) bad = ParseSizeArg(v, &min_bytes) != 0;
    else if (!bad && strcmp(argv[i], "-e") == 0) bad = ParseSizeArg(v, &max_bytes) != 0;
    else if (!bad && strcmp(argv[i], "-f") == 0) bad = ParseSizeArg(v, &factor) != 0 || factor < 2;
    else if (!bad && strcmp(argv[i], "-r") == 0) bad = (rounds = atoi(v)) < 1 || rounds > 1000;
    else if (!bad && strcmp(argv[i], "-c") == 0) bad = (passes = atoi(v)) < 1 || passes > 100;
    else if (!bad && strcmp(argv[i], "-B") == 0) bad = !(g_own_barrier = strcmp(v, "own") == 0) && strcmp(v, "mpi") != 0;
    else if (!bad && strcmp(argv[i], "-W") == 0) bad = (g_warm_calls = atoi(v)) < 0 || g_warm_calls > 100;
    else bad = 1;
    if (bad) {
      if (rank == 0) fprintf(stderr, "usage: mpi_interleave [-b 8] [-e 256M] [-f 8] [-r 11] [-c 1] [-B mpi|own] [-W 0] (bad '%s')\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
    ++i;
  }
  if (min_bytes < 4 || min_bytes > max_bytes) min_bytes = 4;
  ciuic_comm_t comm;
  if (ciuic_comm_init_from_mpi(MPI_COMM_WORLD, &comm) != CIUIC_SUCCESS) {
    fprintf(stderr, "rank %d: ciuic_comm_init_from_mpi: %s\n", rank, ciuic_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const size_t max_count = max_bytes / sizeof(float);
  float* send = malloc(max_count * sizeof(float));
  float* recv = malloc(max_count * sizeof(float));
  float* other = malloc(max_count * sizeof(float));
  double* times = malloc(sizeof(double) * 2 * (size_t)rounds);
  if (!send || !recv || !other || !times) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(recv, 0, max_count * sizeof(float));
  memset(other, 0, max_count * sizeof(float));
  char host[256] = "?", mpi_version[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
  gethostname(host, sizeof(host));
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  char* eol = strchr(mpi_version, '\n');
  if (eol) *eol = '\0';
  const char* transport = getenv("CIUIC_TRANSPORT");
  if (rank == 0) {
    printf("# mpi_interleave: %d ranks on %s; %s; ciuic %s (CIUIC_TRANSPORT=%s); %d rounds per size, compute passes %d, "
           "barrier %s, warm calls %d\n",
           n, host, mpi_version, ciuic_version(), transport ? transport : "auto", rounds, passes,
           g_own_barrier ? "own" : "mpi", g_warm_calls);
    printf("# time: the slowest rank's, one call; median [min-max] over the rounds; limit: one copy + one 2-input sum\n");
    printf("# %10s %24s %24s %8s %10s %8s %7s\n", "bytes", "mpi us", "ciuic us", "speedup", "limit us",
           "ci/limit", "#wrong");
  }
  // One call of each first: connections and registrations are made, as in
  // a program's first step, not inside the rounds.
  (void)TimeCall(0, comm, send, recv, 1);
  (void)TimeCall(1, comm, send, recv, 1);
  long long total_wrong = 0;
  float sink = 0;
  for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    const size_t count = bytes / sizeof(float);
    long long wrong = 0;
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const int lib = (r + k) % 2;  // who goes first alternates
        // Every call sums other inputs than the one before, so a call that
        // leaves the output alone cannot pass on the previous call's result.
        const int salt = 2 * r + k;
        sink += Compute(send, recv, count, rank, salt, passes);
        times[lib * rounds + r] = TimeCall(lib, comm, send, recv, count);
        wrong += Wrong(recv, count, n, salt);
      }
    }
    sink += Compute(send, recv, count, rank, 0, passes);  // fresh lines for the yardstick too
    const double limit = MemoryLimit(send, recv, other, count);
    if (limit < 0) {
      fprintf(stderr, "rank %d: ciuic_reduce_local: %s\n", rank, ciuic_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long long all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    total_wrong += all_wrong;
    qsort(times, (size_t)rounds, sizeof(double), CompareDoubles);
    qsort(times + rounds, (size_t)rounds, sizeof(double), CompareDoubles);
    const double mpi_med = times[rounds / 2], ci_med = times[rounds + rounds / 2];
    if (rank == 0) {
      char a[64], b[64];
      // Two decimals below 10 us: the small sizes differ by tenths.
      const char* fmt = mpi_med < 1e-5 && ci_med < 1e-5 ? "%.2f [%.2f-%.1f]" : "%.1f [%.1f-%.1f]";
      snprintf(a, sizeof(a), fmt, mpi_med * 1e6, times[0] * 1e6, times[rounds - 1] * 1e6);
      snprintf(b, sizeof(b), fmt, ci_med * 1e6, times[rounds] * 1e6, times[2 * rounds - 1] * 1e6);
      printf("  %10llu %24s %24s %8.2f %10.1f %8.2f %7lld\n", (unsigned long long)bytes, a, b, mpi_med / ci_med,
             limit * 1e6, ci_med / limit, all_wrong);
      fflush(stdout);
    }
  }
  if (rank == 0) printf("# Out of bounds values : %lld %s (checksum %g)\n", total_wrong, total_wrong ? "FAILED" : "OK",
                        (double)sink);
  ciuic_comm_destroy(comm);
  free(send);
  free(recv);
  free(other);
  free(times);
  MPI_Finalize();
  return total_wrong ? 1 : 0;
}
