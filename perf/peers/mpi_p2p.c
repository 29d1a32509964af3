// mpi_p2p: point-to-point bandwidth and latency of an MPI library between
// ranks 0 and 1, with the sizes, flags and columns of transport_perf so the
// two can be compared row by row (perf/p2p_compare.sh).
//
//   bandwidth  like osu_bw: rank 0 posts a window of W MPI_Isend of the same
//              buffer, rank 1 a window of MPI_Irecv into one buffer, both
//              MPI_Waitall, rank 1 acknowledges each window with a 4-byte
//              message. BW_avg = bytes / (start of the first timed window to
//              the last acknowledgement); BW_peak = the best window.
//   latency    like osu_latency: MPI_Send / MPI_Recv ping-pong of S bytes,
//              one way = round trip / 2, percentiles over every iteration.
//
// Data is checked in every run: the sources carry a pattern derived from the
// size, the receivers poison their buffer before each size and count the
// bytes that differ from the pattern after the last iteration (#wrong). The
// exit status is 1 when any byte was wrong, 2 on bad flags.
//
// Buffers are mmap'ed once for the largest size, with transparent huge pages,
// and pre-faulted: first-touch faults (~12 us per 4 KiB page here) and an
// allocator that trims memory would otherwise dominate the large sizes.
//
// Built against Open MPI (mpi_p2p_openmpi) and MPICH (mpi_p2p_mpich) when
// they are installed; see perf/CMakeLists.txt. Keep the iteration rule
// (IterationsFor) in step with perf/transport_perf.cc.
#define _GNU_SOURCE
#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../size_arg.h"

enum { kModeBw = 1, kModeLat = 2 };
enum { kTagData = 1, kTagAck = 2, kTagWrong = 3 };

typedef struct {
  uint64_t min_bytes, max_bytes;
  uint64_t factor;
  long iters;   // -1 = by size
  long warmup;  // -1 = by iterations
  long window;
  int mode;
  const char* format;
  const char* label;
} Options;

static int g_rank = 0;
// Ranks 0 and 1 of MPI_COMM_WORLD; every measurement runs on it.
static MPI_Comm g_comm = MPI_COMM_NULL;

static void Usage(FILE* out) {
  fprintf(out,
          "usage: mpirun -np 2 mpi_p2p [options]\n"
          "  -b, --min-bytes N  smallest message (default 8; K/M/G suffixes)\n"
          "  -e, --max-bytes N  largest message (default 256M)\n"
          "  -f, --factor N     size multiplier between rows (default 2)\n"
          "  -n, --iters N      timed iterations per size (default: by size, as transport_perf)\n"
          "  -w, --warmup N     untimed iterations before them (default: n/10, 2..1000)\n"
          "  -W, --window N     messages in flight per bandwidth window (default 16)\n"
          "      --mode M       bw, lat or both (default both)\n"
          "      --format F     table, csv or json (default table)\n"
          "  -l, --label NAME   name in the transport column (default: the MPI library)\n"
          "  -h, --help\n");
}

// Parses "4096", "64K", "1M", "2G" (binary multiples). 0 on success.
static int ParseSize(const char* text, uint64_t* out) { return ParseSizeArg(text, out); }

static int ParseLong(const char* text, long min, long* out) {
  char* end = NULL;
  if (text == NULL || *text == '\0') return -1;
  long v = strtol(text, &end, 10);
  if (*end != '\0' || v < min) return -1;
  *out = v;
  return 0;
}

static int BadFlag(const char* flag, const char* value, const char* expected) {
  if (g_rank == 0) {
    fprintf(stderr, "mpi_p2p: %s '%s': expected %s\n", flag, value ? value : "", expected);
  }
  return -1;
}

