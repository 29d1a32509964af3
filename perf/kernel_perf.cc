// kernel_perf: GB/s of ciuic's reduction kernels per dtype / op / number of
// inputs / working-set size, side by side in the same run with
//   hand   a plain hand-written AVX-512 loop (2 inputs; f32, and bf16 with
//          AVX512-BF16 rounding) - the bar; non-temporal stores where ours
//          uses them,
//   scalar a scalar loop compiled without vectorisation (what Gloo/UCC do),
//   memcpy of the same output bytes,
// and what the C ABI's ciuic_reduce_local costs per call above the C++
// Reducer (the C-ABI column, ns).
// GB/s counts bytes read + bytes written (1e9 B/s). Every ciuic result is
// checked against the scalar reference (#wrong). Timing: median of --reps
// runs, each long enough (--min-ms); the yardsticks run interleaved with ours.
#include <getopt.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/ciuic.h"
#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/topology.h"
#include "common/version.h"
#include "kernels/reference.h"
#include "perf/scalar_loops.h"

namespace ciuic::perf {
namespace {

using kernels::CacheSizes;
using kernels::Reducer;

struct Options {
  std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16};
  std::vector<ReduceOp> ops = {ReduceOp::kSum};
  std::vector<int> nsrcs = {2};
  std::vector<size_t> sizes = {8 << 10, 128 << 10, 4 << 20, 64 << 20};
  std::string format = "table";
  double min_ms = 40;
  int reps = 5;
};

void Usage() {
  std::printf(
      "usage: kernel_perf [options]\n"
      "  -t, --dtype LIST   f32,bf16,f16,e4m3,e5m2,f64,i8,u8,i16,u16,i32,u32,i64,u64,bool\n"
      "                     (default f32,bf16,f16)\n"
      "  -o, --op LIST      sum,prod,min,max,avg,band,bor,bxor,premul_sum (default sum)\n"
      "  -n, --nsrcs LIST   inputs per reduction, 1..16 (default 2)\n"
      "  -s, --sizes LIST   bytes per array, e.g. 8K,128K,4M,64M (the default)\n"
      "  -r, --reps N       timed repetitions, the median is reported (default 5)\n"
      "  -m, --min-ms MS    minimum duration of one repetition (default 40)\n"
      "  -F, --format F     table, csv or json (default table)\n"
      "  -h, --help\n"
      "The SIMD target is the best this CPU runs; CIUIC_SIMD_TARGET caps it.\n");
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

// A whole-string number (strtol/strtod with nothing left over), or false.
bool WholeInt(const std::string& v, long* out) {
  char* end = nullptr;
  *out = std::strtol(v.c_str(), &end, 10);
  return !v.empty() && *end == '\0';
}
bool WholeDouble(const std::string& v, double* out) {
  char* end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0';
}

bool ParseOptions(int argc, char** argv, Options* o) {
  static const option kLong[] = {{"dtype", 1, nullptr, 't'}, {"op", 1, nullptr, 'o'},
                                 {"nsrcs", 1, nullptr, 'n'}, {"sizes", 1, nullptr, 's'},
                                 {"reps", 1, nullptr, 'r'},  {"min-ms", 1, nullptr, 'm'},
                                 {"format", 1, nullptr, 'F'}, {"help", 0, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "t:o:n:s:r:m:F:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 't': {
        o->dtypes.clear();
        for (const std::string& name : Split(optarg)) {
          bool found = false;
          for (int d = 0; d < kNumDataTypes; ++d) {
            if (name == DataTypeName(static_cast<DataType>(d))) {
              o->dtypes.push_back(static_cast<DataType>(d));
              found = true;
            }
          }
          if (!found) {
            std::fprintf(stderr, "kernel_perf: --dtype: unknown type '%s'\n", name.c_str());
            return false;
          }
        }
        break;
      }
      case 'o': {
        o->ops.clear();
        for (const std::string& name : Split(optarg)) {
          bool found = false;
          for (int p = 0; p < kNumReduceOps; ++p) {
            if (name == ReduceOpName(static_cast<ReduceOp>(p))) {
              o->ops.push_back(static_cast<ReduceOp>(p));
              found = true;
            }
          }
          if (!found) {
            std::fprintf(stderr, "kernel_perf: --op: unknown op '%s'\n", name.c_str());
            return false;
          }
        }
        break;
      }
      case 'n': {
        o->nsrcs.clear();
        for (const std::string& v : Split(optarg)) {
          long n = 0;
          if (!WholeInt(v, &n) || n < 1 || n > kernels::kMaxSources) {
            std::fprintf(stderr, "kernel_perf: --nsrcs: '%s' is not in 1..16\n", v.c_str());
            return false;
          }
          o->nsrcs.push_back(static_cast<int>(n));
        }
        break;
      }
      case 's': {
        o->sizes.clear();
        for (const std::string& v : Split(optarg)) {
          StatusOr<uint64_t> b = ParseByteSize(v);
          if (!b.ok() || *b == 0) {
            std::fprintf(stderr, "kernel_perf: --sizes: '%s' is not a size\n", v.c_str());
            return false;
          }
          o->sizes.push_back(*b);
        }
        break;
      }
      case 'r': {
        long r = 0;
        if (!WholeInt(optarg, &r) || r < 1 || r > 1000000) {
          std::fprintf(stderr, "kernel_perf: --reps: '%s' is not in 1..1000000\n", optarg);
          return false;
        }
        o->reps = static_cast<int>(r);
        break;
      }
      case 'm': {
        double m = 0;
        if (!WholeDouble(optarg, &m) || !(m > 0)) {
          std::fprintf(stderr, "kernel_perf: --min-ms: '%s' is not a positive number\n", optarg);
          return false;
        }
        o->min_ms = std::max(1.0, m);
        break;
      }
      case 'F':
        o->format = optarg;
        if (o->format != "table" && o->format != "csv" && o->format != "json") {
          std::fprintf(stderr, "kernel_perf: --format: expected table, csv or json\n");
          return false;
        }
        break;
      case 'h': Usage(); std::exit(0);
      default: Usage(); return false;
    }
  }
  return true;
}

// A 64-byte aligned, pre-faulted buffer (first-touch faults cost ~12 us per
// 4 KiB page here; never let them into a timing).
struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes) {
    const size_t rounded = (bytes + 4095) / 4096 * 4096 + 4096;
    p = static_cast<unsigned char*>(std::aligned_alloc(4096, rounded));
    if (p == nullptr) {
      std::fprintf(stderr, "kernel_perf: out of memory allocating %zu bytes\n", bytes);
      std::exit(2);
    }
    madvise(p, rounded, MADV_HUGEPAGE);
    std::memset(p, 0, rounded);
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* p;
  size_t size;
};

