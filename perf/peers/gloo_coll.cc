// gloo_coll: Gloo's collectives over its tcp transport on loopback, measured
// the way allreduce_perf (perf/coll_perf.cc) measures ciuic's: the same flags,
// size loop, iteration rule, check and columns, so perf/compare can put them
// side by side. Forks its N ranks itself (-N, default 2); they meet through
// Gloo's FileStore in a fresh temporary directory.
//
//   gloo_coll [-N ranks] [--coll allreduce|broadcast|allgather]
//             [-a ring|halving_doubling|ring_chunked|bcube] [allreduce_perf's flags]
//             [--cap-s S]
//
// Algorithms are Gloo's own classes: all-reduce AllreduceRing,
// AllreduceHalvingDoubling, AllreduceRingChunked or AllreduceBcube (all in
// place on one buffer); broadcast BroadcastOneToAll; all-gather AllgatherRing.
// Out of place therefore means what a user of these classes does: copy the
// input into the output, then reduce there; the copy is inside the timing
// (allreduce_perf's broadcast times its root copy the same way).
//
// Time cap: Gloo's sockets collapse when 4 ranks share 2 cores, so every size
// stops after about --cap-s seconds (default 2): the warm-up time per
// iteration, agreed over the ranks, cuts the timed iterations to fit. Capped
// sizes are listed at the end (and carry their real iteration count in json).
//
// Columns (nccl-tests doc/PERFORMANCE.md): size count type redop root |
// out-of-place time algbw busbw #wrong | in-place time algbw busbw #wrong;
// time = the slowest rank's mean per iteration. Exit status: 0 when every
// element was right, 1 on a wrong element or a failed rank, 2 on bad flags.
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "gloo/algorithm.h"
#include "gloo/allgather_ring.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/broadcast_one_to_all.h"
#include "gloo/config.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int nranks = 2;
  std::string coll = "allreduce";
  std::string algo;  // default per collective
  size_t min_bytes = 8, max_bytes = 64u << 20;
  double factor = 2;
  size_t step_bytes = 0;
  long iters = 0;  // 0 = by size, as allreduce_perf
  long warmup = 3;
  int check = 1;
  std::string redop = "sum";
  std::string dtype = "float";
  int root = 0;
  bool inplace = true;
  std::string format = "table";
  double cap_s = 2.0;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "gloo_coll: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: gloo_coll [-N ranks] [--coll allreduce|broadcast|allgather] [-a algo]\n"
               "          [-b minbytes] [-e maxbytes] [-f factor | -i step] [-n iters] [-w warmup]\n"
               "          [-c 0|1] [-o sum|prod|min|max] [-d float|double|int32|int64] [-r root]\n"
               "          [--no-inplace] [--format table|csv|json] [--cap-s seconds]\n"
               "  -N  ranks to fork (default 2); Gloo tcp on 127.0.0.1, FileStore rendezvous\n"
               "  -a  allreduce: ring (default), halving_doubling, ring_chunked, bcube;\n"
               "      broadcast: one_to_all; allgather: ring\n"
               "  --cap-s  stop each size after about this many seconds (default 2)\n"
               "  sizes take K/M/G suffixes; -n 0 = scaled by size (as allreduce_perf)\n");
  std::exit(error.empty() ? 0 : 2);
}

size_t Bytes(const std::string& flag, const char* v) {
  char* end = nullptr;
  if (*v < '0' || *v > '9') Usage(flag + " '" + v + "': expected a size such as 8, 64K, 1M");
  unsigned long long x = std::strtoull(v, &end, 10);
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1ull << 10, ++end;
  else if (*end == 'M' || *end == 'm') mult = 1ull << 20, ++end;
  else if (*end == 'G' || *end == 'g') mult = 1ull << 30, ++end;
  if (*end == 'B') ++end;
  if (*end != '\0' || x > (1ull << 34)) Usage(flag + " '" + v + "': expected a size such as 8, 64K, 1M");
  return static_cast<size_t>(x * mult);
}