static int ParseOptions(int argc, char** argv, Options* o) {
  static const struct option kLong[] = {
      {"min-bytes", 1, NULL, 'b'}, {"max-bytes", 1, NULL, 'e'}, {"factor", 1, NULL, 'f'},
      {"iters", 1, NULL, 'n'},     {"warmup", 1, NULL, 'w'},    {"window", 1, NULL, 'W'},
      {"mode", 1, NULL, 'm'},      {"format", 1, NULL, 'F'},    {"label", 1, NULL, 'l'},
      {"help", 0, NULL, 'h'},      {NULL, 0, NULL, 0}};
  o->min_bytes = 8;
  o->max_bytes = 256ull << 20;
  o->factor = 2;
  o->iters = -1;
  o->warmup = -1;
  o->window = 16;
  o->mode = kModeBw | kModeLat;
  o->format = "table";
  o->label = NULL;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:n:w:W:l:h", kLong, NULL)) != -1) {
    long v;
    switch (c) {
      case 'b':
        if (ParseSize(optarg, &o->min_bytes) != 0 || o->min_bytes == 0) {
          return BadFlag("-b/--min-bytes", optarg, "a size >= 1 such as 8, 64K, 1M");
        }
        break;
      case 'e':
        if (ParseSize(optarg, &o->max_bytes) != 0 || o->max_bytes == 0 || o->max_bytes > (1ull << 32)) {
          return BadFlag("-e/--max-bytes", optarg, "a size from 1 to 4G such as 256M");
        }
        break;
      case 'f':
        if (ParseLong(optarg, 2, &v) != 0) return BadFlag("-f/--factor", optarg, "an integer >= 2");
        o->factor = (uint64_t)v;
        break;
      case 'n':
        if (ParseLong(optarg, 1, &o->iters) != 0) return BadFlag("-n/--iters", optarg, "an integer >= 1");
        break;
      case 'w':
        if (ParseLong(optarg, 0, &o->warmup) != 0) return BadFlag("-w/--warmup", optarg, "an integer >= 0");
        break;
      case 'W':
        if (ParseLong(optarg, 1, &o->window) != 0 || o->window > 4096) {
          return BadFlag("-W/--window", optarg, "an integer from 1 to 4096");
        }
        break;
      case 'm':
        if (strcmp(optarg, "bw") == 0) o->mode = kModeBw;
        else if (strcmp(optarg, "lat") == 0) o->mode = kModeLat;
        else if (strcmp(optarg, "both") == 0) o->mode = kModeBw | kModeLat;
        else return BadFlag("--mode", optarg, "bw, lat or both");
        break;
      case 'F':
        if (strcmp(optarg, "table") != 0 && strcmp(optarg, "csv") != 0 && strcmp(optarg, "json") != 0) {
          return BadFlag("--format", optarg, "table, csv or json");
        }
        o->format = optarg;
        break;
      case 'l': o->label = optarg; break;
      case 'h':
        if (g_rank == 0) Usage(stdout);
        return 1;
      case ':':
        if (g_rank == 0) fprintf(stderr, "mpi_p2p: %s needs a value\n", argv[optind - 1]);
        return -1;
      default:
        if (g_rank == 0) {
          fprintf(stderr, "mpi_p2p: unknown flag '%s' (see --help)\n", argv[optind - 1]);
        }
        return -1;
    }
  }
  if (optind < argc) {
    if (g_rank == 0) fprintf(stderr, "mpi_p2p: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (o->min_bytes > o->max_bytes) {
    if (g_rank == 0) fprintf(stderr, "mpi_p2p: -b (%llu) is larger than -e (%llu)\n",
                             (unsigned long long)o->min_bytes, (unsigned long long)o->max_bytes);
    return -1;
  }
  return 0;
}

// Timed iterations for one size when -n is not given: enough bytes for a
// stable figure, few enough that the default sweep stays short on a 2-core
// machine. The same rule as transport_perf's IterationsFor.
static long IterationsFor(int mode, uint64_t bytes) {
  const uint64_t budget = mode == kModeBw ? (1ull << 30) : (256ull << 20);
  const long max_iters = mode == kModeBw ? 20000 : 10000;
  uint64_t n = budget / bytes;
  if (n > (uint64_t)max_iters) n = (uint64_t)max_iters;
  if (n < 5) n = 5;
  return (long)n;
}

static long WarmupFor(const Options* o, long iters) {
  if (o->warmup >= 0) return o->warmup;
  long w = iters / 10;
  if (w < 2) w = 2;
  if (w > 1000) w = 1000;
  return w;
}

// The data pattern: 64-bit words of a SplitMix64 sequence keyed by the size
// and the direction, so a stale buffer from another size never passes.
static uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static uint64_t Seed(uint64_t bytes, int direction) { return bytes * 4 + (uint64_t)direction; }