void FillValues(void* p, size_t count, DataType dt, int salt) {
  for (size_t i = 0; i < count; ++i) {
    // Values in [-8, 8) with a fractional part: sums and products stay finite.
    const float v = static_cast<float>(static_cast<int>((i * 2654435761u + salt * 97u) % 4096) - 2048) / 256.f;
    switch (dt) {
      case DataType::kFloat32: static_cast<float*>(p)[i] = v; break;
      case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
      case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = kernels::ref::F32ToF16(v); break;
      case DataType::kBFloat16: static_cast<uint16_t*>(p)[i] = kernels::ref::F32ToBF16(v); break;
      case DataType::kFloat8E4M3:
      case DataType::kFloat8E5M2:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(kernels::ref::F32ToNarrow(dt, v));
        break;
      default: {
        const uint64_t r = i * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(salt);
        std::memcpy(static_cast<char*>(p) + i * DataTypeSize(dt), &r, DataTypeSize(dt));
      }
    }
  }
}

// Median seconds per call of each fn. Each is calibrated so that one
// repetition lasts at least min_ms; the repetitions of all fns are
// interleaved (A B C A B C ...) so that a burst of noise on this shared
// machine hits them alike and the ratios stay meaningful.
std::vector<double> TimeInterleaved(const std::vector<std::function<void()>>& fns,
                                    const Options& o) {
  using Clock = std::chrono::steady_clock;
  std::vector<size_t> iters(fns.size());
  for (size_t f = 0; f < fns.size(); ++f) {
    fns[f]();  // warm caches / TLB
    const auto t0 = Clock::now();
    fns[f]();
    const double one = std::chrono::duration<double>(Clock::now() - t0).count();
    iters[f] = std::max<size_t>(1, static_cast<size_t>(o.min_ms * 1e-3 / std::max(one, 1e-9)));
  }
  std::vector<std::vector<double>> per(fns.size());
  for (int r = 0; r < o.reps; ++r) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = Clock::now();
      for (size_t i = 0; i < iters[f]; ++i) fns[f]();
      per[f].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters[f]);
    }
  }
  std::vector<double> med;
  for (auto& v : per) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