long Long(const std::string& flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
    Usage(flag + " '" + v + "': expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") Usage("");
    else if (a == "-N") o.nranks = static_cast<int>(Long(a, next(), 1, 64));
    else if (a == "--coll") o.coll = next();
    else if (a == "-a" || a == "--algo") o.algo = next();
    else if (a == "-b") o.min_bytes = Bytes(a, next());
    else if (a == "-e") o.max_bytes = Bytes(a, next());
    else if (a == "-f") {
      const char* v = next();
      char* end = nullptr;
      o.factor = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o.factor > 1.0)) Usage(std::string("-f '") + v + "': expected a factor > 1");
    } else if (a == "-i") o.step_bytes = Bytes(a, next());
    else if (a == "-n") o.iters = Long(a, next(), 0, 1000000);
    else if (a == "-w") o.warmup = Long(a, next(), 0, 100000);
    else if (a == "-c") o.check = static_cast<int>(Long(a, next(), 0, 1));
    else if (a == "-o") o.redop = next();
    else if (a == "-d") o.dtype = next();
    else if (a == "-r") o.root = static_cast<int>(Long(a, next(), 0, 1 << 20));
    else if (a == "--no-inplace") o.inplace = false;
    else if (a == "--format") o.format = next();
    else if (a == "--cap-s") {
      const char* v = next();
      char* end = nullptr;
      o.cap_s = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o.cap_s > 0)) Usage(std::string("--cap-s '") + v + "': expected seconds > 0");
    } else Usage("unknown flag '" + a + "' (see --help)");
  }
  if (o.format != "table" && o.format != "csv" && o.format != "json") Usage("--format: table, csv or json");
  if (o.min_bytes > o.max_bytes) Usage("-b is larger than -e");
  if (o.coll != "allreduce" && o.coll != "broadcast" && o.coll != "allgather") {
    Usage("--coll '" + o.coll + "': expected allreduce, broadcast or allgather");
  }
  if (o.algo.empty()) o.algo = o.coll == "allreduce" ? "ring" : o.coll == "broadcast" ? "one_to_all" : "ring";
  const bool algo_ok = o.coll == "allreduce"
                           ? (o.algo == "ring" || o.algo == "halving_doubling" || o.algo == "ring_chunked" ||
                              o.algo == "bcube")
                           : o.coll == "broadcast" ? o.algo == "one_to_all" : o.algo == "ring";
  if (!algo_ok) Usage("-a '" + o.algo + "': not a Gloo algorithm for " + o.coll + " (see --help)");
  if (o.redop != "sum" && o.redop != "prod" && o.redop != "min" && o.redop != "max") {
    Usage("-o '" + o.redop + "': expected sum, prod, min or max");
  }
  if (o.dtype != "float" && o.dtype != "double" && o.dtype != "int32" && o.dtype != "int64") {
    Usage("-d '" + o.dtype + "': expected float, double, int32 or int64");
  }
  if (o.root >= o.nranks) Usage("-r: root outside the ranks");
  return o;
}

// Values the check expects: small integers, exact in every type and order.
double Value(int rank, size_t i) { return static_cast<double>((rank * 3 + (i % 7) * 5) % 7 + 1); }

double Expected(const std::string& op, int n, size_t i) {
  double acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Value(r, i);
    if (op == "sum") acc += v;
    else if (op == "prod") acc *= v;
    else if (op == "min") acc = std::min(acc, v);
    else acc = std::max(acc, v);
  }
  return acc;
}

struct Case {
  size_t count = 0, send_elems = 0, recv_elems = 0, size_bytes = 0;
  double bus_factor = 1;
};

Case MakeCase(const std::string& coll, size_t bytes, size_t es, int n) {
  Case c;
  if (coll == "allreduce" || coll == "broadcast") {
    c.count = bytes / es;
    c.send_elems = c.recv_elems = c.count;
    c.bus_factor = coll == "broadcast" ? 1.0 : n > 1 ? 2.0 * (n - 1) / n : 0;
    c.size_bytes = c.count * es;
  } else {  // allgather
    c.count = bytes / es / n;
    c.send_elems = c.count;
    c.recv_elems = c.count * n;
    c.bus_factor = static_cast<double>(n - 1) / n;
    c.size_bytes = c.count * n * es;
  }
  return c;
}

struct Row {
  size_t size = 0, count = 0;
  long iters[2] = {0, 0};
  double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0}, wrong[2] = {-1, -1};
  bool capped = false;
};

// Integer sum and product that wrap: the timed loop reduces the same buffer
// again and again (as allreduce_perf's does), so integers overflow, and
// Gloo's plain loops (compiled here, from its header) would make that signed
// overflow undefined. Same loop otherwise; floats keep Gloo's own.
template <typename T>
void WrappingSum(T* x, const T* y, size_t n) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<U>(x[i]) + static_cast<U>(y[i]));
}
template <typename T>
void WrappingProduct(T* x, const T* y, size_t n) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<U>(x[i]) * static_cast<U>(y[i]));
}