// Writes the pattern (invert = 0) or its bitwise complement, which differs
// from it in every byte (the poison).
static void Fill(unsigned char* p, uint64_t n, uint64_t seed, int invert) {
  const uint64_t key = Mix(seed);
  const uint64_t flip = invert ? ~0ull : 0;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = Mix(key + i) ^ flip;
    memcpy(p + i, &w, 8);
  }
  if (i < n) {
    const uint64_t w = Mix(key + i) ^ flip;
    memcpy(p + i, &w, n - i);
  }
}

static uint64_t CountWrong(const unsigned char* p, uint64_t n, uint64_t seed) {
  const uint64_t key = Mix(seed);
  uint64_t wrong = 0, i = 0;
  for (; i < n; i += 8) {
    const uint64_t want = Mix(key + i);
    const uint64_t len = n - i < 8 ? n - i : 8;
    uint64_t have = 0;
    memcpy(&have, p + i, len);
    uint64_t diff = (have ^ want) & (len == 8 ? ~0ull : ((1ull << (8 * len)) - 1));
    for (; diff != 0; diff >>= 8) wrong += (diff & 0xff) != 0;
  }
  return wrong;
}

static unsigned char* MapBuffer(uint64_t bytes) {
  const size_t len = (size_t)((bytes + 4095) / 4096 * 4096);
  void* p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  madvise(p, len, MADV_HUGEPAGE);
  memset(p, 0, len);
  return (unsigned char*)p;
}

static double Now(void) { return MPI_Wtime(); }

// memcpy GB/s of `bytes` from src to dst, best of three batches.
static double MemcpyGbs(unsigned char* dst, const unsigned char* src, uint64_t bytes) {
  uint64_t reps = (256ull << 20) / bytes;
  if (reps < 3) reps = 3;
  if (reps > 100000) reps = 100000;
  double best = 1e30;
  for (int k = 0; k < 3; ++k) {
    const double t0 = Now();
    for (uint64_t r = 0; r < reps; ++r) {
      memcpy(dst, src, bytes);
      __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
    const double t = Now() - t0;
    if (t < best) best = t;
  }
  return (double)bytes * (double)reps / best / 1e9;
}

static int CompareDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  int is_bw;
  uint64_t bytes;
  long iters;
  double peak, avg, rate, memcpy_gbs;  // bw
  double tmin, tmax, typical, tavg, t99, t999;  // lat, microseconds one way
  unsigned long long wrong;
} Row;

static void PrintRow(const Options* o, const char* label, const Row* r, int* printed_rows) {
  const int first = *printed_rows == 0;
  ++*printed_rows;
  if (strcmp(o->format, "csv") == 0) {
    if (r->is_bw) {
      printf("%s,bw,%llu,%ld,%.4f,%.4f,%.4f,%.4f,%.4f,,,,,,,%llu\n", label,
             (unsigned long long)r->bytes, r->iters, r->peak, r->avg, r->rate, r->memcpy_gbs,
             r->memcpy_gbs > 0 ? r->avg / r->memcpy_gbs : 0.0, r->wrong);
    } else {
      printf("%s,lat,%llu,%ld,,,,,,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%llu\n", label,
             (unsigned long long)r->bytes, r->iters, r->tmin, r->tmax, r->typical, r->tavg, r->t99,
             r->t999, r->wrong);
    }
  } else if (strcmp(o->format, "json") == 0) {
    if (r->is_bw) {
      printf("%s\n  {\"transport\":\"%s\",\"test\":\"bw\",\"bytes\":%llu,\"iters\":%ld,"
             "\"bw_peak_gbs\":%.4f,\"bw_avg_gbs\":%.4f,\"msg_rate_mpps\":%.4f,"
             "\"memcpy_gbs\":%.4f,\"wrong\":%llu}",
             first ? "" : ",", label, (unsigned long long)r->bytes, r->iters, r->peak, r->avg,
             r->rate, r->memcpy_gbs, r->wrong);
    } else {
      printf("%s\n  {\"transport\":\"%s\",\"test\":\"lat\",\"bytes\":%llu,\"iters\":%ld,"
             "\"t_min_us\":%.3f,\"t_max_us\":%.3f,\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,"
             "\"t99_us\":%.3f,\"t999_us\":%.3f,\"wrong\":%llu}",
             first ? "" : ",", label, (unsigned long long)r->bytes, r->iters, r->tmin, r->tmax,
             r->typical, r->tavg, r->t99, r->t999, r->wrong);
    }
  } else if (r->is_bw) {
    printf("%-14s %12llu %8ld %14.4f %13.4f %14.4f %13.2f %11.3f %7llu\n", label,
           (unsigned long long)r->bytes, r->iters, r->peak, r->avg, r->rate, r->memcpy_gbs,
           r->memcpy_gbs > 0 ? r->avg / r->memcpy_gbs : 0.0, r->wrong);
  } else {
    printf("%-14s %12llu %8ld %10.3f %10.3f %14.3f %10.3f %10.3f %10.3f %7llu\n", label,
           (unsigned long long)r->bytes, r->iters, r->tmin, r->tmax, r->typical, r->tavg, r->t99,
           r->t999, r->wrong);
  }
  fflush(stdout);
}