struct Row {
  std::string dtype, op, level;
  int nsrcs;
  size_t bytes;
  bool nt;
  double ours, hand, scalar, memcpy_gbs;  // GB/s; < 0: not applicable
  double capi_ns;  // ciuic_reduce_local's time per call above Reducer::Reduce's
  size_t wrong;
};

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string Level(size_t working_set, const CacheSizes& c) {
  if (working_set <= c.l1d) return "L1";
  if (working_set <= c.l2) return "L2";
  if (working_set <= std::min<size_t>(c.llc, 32u << 20)) return "LLC";
  return "DRAM";
}

std::string Fmt(double gbs) {
  if (gbs < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", gbs);
  return b;
}
std::string Ratio(double a, double b) {
  if (a < 0 || b <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", a / b);
  return buf;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "kernel_perf: %s\n", config.status().message().c_str());
    return 2;
  }
  // Cache sizes as topology/ discovers them (hwloc), like a communicator.
  CacheSizes caches = CacheSizes::FromSystem();
  if (StatusOr<topology::Topology> topo = topology::Discover(*config); topo.ok()) {
    const topology::CacheSizes c = topology::KernelCacheSizes(*topo);
    caches.l1d = c.l1d;
    caches.l2 = c.l2;
    caches.llc = c.llc;
  }
  StatusOr<Reducer> reducer = Reducer::Create(*config, caches);
  if (!reducer.ok()) {
    std::fprintf(stderr, "kernel_perf: %s\n", reducer.status().message().c_str());
    return 2;
  }
  const Reducer& r = *reducer;
  std::string compiled;
  for (const kernels::TargetInfo& t : kernels::CompiledTargets()) {
    compiled += t.name + (t.supported ? "" : "(unsupported)") + " ";
  }
  std::string knobs;
  for (const KnobDescription& k : DescribeKnobs(*config)) {
    if (k.source != "default") knobs += k.name + "=" + k.value + " ";
  }
  char host[128] = "?";
  gethostname(host, sizeof(host) - 1);

  std::vector<Row> rows;
  for (DataType dt : o.dtypes) {
    for (ReduceOp op : o.ops) {
      if (!Supports(dt, op)) {
        std::fprintf(stderr, "kernel_perf: %s on %s is not defined: skipped\n", ReduceOpName(op), DataTypeName(dt));
        continue;
      }
      for (int n : o.nsrcs) {
        for (size_t bytes : o.sizes) {
          const size_t es = DataTypeSize(dt);
          const size_t count = bytes / es;
          std::vector<std::unique_ptr<Buffer>> in;
          std::vector<const void*> srcs;
          for (int k = 0; k < n; ++k) {
            in.push_back(std::make_unique<Buffer>(count * es));
            FillValues(in.back()->p, count, dt, k + 1);
            srcs.push_back(in.back()->p);
          }
          Buffer out(count * es), want(count * es), tmp(count * es), capi_out(count * es);
          Row row;
          row.dtype = DataTypeName(dt);
          row.op = ReduceOpName(op);
          row.nsrcs = n;
          row.bytes = count * es;
          row.level = Level(row.bytes * (n + 1), caches);
          row.nt = row.bytes >= r.nt_threshold_bytes();
          const double moved = static_cast<double>(row.bytes) * (n + 1);
          bool failed = false;
          std::vector<std::function<void()>> fns;
          fns.push_back([&] {
            if (!r.Reduce(out.p, srcs.data(), n, count, dt, op).ok()) failed = true;
          });
          // The hand-written AVX-512 loop (2-input f32/bf16 sum only).
          int hand = -1;
          if (n == 2 && op == ReduceOp::kSum && dt == DataType::kFloat32) {
            const auto* a = reinterpret_cast<const float*>(srcs[0]);
            const auto* b = reinterpret_cast<const float*>(srcs[1]);
            // cppcheck-suppress invalidPointerCast ; tmp.p: an aligned byte buffer that holds floats
            auto* d = reinterpret_cast<float*>(tmp.p);
            if (HandSumF32Avx512(d, a, b, 0, false)) {
              hand = static_cast<int>(fns.size());
              fns.push_back([=, nt = row.nt] { HandSumF32Avx512(d, a, b, count, nt); });
            }
          } else if (n == 2 && op == ReduceOp::kSum && dt == DataType::kBFloat16) {
            const auto* a = reinterpret_cast<const uint16_t*>(srcs[0]);
            const auto* b = reinterpret_cast<const uint16_t*>(srcs[1]);
            auto* d = reinterpret_cast<uint16_t*>(tmp.p);
            if (HandSumBF16Avx512(d, a, b, 0, false)) {
              hand = static_cast<int>(fns.size());
              fns.push_back([=, nt = row.nt] { HandSumBF16Avx512(d, a, b, count, nt); });
            }
          }
          // The scalar loop without vectorisation (sum of f32/bf16/f16).
          int scalar = -1;
          if (op == ReduceOp::kSum) {
            auto* d16 = reinterpret_cast<uint16_t*>(tmp.p);
            const auto* s16 = reinterpret_cast<const uint16_t* const*>(srcs.data());
            if (dt == DataType::kFloat32) {
              scalar = static_cast<int>(fns.size());
              fns.push_back([&] {
                // cppcheck-suppress invalidPointerCast ; as above
                ScalarSumF32(reinterpret_cast<float*>(tmp.p),
                             reinterpret_cast<const float* const*>(srcs.data()), n, count);
              });
            } else if (dt == DataType::kBFloat16) {
              scalar = static_cast<int>(fns.size());
              fns.push_back([=] { ScalarSumBF16(d16, s16, n, count); });
            } else if (dt == DataType::kFloat16) {
              scalar = static_cast<int>(fns.size());
              fns.push_back([=] { ScalarSumF16(d16, s16, n, count); });
            } else if (dt == DataType::kFloat8E4M3 || dt == DataType::kFloat8E5M2) {
              auto* d8 = reinterpret_cast<uint8_t*>(tmp.p);
              const auto* s8 = reinterpret_cast<const uint8_t* const*>(srcs.data());
              scalar = static_cast<int>(fns.size());
              if (dt == DataType::kFloat8E4M3) {
                fns.push_back([=] { ScalarSumE4M3(d8, s8, n, count); });
              } else {
                fns.push_back([=] { ScalarSumE5M2(d8, s8, n, count); });
              }
            }
          }
          // The same reduction through the C ABI (its process-wide reducer).
          const int capi = static_cast<int>(fns.size());
          fns.push_back([&] {
            if (ciuic_reduce_local(capi_out.p, srcs.data(), n, count, static_cast<ciuic_datatype_t>(dt),
                                   static_cast<ciuic_redop_t>(op)) != CIUIC_SUCCESS) {
              failed = true;
            }
          });
          const int mcpy = static_cast<int>(fns.size());
          fns.push_back([&] { std::memcpy(tmp.p, srcs[0], row.bytes); });
          const std::vector<double> t = TimeInterleaved(fns, o);
          if (failed) {
            std::fprintf(stderr, "kernel_perf: Reduce failed\n");
            return 1;
          }
          row.ours = moved / t[0] / 1e9;
          row.hand = hand < 0 ? -1 : moved / t[hand] / 1e9;
          row.scalar = scalar < 0 ? -1 : moved / t[scalar] / 1e9;
          row.memcpy_gbs = 2.0 * row.bytes / t[mcpy] / 1e9;
          row.capi_ns = (t[capi] - t[0]) * 1e9;
          // Check the result of ciuic's last run against the reference.
          if (!r.Reduce(out.p, srcs.data(), n, count, dt, op).ok()) return 1;
          kernels::ref::Reduce(want.p, srcs.data(), n, count, dt, op);
          row.wrong = 0;
          for (size_t i = 0; i < count; ++i) {
            row.wrong += !kernels::ref::SameElement(out.p, want.p, i, dt);
            row.wrong += !kernels::ref::SameElement(capi_out.p, want.p, i, dt);
          }
          rows.push_back(row);
          if (o.format == "table") {
            if (rows.size() == 1) {
              std::printf("# ciuic kernel_perf %s (git %s) on %s\n", Version(), GitRevision(), host);
              std::printf("# cpu: %s; caches l1d=%zu l2=%zu llc=%zu; nt from %zu B\n",
                          CpuModel().c_str(), caches.l1d, caches.l2, caches.llc,
                          r.nt_threshold_bytes());
              std::printf("# simd: %s chosen; compiled: %s; two-input fp8 sum/avg: %s\n", r.target_name(),
                          compiled.c_str(), Reducer::Fp8PairKernelName(r.fp8_pair_kernel()));
              std::printf("# knobs: %s\n", knobs.empty() ? "(all defaults)" : knobs.c_str());
              std::printf("# GB/s = (inputs + output bytes) / time; hand = hand-written AVX-512 "
                          "loop; scalar = loop built without vectorisation\n");
              std::printf("# C-ABI ns = ciuic_reduce_local's time per call minus Reducer::Reduce's (same run)\n");
              std::printf("%-5s %-4s %2s %10s %-4s %2s | %8s %8s %6s | %8s %7s | %8s %6s | %8s | %6s\n",
                          "type", "op", "n", "bytes", "set", "nt", "ciuic", "hand", "/hand",
                          "scalar", "/scal", "memcpy", "/mcpy", "C-ABI ns", "#wrong");
            }
            std::printf("%-5s %-4s %2d %10zu %-4s %2s | %8s %8s %6s | %8s %7s | %8s %6s | %8.0f | %6zu\n",
                        row.dtype.c_str(), row.op.c_str(), row.nsrcs, row.bytes, row.level.c_str(),
                        row.nt ? "y" : "n", Fmt(row.ours).c_str(), Fmt(row.hand).c_str(),
                        Ratio(row.ours, row.hand).c_str(), Fmt(row.scalar).c_str(),
                        Ratio(row.ours, row.scalar).c_str(), Fmt(row.memcpy_gbs).c_str(),
                        Ratio(row.ours, row.memcpy_gbs).c_str(), row.capi_ns, row.wrong);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  size_t total_wrong = 0;
  for (const Row& row : rows) total_wrong += row.wrong;
  if (o.format == "csv") {
    std::printf("type,op,nsrcs,bytes,set,nt,ciuic_gbs,hand_gbs,scalar_gbs,memcpy_gbs,capi_overhead_ns,wrong,target\n");
    for (const Row& w : rows) {
      std::printf("%s,%s,%d,%zu,%s,%d,%.3f,%.3f,%.3f,%.3f,%.1f,%zu,%s\n", w.dtype.c_str(), w.op.c_str(),
                  w.nsrcs, w.bytes, w.level.c_str(), w.nt, w.ours, w.hand, w.scalar, w.memcpy_gbs,
                  w.capi_ns, w.wrong, r.target_name());
    }
  } else if (o.format == "json") {
    std::printf("{\"benchmark\":\"kernel_perf\",\"version\":\"%s\",\"git\":\"%s\",\"host\":\"%s\","
                "\"cpu\":\"%s\",\"target\":\"%s\",\"compiled\":\"%s\",\"knobs\":\"%s\",\"rows\":[",
                Version(), GitRevision(), host, CpuModel().c_str(), r.target_name(),
                compiled.c_str(), knobs.c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& w = rows[i];
      std::printf("%s{\"type\":\"%s\",\"op\":\"%s\",\"nsrcs\":%d,\"bytes\":%zu,\"set\":\"%s\","
                  "\"nt\":%s,\"ciuic_gbs\":%.3f,\"hand_gbs\":%.3f,\"scalar_gbs\":%.3f,"
                  "\"memcpy_gbs\":%.3f,\"capi_overhead_ns\":%.1f,\"wrong\":%zu}",
                  i ? "," : "", w.dtype.c_str(), w.op.c_str(), w.nsrcs, w.bytes, w.level.c_str(),
                  w.nt ? "true" : "false", w.ours, w.hand, w.scalar, w.memcpy_gbs, w.capi_ns, w.wrong);
    }
    std::printf("]}\n");
  } else {
    std::printf("# %zu rows, %zu wrong elements in total\n", rows.size(), total_wrong);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ciuic::perf

int main(int argc, char** argv) { return ciuic::perf::Main(argc, argv); }