template <typename T>
const gloo::ReductionFunction<T>* Fn(const std::string& op) {
  if constexpr (std::is_integral_v<T>) {
    static const gloo::ReductionFunction<T> sum(gloo::SUM, &WrappingSum<T>);
    static const gloo::ReductionFunction<T> product(gloo::PRODUCT, &WrappingProduct<T>);
    if (op == "sum") return &sum;
    if (op == "prod") return &product;
  }
  if (op == "prod") return gloo::ReductionFunction<T>::product;
  if (op == "min") return gloo::ReductionFunction<T>::min;
  if (op == "max") return gloo::ReductionFunction<T>::max;
  return gloo::ReductionFunction<T>::sum;
}

// One rank's whole run; returns its exit code. Gloo reports failures by
// throwing; the caller turns an exception into exit code 1.
template <typename T>
int RunRank(const Options& o, const std::shared_ptr<gloo::Context>& ctx) {
  const int rank = ctx->rank, n = ctx->size;
  const size_t es = sizeof(T);
  const Case big = MakeCase(o.coll, o.max_bytes, es, n);
  const size_t cap_elems = std::max(big.send_elems, big.recv_elems) + 16;
  // Touched once up front, as allreduce_perf's buffers are.
  std::vector<T> send(cap_elems, T(1)), recv(cap_elems, T(2));
  // Agreement between ranks outside the timings: max and sum of doubles.
  double stat = 0;
  gloo::AllreduceRing<double> agree_max(ctx, {&stat}, 1, gloo::ReductionFunction<double>::max);
  gloo::AllreduceRing<double> agree_sum(ctx, {&stat}, 1, gloo::ReductionFunction<double>::sum);
  auto max_of = [&](double v) {
    stat = v;
    agree_max.run();
    return stat;
  };
  auto sum_of = [&](double v) {
    stat = v;
    agree_sum.run();
    return stat;
  };
  gloo::BarrierAllToAll barrier(ctx);
  const bool json = o.format == "json", csv = o.format == "csv";
  if (rank == 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    std::printf("# gloo_coll %s  algo %s  gloo %d.%d.%d  %s\n", o.coll.c_str(), o.algo.c_str(), GLOO_VERSION_MAJOR,
                GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, date);
    std::printf("# host %s  ranks %d  transport gloo-tcp(127.0.0.1)  dtype %s  redop %s  root %d  check %d\n", host, n,
                o.dtype.c_str(), o.redop.c_str(), o.root, o.check);
    std::printf("# time cap: each size stops after about %.1f s (fewer timed iterations; capped sizes listed at the "
                "end); out of place = copy into the output, then Gloo's in-place algorithm\n",
                o.cap_s);
    if (csv) {
      std::printf("size,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,"
                  "ip_wrong,algo\n");
    } else if (!json) {
      std::printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "size", "count", "type", "redop",
                  "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      std::printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  double total_wrong = 0;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    const Case c = MakeCase(o.coll, bytes, es, n);
    Row row;
    row.size = c.size_bytes;
    row.count = c.count;
    const long iters =
        o.iters > 0 ? o.iters
                    : static_cast<long>(std::clamp<double>(2e8 / std::max<size_t>(bytes, 1) / std::max(1, n / 2), 5, 1000));
    for (int pass = 0; pass < (o.inplace ? 2 : 1); ++pass) {
      const bool inplace = pass == 1;
      T* out = inplace ? send.data() : recv.data();
      const T* in = inplace && o.coll == "allgather" ? send.data() + rank * c.count : send.data();
      // Gloo's algorithm objects bind their buffers when built: one per
      // size and pass (their own scratch is allocated here too).
      std::unique_ptr<gloo::Algorithm> alg;
      const int count = static_cast<int>(c.count);
      if (c.count == 0) {
        // Nothing moves; Gloo's classes do not take empty buffers.
      } else if (o.coll == "allreduce") {
        std::vector<T*> ptrs{out};
        if (o.algo == "ring") alg.reset(new gloo::AllreduceRing<T>(ctx, ptrs, count, Fn<T>(o.redop)));
        else if (o.algo == "halving_doubling")
          alg.reset(new gloo::AllreduceHalvingDoubling<T>(ctx, ptrs, count, Fn<T>(o.redop)));
        else if (o.algo == "ring_chunked")
          alg.reset(new gloo::AllreduceRingChunked<T>(ctx, ptrs, count, Fn<T>(o.redop)));
        else alg.reset(new gloo::AllreduceBcube<T>(ctx, ptrs, count, Fn<T>(o.redop)));
      } else if (o.coll == "broadcast") {
        alg.reset(new gloo::BroadcastOneToAll<T>(ctx, std::vector<T*>{out}, c.count, o.root));
      } else {
        alg.reset(new gloo::AllgatherRing<T>(ctx, std::vector<const T*>{in}, out, count));
      }
      // One call: out of place copies the input into the output first
      // (all-reduce: every rank; broadcast: the root).
      auto run_once = [&]() {
        if (!inplace && o.coll == "allreduce") std::memcpy(out, in, c.count * es);
        if (!inplace && o.coll == "broadcast" && rank == o.root) std::memcpy(out, in, c.count * es);
        if (alg) alg->run();
      };
      // Warm-up: at least one call, which also sizes the timed loop to the cap.
      auto w0 = Clock::now();
      run_once();
      double per_iter = max_of(std::chrono::duration<double>(Clock::now() - w0).count());
      const long warm_left = std::min<long>(o.warmup - 1, static_cast<long>(o.cap_s / 4 / std::max(per_iter, 1e-9)));
      if (warm_left > 0) {
        w0 = Clock::now();
        for (long w = 0; w < warm_left; ++w) run_once();
        per_iter = max_of(std::chrono::duration<double>(Clock::now() - w0).count() / warm_left);
      }
      // Timed in chunks that double in length; between chunks the ranks
      // agree (outside the timing) whether the cap is reached, so that all
      // of them stop after the same iteration.
      const long fit = std::max<long>(1, static_cast<long>(o.cap_s / std::max(per_iter, 1e-9)));
      long chunk = std::clamp<long>(fit / 4, 1, iters), done = 0;
      double elapsed_us = 0;
      barrier.run();
      while (done < iters) {
        chunk = std::min(chunk, iters - done);
        const auto t0 = Clock::now();
        for (long it = 0; it < chunk; ++it) run_once();
        elapsed_us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        done += chunk;
        chunk *= 2;
        if (done < iters && max_of(elapsed_us) >= o.cap_s * 1e6) {
          row.capped = true;
          break;
        }
      }
      const double us = elapsed_us / static_cast<double>(done);  // done >= 1
      double wrong = 0;
      if (o.check) {
        for (size_t i = 0; i < c.send_elems; ++i) send[i] = static_cast<T>(Value(rank, i));
        if (inplace && o.coll == "allgather") {
          for (size_t i = 0; i < c.count; ++i) send[rank * c.count + i] = static_cast<T>(Value(rank, i));
        }
        barrier.run();
        run_once();
        auto expect = [&](size_t i, double v) { wrong += static_cast<double>(out[i]) != v; };
        if (o.coll == "allreduce") {
          for (size_t i = 0; i < c.count; ++i) expect(i, Expected(o.redop, n, i));
        } else if (o.coll == "broadcast") {
          for (size_t i = 0; i < c.count; ++i) expect(i, Value(o.root, i));
        } else {
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < c.count; ++i) expect(p * c.count + i, Value(p, i));
        }
      }
      row.iters[pass] = done;
      row.time_us[pass] = max_of(us);
      row.algbw[pass] = row.time_us[pass] > 0 ? c.size_bytes / row.time_us[pass] / 1e3 : 0;
      row.busbw[pass] = row.algbw[pass] * c.bus_factor;
      row.wrong[pass] = sum_of(wrong);
      total_wrong += row.wrong[pass];
    }
    if (rank == 0) {
      if (csv) {
        std::printf("%zu,%zu,%s,%s,%d,%.2f,%.3f,%.3f,%.0f,%.2f,%.3f,%.3f,%.0f,\"%s\"\n", row.size, row.count,
                    o.dtype.c_str(), o.redop.c_str(), o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0],
                    row.time_us[1], row.algbw[1], row.busbw[1], row.wrong[1], o.algo.c_str());
      } else if (!json) {
        std::printf("%12zu %12zu %8s %6s %5d   %9.2f %7.2f %7.2f %6.0f", row.size, row.count, o.dtype.c_str(),
                    o.redop.c_str(), o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0]);
        if (o.inplace) {
          std::printf("   %9.2f %7.2f %7.2f %6.0f", row.time_us[1], row.algbw[1], row.busbw[1], row.wrong[1]);
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
    rows.push_back(row);
    if (bytes == o.max_bytes) break;
    size_t next = o.step_bytes > 0 ? bytes + o.step_bytes : static_cast<size_t>(bytes * o.factor);
    bytes = std::max(next, bytes + 1);
  }
  if (rank == 0) {
    double peak = 0;
    size_t peak_size = 0;
    for (const Row& r : rows) {
      if (r.busbw[0] > peak) {
        peak = r.busbw[0];
        peak_size = r.size;
      }
    }
    if (json) {
      std::printf("{\"collective\":\"%s\",\"ranks\":%d,\"transport\":\"gloo-tcp\",\"library\":\"gloo %d.%d.%d\","
                  "\"label\":\"gloo-%s\",\"dtype\":\"%s\",\"redop\":\"%s\",\"cap_s\":%.3f,\"rows\":[",
                  o.coll.c_str(), n, GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, o.algo.c_str(),
                  o.dtype.c_str(), o.redop.c_str(), o.cap_s);
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::printf("%s{\"size\":%zu,\"count\":%zu,\"iters\":%ld,\"iters_inplace\":%ld,\"capped\":%s,"
                    "\"oop\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%.0f},"
                    "\"inplace\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%.0f},\"algo\":\"%s\"}",
                    i ? "," : "", r.size, r.count, r.iters[0], r.iters[1], r.capped ? "true" : "false", r.time_us[0],
                    r.algbw[0], r.busbw[0], r.wrong[0], r.time_us[1], r.algbw[1], r.busbw[1], r.wrong[1],
                    o.algo.c_str());
      }
      std::printf("],\"peak_busbw\":%.4f,\"wrong\":%.0f}\n", peak, total_wrong);
    } else {
      std::printf("# Out of bounds values : %.0f %s\n", total_wrong, total_wrong > 0 ? "FAILED" : "OK");
      std::printf("# Peak busbw : %.2f GB/s at %zu B   small-message latency : %.2f us at %zu B\n", peak, peak_size,
                  rows.empty() ? 0.0 : rows.front().time_us[0], rows.empty() ? 0 : rows.front().size);
      std::string capped;
      for (const Row& r : rows) {
        if (r.capped) {
          capped += " " + std::to_string(r.size) + " (" + std::to_string(r.iters[0]) +
                    (o.inplace ? "/" + std::to_string(r.iters[1]) : "") + " iters)";
        }
      }
      if (!capped.empty()) std::printf("# capped at %.1f s (out of place/in place):%s\n", o.cap_s, capped.c_str());
    }
    std::fflush(stdout);
  }
  return total_wrong > 0 ? 1 : 0;
}

