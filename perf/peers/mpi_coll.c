// mpi_coll: an MPI library's collectives measured the way allreduce_perf
// (perf/coll_perf.cc) measures ciuic's, with its flags, sizes, iteration rule
// and columns, so that perf/compare can put the two side by side row by row.
//
//   mpirun -np N mpi_coll [--coll allreduce|broadcast|reduce|allgather|
//                          reduce_scatter|alltoall] [allreduce_perf's flags]
//
// Columns (nccl-tests doc/PERFORMANCE.md): size count type redop root |
// out-of-place time algbw busbw #wrong | in-place time algbw busbw #wrong.
// time = the slowest rank's mean per iteration (us); algbw = size / time;
// busbw = algbw x the collective's factor (all-reduce 2(n-1)/n; all-gather,
// reduce-scatter, all-to-all (n-1)/n; broadcast and reduce 1).
//
// The same conventions as allreduce_perf, point by point:
//  - size loop: -b, then x -f (or + -i) up to -e; the per-rank count of
//    all-gather, reduce-scatter and all-to-all is size / n.
//  - iterations when -n is 0 (default): clamp(2e8 / bytes / max(1, n/2), 5,
//    1000); -w warm-up iterations (default 3) then a barrier before timing.
//  - in place as MPI defines it (MPI_IN_PLACE): all-reduce, reduce (at the
//    root), all-gather (this rank's block of the output); broadcast is in
//    place by nature, so its out-of-place pass copies send to receive buffer
//    at the root first, as allreduce_perf does. Reduce-scatter and all-to-all
//    run out of place only (the in-place columns say n/a).
//  - the check runs once after each timed pass on fresh inputs: small
//    integers (rank*3 + i*5) % 7 + 1, exact in every type and summation
//    order; #wrong = wrong elements summed over ranks.
//  - buffers are allocated once for the largest size and touched up front
//    (first-touch faults cost ~12 us per 4 KiB page on this machine).
//
// Exit status: 0 when no element was wrong, 1 otherwise, 2 on bad flags.
// Built against Open MPI (mpi_coll_openmpi) and MPICH (mpi_coll_mpich) when
// they are installed; see the end of perf/CMakeLists.txt. Keep the rules
// above in step with perf/coll_perf.cc.
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../size_arg.h"

enum Coll { kAllreduce, kBroadcast, kReduce, kAllgather, kReduceScatter, kAlltoall };
static const char* const kCollNames[] = {"allreduce", "broadcast", "reduce",
                                         "allgather", "reduce_scatter", "alltoall"};

typedef struct {
  const char* name;
  MPI_Datatype type;
  size_t size;
} TypeInfo;

typedef struct {
  enum Coll coll;
  size_t min_bytes, max_bytes;
  double factor;
  size_t step_bytes;  // -i: additive step instead of -f
  long iters;         // 0 = by size
  long warmup;
  int check;
  const char* redop_name;
  MPI_Op redop;
  TypeInfo type;
  int root;
  int inplace;
  const char* format;
  const char* label;
  double cap_s;  // > 0: stop a size after about this long (--cap-s)
} Options;

static int g_rank = 0, g_size = 1;

static void Usage(FILE* out) {
  fprintf(out,
          "usage: mpirun -np N mpi_coll [--coll C] [-b minbytes] [-e maxbytes] [-f factor | -i step]\n"
          "          [-n iters] [-w warmup] [-c 0|1] [-o sum|prod|min|max] [-d float|double|int32|int64]\n"
          "          [-r root] [--no-inplace] [--format table|csv|json] [-l label] [--cap-s S]\n"
          "  --coll C  allreduce (default), broadcast, reduce, allgather, reduce_scatter, alltoall\n"
          "  -l NAME   name in the header and the algo column (default: openmpi or mpich)\n"
          "  --cap-s S stop each size after about S seconds (default 0: never, as allreduce_perf);\n"
          "            for oversubscribed runs where a library collapses\n"
          "  sizes take K/M/G suffixes; -n 0 = scaled by size (as allreduce_perf)\n");
}