static void PrintTableHeading(const Options* o, int is_bw) {
  if (strcmp(o->format, "table") != 0) return;
  if (is_bw) {
    printf("# bandwidth: window of %ld MPI_Isend/MPI_Irecv, acknowledged per window (osu_bw); "
           "GB/s = 1e9 B/s\n",
           o->window);
    printf("%-14s %12s %8s %14s %13s %14s %13s %11s %7s\n", "#transport", "#bytes", "#iters",
           "BW_peak[GB/s]", "BW_avg[GB/s]", "MsgRate[Mpps]", "memcpy[GB/s]", "avg/memcpy",
           "#wrong");
  } else {
    printf("# latency: MPI_Send/MPI_Recv ping-pong (osu_latency), one way = round trip / 2\n");
    printf("%-14s %12s %8s %10s %10s %14s %10s %10s %10s %7s\n", "#transport", "#bytes", "#iters",
           "t_min[us]", "t_max[us]", "t_typical[us]", "t_avg[us]", "t99[us]", "t99.9[us]",
           "#wrong");
  }
}

// One bandwidth row. Rank 1 returns with row->wrong only meaningful on rank 0.
static void RunBw(const Options* o, uint64_t bytes, unsigned char* sbuf, unsigned char* rbuf,
                  unsigned char* mbuf, MPI_Request* reqs, MPI_Status* stats, Row* row) {
  const long iters = o->iters > 0 ? o->iters : IterationsFor(kModeBw, bytes);
  const long warm = WarmupFor(o, iters);
  const int count = (int)bytes;  // main() caps -e below 2^31
  memset(row, 0, sizeof(*row));
  row->is_bw = 1;
  row->bytes = bytes;
  row->iters = iters;
  if (g_rank == 0) {
    Fill(sbuf, bytes, Seed(bytes, 0), 0);
    row->memcpy_gbs = MemcpyGbs(mbuf, sbuf, bytes);
  } else {
    Fill(rbuf, bytes, Seed(bytes, 0), 1);
  }
  MPI_Barrier(g_comm);
  double t_start = 0, best = 0;
  int ack = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const long total = phase == 0 ? warm : iters;
    if (phase == 1 && g_rank == 0) t_start = Now();
    for (long done = 0; done < total;) {
      const int k = (int)(total - done < o->window ? total - done : o->window);
      const double t0 = Now();
      for (int j = 0; j < k; ++j) {
        if (g_rank == 0) {
          MPI_Isend(sbuf, count, MPI_BYTE, 1, kTagData, g_comm, &reqs[j]);
        } else {
          MPI_Irecv(rbuf, count, MPI_BYTE, 0, kTagData, g_comm, &reqs[j]);
        }
      }
      // Real statuses, not MPI_STATUSES_IGNORE: g++ 12 warns on MPICH's
      // (MPI_Status*)1 sentinel (-Wstringop-overflow).
      MPI_Waitall(k, reqs, stats);
      if (g_rank == 0) {
        MPI_Recv(&ack, 1, MPI_INT, 1, kTagAck, g_comm, MPI_STATUS_IGNORE);
        const double gbs = (double)bytes * k / (Now() - t0) / 1e9;
        if (phase == 1 && gbs > best) best = gbs;
      } else {
        MPI_Send(&ack, 1, MPI_INT, 0, kTagAck, g_comm);
      }
      done += k;
    }
  }
  unsigned long long wrong = 0;
  if (g_rank == 1) {
    wrong = CountWrong(rbuf, bytes, Seed(bytes, 0));
    MPI_Send(&wrong, 1, MPI_UNSIGNED_LONG_LONG, 0, kTagWrong, g_comm);
  } else {
    const double t = Now() - t_start;
    MPI_Recv(&wrong, 1, MPI_UNSIGNED_LONG_LONG, 1, kTagWrong, g_comm, MPI_STATUS_IGNORE);
    row->avg = (double)bytes * iters / t / 1e9;
    row->peak = best;
    row->rate = iters / t / 1e6;
    row->wrong = wrong;
  }
}