int ChildMain(const Options& o, int rank, const std::string& dir) {
  // Die with the parent: a killed benchmark leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(dir);
    gloo::rendezvous::PrefixStore store("gloo_coll", file_store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.nranks);
    ctx->setTimeout(std::chrono::seconds(120));
    ctx->connectFullMesh(store, dev);
    int code = 1;
    if (o.dtype == "double") code = RunRank<double>(o, ctx);
    else if (o.dtype == "int32") code = RunRank<int32_t>(o, ctx);
    else if (o.dtype == "int64") code = RunRank<int64_t>(o, ctx);
    else code = RunRank<float>(o, ctx);
    // Everyone is done before anyone closes its sockets: a peer that leaves
    // early turns the others' last receive into "connection closed". The
    // last barrier can still see that race (its messages all arrived, but
    // a pair notices the peer's close first); the results are complete by
    // then, so it does not change the exit code. Then leave without tearing
    // the context down, for the same reason.
    try {
      gloo::BarrierAllToAll(ctx).run();
    } catch (const std::exception&) {
    }
    std::fflush(nullptr);
    _exit(code);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_coll rank %d: %s\n", rank, e.what());
    return 1;
  }
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  char dir[] = "/tmp/gloo_coll-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::perror("gloo_coll: mkdtemp");
    return 1;
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  int rc = 0;
  for (int r = 0; r < o.nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int code = ChildMain(o, r, dir);
      std::fflush(nullptr);
      _exit(code);
    }
    if (pid < 0) {
      std::perror("gloo_coll: fork");
      rc = 1;
      break;
    }
    pids.push_back(pid);
  }
  if (rc != 0) {
    for (pid_t q : pids) kill(q, SIGKILL);
  }
  for (size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t p = wait(&status);
    if (p < 0) break;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == 0) {
      rc = code;
      for (pid_t q : pids) kill(q, SIGKILL);  // one failed: the others would wait forever
    }
  }
  nftw(dir, RemoveEntry, 8, FTW_DEPTH | FTW_PHYS);
  return rc;
}