static int Bad(const char* flag, const char* value, const char* expected) {
  if (g_rank == 0) fprintf(stderr, "mpi_coll: %s '%s': expected %s\n", flag, value ? value : "", expected);
  return -1;
}

// "4096", "64K", "1M", "2G" (binary multiples, an optional B). 0 on success.
static int ParseSize(const char* text, size_t* out) {
  uint64_t v = 0;
  if (ParseSizeArg(text, &v) != 0) return -1;
  *out = (size_t)v;
  return 0;
}

static int ParseLong(const char* text, long lo, long hi, long* out) {
  char* end = NULL;
  if (text == NULL || *text == '\0') return -1;
  const long v = strtol(text, &end, 10);
  if (*end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

// 0 on success, 1 after --help, -1 on a bad flag (named on stderr by rank 0).
static int ParseOptions(int argc, char** argv, Options* o) {
  memset(o, 0, sizeof(*o));
  o->coll = kAllreduce;
  o->min_bytes = 8;
  o->max_bytes = 64u << 20;
  o->factor = 2;
  o->warmup = 3;
  o->check = 1;
  o->redop_name = "sum";
  o->redop = MPI_SUM;
  o->type = (TypeInfo){"float", MPI_FLOAT, sizeof(float)};
  o->inplace = 1;
  o->format = "table";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      if (g_rank == 0) Usage(stdout);
      return 1;
    }
    if (strcmp(a, "--no-inplace") == 0) {
      o->inplace = 0;
      continue;
    }
    static const char* const kWithValue[] = {"-b", "-e", "-f", "-i", "-n", "-w", "-c", "-o", "-d",
                                             "-r", "-l", "--coll", "--format", "--label", "--cap-s"};
    int known = 0;
    for (size_t k = 0; k < sizeof(kWithValue) / sizeof(kWithValue[0]); ++k) known |= strcmp(a, kWithValue[k]) == 0;
    if (!known) {
      if (g_rank == 0) fprintf(stderr, "mpi_coll: unknown flag '%s' (see --help)\n", a);
      return -1;
    }
    if (i + 1 >= argc) {
      if (g_rank == 0) fprintf(stderr, "mpi_coll: %s needs a value\n", a);
      return -1;
    }
    const char* v = argv[++i];
    long x;
    if (strcmp(a, "-b") == 0) {
      if (ParseSize(v, &o->min_bytes) != 0) return Bad("-b", v, "a size such as 8, 64K, 1M");
    } else if (strcmp(a, "-e") == 0) {
      if (ParseSize(v, &o->max_bytes) != 0) return Bad("-e", v, "a size such as 256M");
    } else if (strcmp(a, "-f") == 0) {
      char* end = NULL;
      o->factor = strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o->factor > 1.0)) return Bad("-f", v, "a factor > 1");
    } else if (strcmp(a, "-i") == 0) {
      if (ParseSize(v, &o->step_bytes) != 0 || o->step_bytes == 0) return Bad("-i", v, "a step >= 1");
    } else if (strcmp(a, "-n") == 0) {
      if (ParseLong(v, 0, 1000000, &o->iters) != 0) return Bad("-n", v, "an integer in [0, 1000000]");
    } else if (strcmp(a, "-w") == 0) {
      if (ParseLong(v, 0, 100000, &o->warmup) != 0) return Bad("-w", v, "an integer in [0, 100000]");
    } else if (strcmp(a, "-c") == 0) {
      if (ParseLong(v, 0, 1, &x) != 0) return Bad("-c", v, "0 or 1");
      o->check = (int)x;
    } else if (strcmp(a, "-r") == 0) {
      if (ParseLong(v, 0, INT_MAX, &x) != 0) return Bad("-r", v, "a rank >= 0");
      o->root = (int)x;
    } else if (strcmp(a, "-o") == 0) {
      o->redop_name = v;
      if (strcmp(v, "sum") == 0) o->redop = MPI_SUM;
      else if (strcmp(v, "prod") == 0) o->redop = MPI_PROD;
      else if (strcmp(v, "min") == 0) o->redop = MPI_MIN;
      else if (strcmp(v, "max") == 0) o->redop = MPI_MAX;
      else return Bad("-o", v, "sum, prod, min or max (MPI has no avg)");
    } else if (strcmp(a, "-d") == 0) {
      if (strcmp(v, "float") == 0) o->type = (TypeInfo){"float", MPI_FLOAT, sizeof(float)};
      else if (strcmp(v, "double") == 0) o->type = (TypeInfo){"double", MPI_DOUBLE, sizeof(double)};
      else if (strcmp(v, "int32") == 0) o->type = (TypeInfo){"int32", MPI_INT32_T, sizeof(int32_t)};
      else if (strcmp(v, "int64") == 0) o->type = (TypeInfo){"int64", MPI_INT64_T, sizeof(int64_t)};
      else return Bad("-d", v, "float, double, int32 or int64");
    } else if (strcmp(a, "--coll") == 0) {
      int found = -1;
      for (int k = 0; k < 6; ++k) {
        if (strcmp(v, kCollNames[k]) == 0) found = k;
      }
      if (found < 0) return Bad("--coll", v, "allreduce, broadcast, reduce, allgather, reduce_scatter or alltoall");
      o->coll = (enum Coll)found;
    } else if (strcmp(a, "--format") == 0) {
      if (strcmp(v, "table") != 0 && strcmp(v, "csv") != 0 && strcmp(v, "json") != 0) {
        return Bad("--format", v, "table, csv or json");
      }
      o->format = v;
    } else if (strcmp(a, "--cap-s") == 0) {
      char* end = NULL;
      o->cap_s = strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o->cap_s >= 0)) return Bad("--cap-s", v, "seconds >= 0");
    } else {  // -l, --label
      o->label = v;
    }
  }
  if (o->min_bytes > o->max_bytes) {
    if (g_rank == 0) fprintf(stderr, "mpi_coll: -b is larger than -e\n");
    return -1;
  }
  return 0;
}