static void RunLat(const Options* o, uint64_t bytes, unsigned char* sbuf, unsigned char* rbuf,
                   double* rtt, Row* row) {
  const long iters = o->iters > 0 ? o->iters : IterationsFor(kModeLat, bytes);
  const long warm = WarmupFor(o, iters);
  const int count = (int)bytes;
  memset(row, 0, sizeof(*row));
  row->bytes = bytes;
  row->iters = iters;
  // Ping carries direction 1, pong direction 2; each receiver poisons first.
  Fill(sbuf, bytes, Seed(bytes, g_rank == 0 ? 1 : 2), 0);
  Fill(rbuf, bytes, Seed(bytes, g_rank == 0 ? 2 : 1), 1);
  MPI_Barrier(g_comm);
  for (long i = 0; i < warm + iters; ++i) {
    if (g_rank == 0) {
      const double t0 = Now();
      MPI_Send(sbuf, count, MPI_BYTE, 1, kTagData, g_comm);
      MPI_Recv(rbuf, count, MPI_BYTE, 1, kTagData, g_comm, MPI_STATUS_IGNORE);
      if (i >= warm) rtt[i - warm] = (Now() - t0) * 1e6 / 2;
    } else {
      MPI_Recv(rbuf, count, MPI_BYTE, 0, kTagData, g_comm, MPI_STATUS_IGNORE);
      MPI_Send(sbuf, count, MPI_BYTE, 0, kTagData, g_comm);
    }
  }
  unsigned long long wrong = CountWrong(rbuf, bytes, Seed(bytes, g_rank == 0 ? 2 : 1));
  if (g_rank == 1) {
    MPI_Send(&wrong, 1, MPI_UNSIGNED_LONG_LONG, 0, kTagWrong, g_comm);
    return;
  }
  unsigned long long theirs = 0;
  MPI_Recv(&theirs, 1, MPI_UNSIGNED_LONG_LONG, 1, kTagWrong, g_comm, MPI_STATUS_IGNORE);
  row->wrong = wrong + theirs;
  qsort(rtt, (size_t)iters, sizeof(double), CompareDouble);
  double sum = 0;
  for (long i = 0; i < iters; ++i) sum += rtt[i];
  row->tmin = rtt[0];
  row->tmax = rtt[iters - 1];
  row->typical = rtt[iters / 2];
  row->tavg = sum / iters;
  long i99 = (long)((iters * 99 + 99) / 100) - 1, i999 = (long)((iters * 999 + 999) / 1000) - 1;
  row->t99 = rtt[i99 < 0 ? 0 : i99];
  row->t999 = rtt[i999 < 0 ? 0 : i999];
}

static void CpuModel(char* out, size_t len) {
  snprintf(out, len, "unknown");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f == NULL) return;
  char line[512];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "model name", 10) == 0) {
      const char* v = strchr(line, ':');
      if (v != NULL) {
        snprintf(out, len, "%s", v + 2);
        out[strcspn(out, "\n")] = '\0';
      }
      break;
    }
  }
  fclose(f);
}