typedef struct {
  size_t count;  // per-rank element count as nccl-tests prints it
  size_t send_elems, recv_elems;
  double bus_factor;
  size_t size_bytes;  // the "size" column
} Case;

static Case MakeCase(enum Coll c, size_t bytes, size_t es, int n) {
  Case k;
  memset(&k, 0, sizeof(k));
  switch (c) {
    case kAllreduce:
      k.count = bytes / es;
      k.send_elems = k.recv_elems = k.count;
      k.bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0;
      break;
    case kBroadcast:
    case kReduce:
      k.count = bytes / es;
      k.send_elems = k.recv_elems = k.count;
      k.bus_factor = 1;
      break;
    case kAllgather:
      k.count = bytes / es / (size_t)n;
      k.send_elems = k.count;
      k.recv_elems = k.count * (size_t)n;
      k.bus_factor = (double)(n - 1) / n;
      break;
    case kReduceScatter:
      k.count = bytes / es / (size_t)n;
      k.send_elems = k.count * (size_t)n;
      k.recv_elems = k.count;
      k.bus_factor = (double)(n - 1) / n;
      break;
    case kAlltoall:
      k.count = bytes / es / (size_t)n;
      k.send_elems = k.recv_elems = k.count * (size_t)n;
      k.bus_factor = (double)(n - 1) / n;
      break;
  }
  k.size_bytes = (c == kAllgather || c == kReduceScatter || c == kAlltoall) ? k.count * (size_t)n * es
                                                                          : k.count * es;
  return k;
}

static double Value(int rank, size_t i) { return (double)((rank * 3 + (long long)(i % 7) * 5) % 7 + 1); }

static void StoreValue(void* buf, const TypeInfo* t, size_t i, double v) {
  if (t->type == MPI_FLOAT) ((float*)buf)[i] = (float)v;
  else if (t->type == MPI_DOUBLE) ((double*)buf)[i] = v;
  else if (t->type == MPI_INT32_T) ((int32_t*)buf)[i] = (int32_t)v;
  else ((int64_t*)buf)[i] = (int64_t)v;
}

static double LoadValue(const void* buf, const TypeInfo* t, size_t i) {
  if (t->type == MPI_FLOAT) return ((const float*)buf)[i];
  if (t->type == MPI_DOUBLE) return ((const double*)buf)[i];
  if (t->type == MPI_INT32_T) return ((const int32_t*)buf)[i];
  return (double)((const int64_t*)buf)[i];
}

static double Expected(MPI_Op op, int n, size_t i) {
  double acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Value(r, i);
    if (op == MPI_SUM) acc += v;
    else if (op == MPI_PROD) acc *= v;
    else if (op == MPI_MIN) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  return acc;
}

// One collective call. `in` and `out` as allreduce_perf passes them; with
// `inplace` they are the same buffer, except for all-gather where `in` is
// this rank's block of `out` (MPI_IN_PLACE tells MPI where the data is).
static int RunOnce(const Options* o, const Case* c, const void* in, void* out, int inplace) {
  const int count = (int)c->count;  // main() keeps every count below 2^31
  const MPI_Datatype t = o->type.type;
  switch (o->coll) {
    case kAllreduce:
      return MPI_Allreduce(inplace ? MPI_IN_PLACE : in, out, count, t, o->redop, MPI_COMM_WORLD);
    case kBroadcast:
      if (in != out && g_rank == o->root) memcpy(out, in, c->count * o->type.size);
      return MPI_Bcast(out, count, t, o->root, MPI_COMM_WORLD);
    case kReduce:
      return MPI_Reduce(inplace && g_rank == o->root ? MPI_IN_PLACE : in, out, count, t, o->redop, o->root,
                        MPI_COMM_WORLD);
    case kAllgather:
      if (inplace) return MPI_Allgather(MPI_IN_PLACE, 0, t, out, count, t, MPI_COMM_WORLD);
      return MPI_Allgather(in, count, t, out, count, t, MPI_COMM_WORLD);
    case kReduceScatter:
      return MPI_Reduce_scatter_block(in, out, count, t, o->redop, MPI_COMM_WORLD);
    case kAlltoall:
      return MPI_Alltoall(in, count, t, out, count, t, MPI_COMM_WORLD);
  }
  return MPI_ERR_OTHER;
}

// Fills fresh inputs, runs once and counts this rank's wrong output elements.
static int Check(const Options* o, const Case* c, char* send, char* recv, int inplace, double* wrong_out) {
  const int r = g_rank, n = g_size;
  const TypeInfo* t = &o->type;
  const size_t es = t->size;
  for (size_t i = 0; i < c->send_elems; ++i) StoreValue(send, t, i, Value(r, i));
  void* out = recv;
  const void* in = send;
  if (inplace) {
    out = send;
    in = send;
    if (o->coll == kAllgather) {
      in = send + (size_t)r * c->count * es;
      for (size_t i = 0; i < c->count; ++i) StoreValue(send, t, (size_t)r * c->count + i, Value(r, i));
    }
  }
  const int rc = RunOnce(o, c, in, out, inplace);
  if (rc != MPI_SUCCESS) return rc;
  double wrong = 0;
#define EXPECT(idx, v) wrong += LoadValue(out, t, (idx)) != (v)
  switch (o->coll) {
    case kAllreduce:
      for (size_t i = 0; i < c->count; ++i) EXPECT(i, Expected(o->redop, n, i));
      break;
    case kBroadcast:
      for (size_t i = 0; i < c->count; ++i) EXPECT(i, Value(o->root, i));
      break;
    case kReduce:
      if (r == o->root) {
        for (size_t i = 0; i < c->count; ++i) EXPECT(i, Expected(o->redop, n, i));
      }
      break;
    case kAllgather:
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < c->count; ++i) EXPECT((size_t)p * c->count + i, Value(p, i));
      }
      break;
    case kReduceScatter:
      for (size_t i = 0; i < c->count; ++i) EXPECT(i, Expected(o->redop, n, (size_t)r * c->count + i));
      break;
    case kAlltoall:
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < c->count; ++i) EXPECT((size_t)p * c->count + i, Value(p, (size_t)r * c->count + i));
      }
      break;
  }