// Characters that would break a JSON string become spaces.
static void JsonSafe(char* s) {
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) *s = ' ';
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options o;
  const int parsed = ParseOptions(argc, argv, &o);
  if (parsed != 0) {
    MPI_Finalize();
    return parsed > 0 ? 0 : 2;
  }
  if (size < 2) {
    if (g_rank == 0) fprintf(stderr, "mpi_p2p: needs 2 ranks (mpirun -np 2), got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  if (o.max_bytes > 0x7fffffffull) {
    if (g_rank == 0) fprintf(stderr, "mpi_p2p: -e: at most 2G-1 bytes (an MPI int count)\n");
    MPI_Finalize();
    return 2;
  }
  // Ranks beyond the pair take no part: they only finalise.
  MPI_Comm_split(MPI_COMM_WORLD, g_rank < 2 ? 0 : MPI_UNDEFINED, g_rank, &g_comm);
  if (g_rank >= 2) {
    MPI_Finalize();
    return 0;
  }

  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int liblen = 0;
  MPI_Get_library_version(lib, &liblen);
  lib[strcspn(lib, "\n,")] = '\0';
  JsonSafe(lib);
  char label[64];
  if (o.label != NULL) {
    snprintf(label, sizeof(label), "%s", o.label);
  } else {
    snprintf(label, sizeof(label), "%s", strstr(lib, "MPICH") != NULL ? "mpich" : "openmpi");
  }
  JsonSafe(label);

  unsigned char* sbuf = MapBuffer(o.max_bytes);
  unsigned char* rbuf = MapBuffer(o.max_bytes);
  unsigned char* mbuf = g_rank == 0 ? MapBuffer(o.max_bytes) : NULL;
  MPI_Request* reqs = calloc((size_t)o.window, sizeof(MPI_Request));
  MPI_Status* stats = calloc((size_t)o.window, sizeof(MPI_Status));
  long max_iters = o.iters > 0 ? o.iters : IterationsFor(kModeLat, 1);
  double* rtt = calloc((size_t)max_iters, sizeof(double));
  if (sbuf == NULL || rbuf == NULL || (g_rank == 0 && mbuf == NULL) || reqs == NULL || stats == NULL || rtt == NULL) {
    fprintf(stderr, "mpi_p2p rank %d: cannot allocate buffers of %llu bytes\n", g_rank,
            (unsigned long long)o.max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  if (g_rank == 0) {
    char host[256] = "?", cpu[256], date[64], cmd[2048] = "";
    gethostname(host, sizeof(host) - 1);
    CpuModel(cpu, sizeof(cpu));
    const time_t now = time(NULL);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    for (int i = 0; i < argc; ++i) {
      strncat(cmd, argv[i], sizeof(cmd) - strlen(cmd) - 2);
      if (i + 1 < argc) strncat(cmd, " ", sizeof(cmd) - strlen(cmd) - 1);
    }
    JsonSafe(host);
    JsonSafe(cpu);
    JsonSafe(cmd);
    if (strcmp(o.format, "json") == 0) {
      printf("{\"benchmark\":\"mpi_p2p\",\"transport\":\"%s\",\"library\":\"%s\",\"host\":\"%s\","
             "\"cpu\":\"%s\",\"date\":\"%s\",\"command\":\"%s\",\"ranks\":%d,\"window\":%ld,"
             "\"rows\":[",
             label, lib, host, cpu, date, cmd, size, o.window);
    } else {
      printf("# mpi_p2p (%s): %s\n", label, lib);
      printf("# host: %s; cpu: %s; ranks 0 and 1 of %d\n", host, cpu, size);
      printf("# date: %s\n", date);
      printf("# command: %s\n", cmd);
      if (strcmp(o.format, "csv") == 0) {
        printf("transport,test,bytes,iters,bw_peak_gbs,bw_avg_gbs,msg_rate_mpps,memcpy_gbs,"
               "bw_over_memcpy,t_min_us,t_max_us,t_typical_us,t_avg_us,t99_us,t999_us,wrong\n");
      }
    }
    fflush(stdout);
  }

  unsigned long long total_wrong = 0;
  int printed = 0;
  for (int m = kModeBw; m <= kModeLat; m <<= 1) {
    if ((o.mode & m) == 0) continue;
    if (g_rank == 0) PrintTableHeading(&o, m == kModeBw);
    for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      Row row;
      if (m == kModeBw) {
        RunBw(&o, bytes, sbuf, rbuf, mbuf, reqs, stats, &row);
      } else {
        RunLat(&o, bytes, sbuf, rbuf, rtt, &row);
      }
      if (g_rank == 0) {
        total_wrong += row.wrong;
        PrintRow(&o, label, &row, &printed);
      }
      if (bytes > o.max_bytes / o.factor) break;  // the next would overflow or pass -e
    }
  }
  if (g_rank == 0) {
    if (strcmp(o.format, "json") == 0) {
      printf("\n],\"wrong\":%llu}\n", total_wrong);
    } else {
      printf("# %d rows, %llu wrong bytes in total\n", printed, total_wrong);
    }
    fflush(stdout);
  }
  // Rank 1 learns the verdict so both exit alike.
  MPI_Bcast(&total_wrong, 1, MPI_UNSIGNED_LONG_LONG, 0, g_comm);
  MPI_Comm_free(&g_comm);
  free(rtt);
  free(stats);
  free(reqs);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