#undef EXPECT
  *wrong_out = wrong;
  return MPI_SUCCESS;
}

typedef struct {
  size_t size, count;
  long iters[2];
  int capped;
  double time_us[2], algbw[2], busbw[2], wrong[2];
} Row;

static double MaxOverRanks(double v) {
  double m = v;
  MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

// Warm-up and timed loop of one size and pass; returns the mean time per
// iteration in microseconds (this rank's) and the iterations run. Without
// a cap exactly allreduce_perf's loop. With --cap-s the warm-up stops early
// and the timed loop runs in chunks that double in length, the ranks agreeing
// between chunks (outside the timing) whether the cap is reached, so that all
// stop after the same iteration.
static int TimeLoop(const Options* o, const Case* c, const void* in, void* out, int inplace, long iters,
                    double* us, long* done_out, int* capped) {
  int rc = MPI_SUCCESS;
  if (o->cap_s <= 0) {
    for (long w = 0; w < o->warmup && rc == MPI_SUCCESS; ++w) rc = RunOnce(o, c, in, out, inplace);
    if (rc == MPI_SUCCESS) rc = MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (long it = 0; it < iters && rc == MPI_SUCCESS; ++it) rc = RunOnce(o, c, in, out, inplace);
    *us = (MPI_Wtime() - t0) * 1e6 / (double)iters;
    *done_out = iters;
    return rc;
  }
  double per_iter = 0;
  if (o->warmup > 0) {
    double w0 = MPI_Wtime();
    rc = RunOnce(o, c, in, out, inplace);
    per_iter = MaxOverRanks(MPI_Wtime() - w0);
    long left = o->warmup - 1;
    const long fit = (long)(o->cap_s / 4 / (per_iter > 1e-9 ? per_iter : 1e-9));
    if (left > fit) left = fit;
    if (left > 0) {
      w0 = MPI_Wtime();
      for (long w = 0; w < left && rc == MPI_SUCCESS; ++w) rc = RunOnce(o, c, in, out, inplace);
      per_iter = MaxOverRanks((MPI_Wtime() - w0) / (double)left);
    }
  }
  long chunk = (long)(o->cap_s / 4 / (per_iter > 1e-9 ? per_iter : 1e-9));
  if (chunk < 1) chunk = 1;
  if (chunk > iters) chunk = iters;
  long done = 0;
  double elapsed = 0;
  if (rc == MPI_SUCCESS) rc = MPI_Barrier(MPI_COMM_WORLD);
  while (done < iters && rc == MPI_SUCCESS) {
    if (chunk > iters - done) chunk = iters - done;
    const double t0 = MPI_Wtime();
    for (long it = 0; it < chunk && rc == MPI_SUCCESS; ++it) rc = RunOnce(o, c, in, out, inplace);
    elapsed += MPI_Wtime() - t0;
    done += chunk;
    chunk *= 2;
    if (done < iters && MaxOverRanks(elapsed) >= o->cap_s) {
      *capped = 1;
      break;
    }
  }
  *us = elapsed * 1e6 / (double)done;
  *done_out = done;
  return rc;
}

// Characters that would break a JSON string become spaces.
static void JsonSafe(char* s) {
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) *s = ' ';
  }
}

// The transport class the job runs over, from the MCA parameters mpirun
// passes down (Open MPI) or the UCX transports (MPICH ch4:ucx); "default"
// when neither is set.
static void TransportName(char* out, size_t len) {
  const char* btl = getenv("OMPI_MCA_btl");
  const char* ucx = getenv("UCX_TLS");
  if (btl != NULL) snprintf(out, len, "btl=%s", btl);
  else if (ucx != NULL) snprintf(out, len, "UCX_TLS=%s", ucx);
  else snprintf(out, len, "default");
  JsonSafe(out);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  Options o;
  const int parsed = ParseOptions(argc, argv, &o);
  if (parsed != 0) {
    MPI_Finalize();
    return parsed > 0 ? 0 : 2;
  }
  const int n = g_size;
  if (o.root >= n) {
    if (g_rank == 0) fprintf(stderr, "mpi_coll: -r: root %d outside the %d ranks\n", o.root, n);
    MPI_Finalize();
    return 2;
  }
  const size_t es = o.type.size;
  const Case big = MakeCase(o.coll, o.max_bytes, es, n);
  const size_t max_elems = big.send_elems > big.recv_elems ? big.send_elems : big.recv_elems;
  if (max_elems > (size_t)INT_MAX) {
    if (g_rank == 0) fprintf(stderr, "mpi_coll: -e: at most 2^31-1 elements per buffer (an MPI int count)\n");
    MPI_Finalize();
    return 2;
  }
  const size_t cap = max_elems * es + 64;
  // Touched once up front, as allreduce_perf's buffers are.
  char* send = malloc(cap);
  char* recv = malloc(cap);
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "mpi_coll rank %d: cannot allocate 2 x %zu bytes\n", g_rank, cap);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(send, 1, cap);
  memset(recv, 2, cap);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int liblen = 0;
  MPI_Get_library_version(lib, &liblen);
  lib[strcspn(lib, "\n,")] = '\0';
  JsonSafe(lib);
  char label[64], transport[128];
  snprintf(label, sizeof(label), "%s", o.label != NULL ? o.label : strstr(lib, "MPICH") != NULL ? "mpich" : "openmpi");
  JsonSafe(label);
  TransportName(transport, sizeof(transport));
  const int json = strcmp(o.format, "json") == 0, csv = strcmp(o.format, "csv") == 0;
  const char* coll = kCollNames[o.coll];
  if (g_rank == 0) {
    char host[256] = "?", date[64];
    gethostname(host, sizeof(host) - 1);
    const time_t now = time(NULL);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    printf("# mpi_coll %s  %s  (%s)  %s\n", coll, label, lib, date);
    printf("# host %s  ranks %d  transport %s  dtype %s  redop %s  root %d  check %d\n", host, n, transport,
           o.type.name, o.redop_name, o.root, o.check);
    if (o.cap_s > 0) printf("# time cap: each size stops after about %.1f s (capped sizes listed at the end)\n", o.cap_s);
    if (csv) {
      printf("size,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong,algo\n");
    } else if (!json) {
      printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
             "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
             "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    fflush(stdout);
  }

  size_t nrows = 0, rows_cap = 64;
  Row* rows = malloc(rows_cap * sizeof(Row));
  double total_wrong = 0;
  const int can_inplace = o.coll != kReduceScatter && o.coll != kAlltoall;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    const Case c = MakeCase(o.coll, bytes, es, n);
    Row row;
    memset(&row, 0, sizeof(row));
    row.size = c.size_bytes;
    row.count = c.count;
    row.wrong[0] = row.wrong[1] = -1;
    double auto_iters = 2e8 / (double)(bytes > 0 ? bytes : 1) / (n / 2 > 1 ? n / 2 : 1);
    if (auto_iters < 5) auto_iters = 5;
    if (auto_iters > 1000) auto_iters = 1000;
    const long iters = o.iters > 0 ? o.iters : (long)auto_iters;
    for (int pass = 0; pass < (o.inplace && can_inplace ? 2 : 1); ++pass) {
      const int inplace = pass == 1;
      void* out = inplace ? send : recv;
      const void* in = send;
      if (inplace && o.coll == kAllgather) in = send + (size_t)g_rank * c.count * es;
      double us = 0;
      int rc = TimeLoop(&o, &c, in, out, inplace, iters, &us, &row.iters[pass], &row.capped);
      double wrong = 0;
      if (rc == MPI_SUCCESS && o.check) rc = Check(&o, &c, send, recv, inplace, &wrong);
      double maxes[2] = {0, 0};
      if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&us, &maxes[0], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&wrong, &maxes[1], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpi_coll rank %d: %s at %zu bytes: %s\n", g_rank, coll, bytes, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      row.time_us[pass] = maxes[0];
      row.algbw[pass] = maxes[0] > 0 ? (double)c.size_bytes / maxes[0] / 1e3 : 0;
      row.busbw[pass] = row.algbw[pass] * c.bus_factor;
      row.wrong[pass] = maxes[1];
      total_wrong += maxes[1];
    }
    if (g_rank == 0) {
      if (csv) {
        printf("%zu,%zu,%s,%s,%d,%.2f,%.3f,%.3f,%.0f,%.2f,%.3f,%.3f,%.0f,\"%s\"\n", row.size, row.count, o.type.name,
               o.redop_name, o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0], row.time_us[1],
               row.algbw[1], row.busbw[1], row.wrong[1], label);
      } else if (!json) {
        printf("%12zu %12zu %8s %6s %5d   %9.2f %7.2f %7.2f %6.0f", row.size, row.count, o.type.name, o.redop_name,
               o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0]);
        if (o.inplace && row.wrong[1] >= 0) {
          printf("   %9.2f %7.2f %7.2f %6.0f", row.time_us[1], row.algbw[1], row.busbw[1], row.wrong[1]);
        } else if (o.inplace) {
          printf("   %9s %7s %7s %6s", "n/a", "", "", "");
        }
        printf("\n");
      }
      fflush(stdout);
    }
    if (nrows == rows_cap) {
      rows_cap *= 2;
      Row* grown = realloc(rows, rows_cap * sizeof(Row));
      if (grown == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
      rows = grown;
    }
    rows[nrows++] = row;
    if (bytes == o.max_bytes) break;
    size_t next = o.step_bytes > 0 ? bytes + o.step_bytes : (size_t)((double)bytes * o.factor);
    if (next < bytes + 1) next = bytes + 1;
    bytes = next;
  }
  if (g_rank == 0) {
    double peak = 0;
    size_t peak_size = 0;
    for (size_t i = 0; i < nrows; ++i) {
      if (rows[i].busbw[0] > peak) {
        peak = rows[i].busbw[0];
        peak_size = rows[i].size;
      }
    }
    if (json) {
      printf("{\"collective\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"library\":\"%s\",\"label\":\"%s\","
             "\"dtype\":\"%s\",\"redop\":\"%s\",\"rows\":[",
             coll, n, transport, lib, label, o.type.name, o.redop_name);
      for (size_t i = 0; i < nrows; ++i) {
        const Row* r = &rows[i];
        printf("%s{\"size\":%zu,\"count\":%zu,\"iters\":%ld,\"iters_inplace\":%ld,\"capped\":%s,\"oop\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,"
               "\"wrong\":%.0f},\"inplace\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%.0f},"
               "\"algo\":\"%s\"}",
               i ? "," : "", r->size, r->count, r->iters[0], r->iters[1], r->capped ? "true" : "false", r->time_us[0], r->algbw[0], r->busbw[0], r->wrong[0],
               r->time_us[1], r->algbw[1], r->busbw[1], r->wrong[1], label);
      }
      printf("],\"peak_busbw\":%.4f,\"wrong\":%.0f}\n", peak, total_wrong);
    } else {
      printf("# Out of bounds values : %.0f %s\n", total_wrong, total_wrong > 0 ? "FAILED" : "OK");
      printf("# Peak busbw : %.2f GB/s at %zu B   small-message latency : %.2f us at %zu B\n", peak, peak_size,
             nrows ? rows[0].time_us[0] : 0.0, nrows ? rows[0].size : (size_t)0);
      for (size_t i = 0; i < nrows; ++i) {
        if (rows[i].capped) {
          printf("# capped at %.1f s: %zu B ran %ld/%ld iterations (out of place/in place)\n", o.cap_s, rows[i].size,
                 rows[i].iters[0], rows[i].iters[1]);
        }
      }
    }
    fflush(stdout);
  }
  free(rows);
  free(send);
  free(recv);
  MPI_Finalize();
  return total_wrong > 0 ? 1 : 0;
}
