// ciuic-tune: measures this machine for the cost model and the crossovers
// between all-reduce algorithms, and writes a tuning file for
// CIUIC_TUNING_FILE (format: collectives/tuning.h, README "Tuning").
//
// What it measures, in order:
//   gamma, copy  in this process: Reducer::Reduce of two inputs into a
//                256 KiB result (L2-resident, as chunks are) per dtype (sum),
//                and Reducer::Copy of 256 KiB; best of three batches. The
//                copy by working set to 128 MiB, and out of DRAM on up to
//                8 cores at once (memory_shared), with the last-level cache
//                those cores share from topology discovery (its beyond).
//   alpha, beta  per backend, two forked ranks over one transport::Link (the
//                slot ring collectives use): alpha = the median one-way time
//                of an 8 B ping-pong (half the round trip); beta = full-slot
//                chunks streamed one way (the sender copies each into the
//                slot, as the executor does), bytes / time until the
//                receiver's answer to the last one, median of five;
//                exchange = the same chunks streamed both ways at once, a
//                rank's bytes sent + received / time, median of five;
//                between hosts also the machine's CPU time per byte (the
//                exchange with sleeping waits, /proc/stat's busy time).
//   all-reduce   per rank count, n forked ranks run every all-reduce
//                algorithm of the registry that runs on the backend (the
//                schedules, and on shm the direct family) over the size
//                sweep, each through a
//                Communicator with CIUIC_ALGO forced, f32 sum out of place.
//                Every size is checked once (#wrong; any wrong element fails
//                the run and no file is written), warmed up, then timed: the
//                slowest rank's mean per call, best of up to five batches
//                (--quick: two).
// The rules are the fastest measured algorithm per size, merged across
// adjacent sizes: the choice switches only where the new winner is more than
// 5% faster than the current one, there and at the next size, so noise does
// not flap between near-ties.
// Beside each measurement the table shows the cost model's prediction with
// the measured alpha, beta, gamma and copy.
//
// Ranks: forked here, meeting at a TCP store this process serves on
// loopback with a fresh secret (one store per group of ranks); tcp runs over
// lo. A rank that fails stops its group: the others are killed, ciuic-tune
// prints the rank's reason and exits 1. Children die with this process
// (PR_SET_PDEATHSIG). Exit status: 0 written; 1 a failure or a wrong result;
// 2 bad flags or knobs.
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ciuic/collectives.h"
#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/topology.h"
#include "transport/transport.h"
#include "collectives/comm_impl.h"
#include "collectives/cost_model.h"
#include "collectives/registry.h"
#include "collectives/selection.h"
#include "collectives/tuning.h"
#include "common/log.h"
#include "common/version.h"

namespace ciuic::tune {
namespace {

using collectives::Collective;
using transport::BackendKind;
using Clock = std::chrono::steady_clock;

constexpr const char* kProg = "ciuic-tune";
constexpr double kHysteresis = 1.05;  // a new winner must be >5% faster
constexpr size_t kKernelBytes = 256u << 10;
// Far beyond the caches of today's servers' cores (a DRAM-sized call).
constexpr size_t kDramBytes = 64u << 20;
// The step sizes (bytes each way) of the exchange-step curve: a small
// collective's step to a large one's.
constexpr size_t kExchangeStepBytes[] = {64u << 10, 256u << 10, 512u << 10, 1u << 20, 4u << 20, 16u << 20};

struct Options {
  std::vector<int> ranks = {2, 4};
  std::vector<BackendKind> backends;  // empty = shm, tcp (+ verbs when usable)
  size_t min_bytes = 8;
  size_t max_bytes = 64u << 20;
  bool quick = false;
  std::string output = "ciuic-tuning.txt";
  std::string check;  // --check FILE: only parse it
  std::string command;
  bool ranks_given = false, backends_given = false;

  // What must agree between the ranks of a launched run (what is measured).
  std::string Canonical() const {
    return "-b " + std::to_string(min_bytes) + " -e " + std::to_string(max_bytes) + (quick ? " --quick" : "");
  }
};

// How long each measurement runs: --quick trades precision for time.
struct Effort {
  size_t factor = 2;           // between sizes
  double budget_s = 0.25;      // timed seconds per (algorithm, size)
  int min_iters = 3, max_iters = 5000;
  int warmup = 2;
  int batches = 5;
  int pingpongs = 2000;        // alpha
  size_t stream_bytes = 256u << 20;  // beta (tcp: a quarter)
  double kernel_s = 0.02;      // per dtype
};

Effort EffortFor(bool quick) {
  Effort e;
  if (quick) {
    e.factor = 4;
    e.budget_s = 0.02;
    e.min_iters = 2;
    e.max_iters = 300;
    e.warmup = 1;
    e.batches = 2;
    e.pingpongs = 500;
    e.stream_bytes = 64u << 20;
    e.kernel_s = 0.005;
  }
  return e;
}

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: ciuic-tune [-n ranks,...] [-t shm,tcp,verbs] [-b min] [-e max] [--quick] [-o file]\n"
               "       ciuic-tune --check FILE\n"
               "Measures alpha, beta, gamma and the all-reduce crossovers on this machine and\n"
               "writes a tuning file for CIUIC_TUNING_FILE.\n"
               "  -n, --ranks LIST      rank counts to measure, each 2..64 (default 2,4)\n"
               "  -t, --transport LIST  shm, tcp, verbs (default shm,tcp, and verbs when usable)\n"
               "  -b, --min-bytes N     smallest all-reduce (default 8; K/M/G suffixes)\n"
               "  -e, --max-bytes N     largest all-reduce (default 64M)\n"
               "      --quick           fewer sizes (x4 apart) and iterations (about a minute)\n"
               "  -o, --output FILE     where to write (default ciuic-tuning.txt)\n"
               "      --check FILE      only parse a tuning file (e.g. edited by hand) and print it\n"
               "                        as it is understood; exit 1 with the line of the first error\n"
               "  -h, --help\n"
               "Ranks are forked here; tcp runs over loopback. CIUIC_* knobs apply (ciuic-info),\n"
               "CIUIC_CHUNK_SIZE and CIUIC_NCHANNELS shape what is measured.\n"
               "Started by a launcher (ciuic-run, mpirun, srun) it tunes that job instead: every\n"
               "all-reduce algorithm on the job's own communicator (shm inside hosts, the network\n"
               "between), rules for its rank and host count; rank 0 writes the file (-n, -t: no).\n");
}

bool BadFlag(const char* flag, const char* value, const std::string& expected) {
  std::fprintf(stderr, "%s: %s '%s': expected %s\n", kProg, flag, value ? value : "", expected.c_str());
  return false;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  if (!s.empty() && s.back() == ',') out.push_back("");
  return out;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  static const option kLong[] = {{"ranks", 1, nullptr, 'n'},     {"transport", 1, nullptr, 't'},
                                 {"min-bytes", 1, nullptr, 'b'}, {"max-bytes", 1, nullptr, 'e'},
                                 {"quick", 0, nullptr, 'q'},     {"output", 1, nullptr, 'o'},
                                 {"check", 1, nullptr, 'c'},     {"help", 0, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  for (int i = 0; i < argc; ++i) o->command += (i ? " " : "") + std::string(argv[i]);
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":n:t:b:e:o:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'n': {
        o->ranks_given = true;
        o->ranks.clear();
        for (const std::string& item : SplitList(optarg)) {
          char* end = nullptr;
          const long v = std::strtol(item.c_str(), &end, 10);
          if (item.empty() || *end != '\0' || v < 2 || v > 64) {
            return BadFlag("-n/--ranks", optarg, "rank counts from 2 to 64, comma-separated (2,4)");
          }
          if (std::find(o->ranks.begin(), o->ranks.end(), v) == o->ranks.end()) o->ranks.push_back(static_cast<int>(v));
        }
        if (o->ranks.empty()) return BadFlag("-n/--ranks", optarg, "at least one rank count");
        break;
      }
      case 't': {
        o->backends_given = true;
        o->backends.clear();
        for (const std::string& item : SplitList(optarg)) {
          StatusOr<BackendKind> k = transport::ParseBackendKind(item);
          if (!k.ok()) return BadFlag("-t/--transport", optarg, "shm, tcp, verbs or a comma list of them");
          if (std::find(o->backends.begin(), o->backends.end(), *k) == o->backends.end()) o->backends.push_back(*k);
        }
        if (o->backends.empty()) return BadFlag("-t/--transport", optarg, "at least one transport");
        break;
      }
      case 'b':
      case 'e': {
        StatusOr<uint64_t> v = ParseByteSize(optarg);
        const char* flag = c == 'b' ? "-b/--min-bytes" : "-e/--max-bytes";
        if (!v.ok() || *v < 4 || *v > (1ull << 32)) return BadFlag(flag, optarg, "a size from 4 to 4G such as 8, 64K, 64M");
        (c == 'b' ? o->min_bytes : o->max_bytes) = static_cast<size_t>(*v);
        break;
      }
      case 'q': o->quick = true; break;
      case 'c': o->check = optarg; break;
      case 'o':
        if (*optarg == '\0') return BadFlag("-o/--output", optarg, "a file name");
        o->output = optarg;
        break;
      case 'h': Usage(stdout); std::exit(0);
      case ':':
        std::fprintf(stderr, "%s: %s needs a value\n", kProg, argv[optind - 1]);
        return false;
      default:
        std::fprintf(stderr, "%s: unknown flag '%s' (see --help)\n", kProg, argv[optind - 1]);
        return false;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", kProg, argv[optind]);
    return false;
  }
  if (o->min_bytes > o->max_bytes) {
    std::fprintf(stderr, "%s: -b (%zu) is larger than -e (%zu)\n", kProg, o->min_bytes, o->max_bytes);
    return false;
  }
  return true;
}

std::vector<size_t> Sizes(const Options& o, const Effort& e) {
  std::vector<size_t> out;
  for (size_t s = o.min_bytes / 4 * 4; s <= o.max_bytes; s *= e.factor) out.push_back(s);
  if (out.back() < o.max_bytes / 4 * 4) out.push_back(o.max_bytes / 4 * 4);
  return out;
}

// ---------------------------------------------------------------------------
// Where it ran.

std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (line.compare(0, 10, "model name") == 0 && colon != std::string::npos) return line.substr(colon + 2);
  }
  return "unknown";
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return date;
}

std::string SizeText(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

std::string Join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : sep) + i;
  return s;
}

// Meta text may not hold '#' (it starts a comment in the file).
std::string MetaText(std::string s) {
  std::replace(s.begin(), s.end(), '#', '?');
  return s;
}

// ---------------------------------------------------------------------------
// gamma and copy, in this process.

struct KernelRates {
  std::vector<std::pair<DataType, double>> reduce_gbps;  // 2-input sum
  double copy_gbps = 0;
  // Out of DRAM (kDramBytes buffers): copy and the f32 sum; and the copy
  // rate by working set (2 x the copy's size), kKernelBytes to kDramBytes.
  double copy_dram_gbps = 0;
  double sum_dram_gbps = 0;
  std::vector<std::pair<size_t, double>> memory;
  // Each of shared_cores cores copying kDramBytes out of DRAM at once
  // (0: fewer than two cores, or they could not be pinned apart).
  int shared_cores = 0;
  double shared_copy_gbps = 0;
};

// GB/s of `bytes` per call of `fn`, best of three batches of about `s`.
double Rate(size_t bytes, double s, const std::function<void()>& fn) {
  fn();
  const auto t0 = Clock::now();
  fn();
  const double one = std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
  const long reps = std::clamp<long>(static_cast<long>(s / one), 1, 1000000);
  double best = 1e30;
  for (int b = 0; b < 3; ++b) {
    const auto start = Clock::now();
    for (long r = 0; r < reps; ++r) fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return static_cast<double>(bytes) * static_cast<double>(reps) / best / 1e9;
}

// Appends the 2-input sum rate of `t` to k->reduce_gbps.
Status MeasureReduce(const kernels::Reducer& reducer, DataType t, double seconds, const std::vector<uint64_t>& a,
                     const std::vector<uint64_t>& b, std::vector<uint64_t>& dst, KernelRates* k) {
  const void* srcs[2] = {a.data(), b.data()};
  const size_t count = kKernelBytes / DataTypeSize(t);
  CIUIC_RETURN_IF_ERROR(reducer.Reduce(dst.data(), srcs, 2, count, t, ReduceOp::kSum));
  const double gbps = Rate(kKernelBytes, seconds, [&] {
    (void)reducer.Reduce(dst.data(), srcs, 2, count, t, ReduceOp::kSum);
    asm volatile("" : : "r"(dst.data()) : "memory");
  });
  k->reduce_gbps.emplace_back(t, gbps);
  return Status::Ok();
}

// Copies out of DRAM on `cores` threads at once, thread i pinned to the
// i-th CPU of the machine (not of this process: a launched rank is bound
// to one core), each over its own kDramBytes buffers: the mean of their
// GB/s, 0 where a thread could not be pinned (threads sharing a core
// would measure the scheduler, not DRAM).
double SharedDramCopy(const kernels::Reducer& reducer, int cores, double single_gbps, double seconds) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 2 || online < cores || single_gbps <= 0) return 0;
  // Enough copies that they overlap for most of their time.
  const int reps = std::clamp(static_cast<int>(seconds * single_gbps * 1e9 / kDramBytes), 4, 64);
  std::vector<double> gbps(static_cast<size_t>(cores), 0);
  std::vector<char> pinned(static_cast<size_t>(cores), 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(cores));
  for (int i = 0; i < cores; ++i) {
    threads.emplace_back([&, i] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(i, &set);
      pinned[static_cast<size_t>(i)] = sched_setaffinity(0, sizeof set, &set) == 0;
      std::vector<uint64_t> src(kDramBytes / 8, 1), dst(kDramBytes / 8, 0);
      ready.fetch_add(1);
      while (ready.load() < cores) std::this_thread::yield();
      const auto t0 = Clock::now();
      for (int r = 0; r < reps; ++r) {
        reducer.Copy(dst.data(), src.data(), kDramBytes);
        asm volatile("" : : "r"(dst.data()) : "memory");
      }
      const double t = std::chrono::duration<double>(Clock::now() - t0).count();
      gbps[static_cast<size_t>(i)] = static_cast<double>(kDramBytes) * reps / t / 1e9;
    });
  }
  for (std::thread& t : threads) t.join();
  if (std::find(pinned.begin(), pinned.end(), 0) != pinned.end()) return 0;
  double sum = 0;
  for (double g : gbps) sum += g;
  return sum / cores;
}

StatusOr<KernelRates> MeasureKernels(const kernels::Reducer& reducer, const Effort& e) {
  // Zeros are a valid value of every dtype (no NaN, no denormal paths).
  std::vector<uint64_t> a(kKernelBytes / 8, 0), b(kKernelBytes / 8, 0), dst(kKernelBytes / 8, 0);
  KernelRates k;
  const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64,  DataType::kFloat16, DataType::kBFloat16,
                             DataType::kInt32,   DataType::kInt64,    DataType::kInt8,    DataType::kUint8,
                             DataType::kUint32,  DataType::kUint64};
  // A first, shorter round is discarded, so the first dtype is not measured
  // on a cold core (clock ramp, caches, the dispatch tables).
  for (int round = 0; round < 2; ++round) {
    k.reduce_gbps.clear();
    for (DataType t : kTypes) {
      CIUIC_RETURN_IF_ERROR(MeasureReduce(reducer, t, e.kernel_s / (round == 0 ? 4 : 1), a, b, dst, &k));
    }
  }
  k.copy_gbps = Rate(kKernelBytes, e.kernel_s, [&] {
    reducer.Copy(dst.data(), a.data(), kKernelBytes);
    asm volatile("" : : "r"(dst.data()) : "memory");
  });
  // The copy rate by size, from cache to DRAM. Zeros as above (written, so
  // every page is real).
  std::vector<uint64_t> big_a(kDramBytes / 8, 0), big_b(kDramBytes / 8, 0), big_dst(kDramBytes / 8, 0);
  for (size_t bytes = kKernelBytes; bytes <= kDramBytes; bytes *= 2) {
    const double gbps = Rate(bytes, e.kernel_s, [&] {
      reducer.Copy(big_dst.data(), big_a.data(), bytes);
      asm volatile("" : : "r"(big_dst.data()) : "memory");
    });
    k.memory.emplace_back(2 * bytes, std::round(gbps * 100) / 100);
    if (bytes == kDramBytes) k.copy_dram_gbps = gbps;
  }
  const void* srcs[2] = {big_a.data(), big_b.data()};
  const size_t count = kDramBytes / 4;
  k.sum_dram_gbps = Rate(kDramBytes, e.kernel_s, [&] {
    (void)reducer.Reduce(big_dst.data(), srcs, 2, count, DataType::kFloat32, ReduceOp::kSum);
    asm volatile("" : : "r"(big_dst.data()) : "memory");
  });
  // Up to 8 cores: enough to see DRAM's rate shared, a bounded allocation.
  const int cores = static_cast<int>(std::min<long>(8, sysconf(_SC_NPROCESSORS_ONLN)));
  if (const double g = SharedDramCopy(reducer, cores, k.copy_dram_gbps, 4 * e.kernel_s); g > 0) {
    k.shared_cores = cores;
    k.shared_copy_gbps = g;
  }
  return k;
}

// ---------------------------------------------------------------------------
// Forked rank groups.

// A child reports to the parent in lines on a pipe: rank 0 its results,
// any rank "error <message>" before it exits 1.
class Reporter {
 public:
  explicit Reporter(int fd) : fd_(fd) {}
  void Line(const std::string& line) const {
    const std::string l = line + "\n";
    size_t off = 0;
    while (off < l.size()) {
      const ssize_t w = write(fd_, l.data() + off, l.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;  // the parent is gone: nothing to tell
      off += static_cast<size_t>(w);
    }
  }

 private:
  int fd_;
};

using RankBody = std::function<Status(int rank, const std::string& host, uint16_t port, const std::string& secret,
                                      const Reporter& out)>;

std::string Secret() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string ExitText(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "ended";
}

// Runs body(rank, ...) in `n` forked processes meeting at a fresh store.
// Every line a rank reports goes to on_line(rank, line) as it arrives. When
// a rank fails (error line, non-zero exit, signal) or `limit` passes, the
// others are killed and the error names the rank and its reason.
Status RunRanks(int n, const RankBody& body, const std::function<void(int, const std::string&)>& on_line,
                std::chrono::seconds limit) {
  const std::string secret = Secret();
  const pid_t parent = getpid();
  std::vector<pid_t> pids(n, -1);
  std::vector<int> fds(n, -1);
  // The ranks are forked while this process has one thread, and learn the
  // store's port through a pipe once it runs: a fork while the store's
  // thread holds an allocator lock (ASan's, for one) leaves the child
  // deadlocked at its first allocation.
  std::vector<int> go(n, -1);
  std::vector<std::string> partial(n), errors(n);
  std::fflush(nullptr);
  Status failure;
  auto kill_all = [&] {
    for (pid_t p : pids) {
      if (p > 0) kill(p, SIGKILL);
    }
  };
  for (int r = 0; r < n && failure.ok(); ++r) {
    int pipefd[2];
    if (pipe(pipefd) != 0) {
      failure = UnavailableError(std::string("pipe: ") + std::strerror(errno));
      break;
    }
    int gofd[2];
    if (pipe(gofd) != 0) {
      failure = UnavailableError(std::string("pipe: ") + std::strerror(errno));
      close(pipefd[0]);
      close(pipefd[1]);
      break;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the parent died before the line above
      close(pipefd[0]);
      close(gofd[1]);
      for (int i = 0; i < r; ++i) {
        close(fds[i]);
        close(go[i]);
      }
      uint16_t port = 0;
      if (read(gofd[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) _exit(1);  // no store
      close(gofd[0]);
      const Reporter out(pipefd[1]);
      Status s = body(r, "127.0.0.1", port, secret, out);
      if (!s.ok()) out.Line("error " + s.ToString());
      std::fflush(nullptr);
      _exit(s.ok() ? 0 : 1);
    }
    close(pipefd[1]);
    close(gofd[0]);
    if (pid < 0) {
      close(pipefd[0]);
      close(gofd[1]);
      failure = UnavailableError(std::string("fork: ") + std::strerror(errno));
      break;
    }
    pids[r] = pid;
    fds[r] = pipefd[0];
    go[r] = gofd[1];
  }
  // Now the store (and its thread), then the port to every rank.
  std::unique_ptr<transport::TcpStoreServer> server;
  if (failure.ok()) {
    StatusOr<std::unique_ptr<transport::TcpStoreServer>> started =
        transport::TcpStoreServer::Start("127.0.0.1", 0, secret);
    if (started.ok()) {
      server = std::move(*started);
    } else {
      failure = started.status();
    }
  }
  for (int r = 0; r < n; ++r) {
    if (go[r] < 0) continue;
    if (server != nullptr) {
      const uint16_t port = server->port();
      if (write(go[r], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port)) && failure.ok()) {
        failure = UnavailableError("telling rank " + std::to_string(r) + " the store's port: " + std::strerror(errno));
      }
    }
    close(go[r]);  // without a port the rank exits
  }
  const auto deadline = Clock::now() + limit;
  int open = 0;
  for (int fd : fds) open += fd >= 0;
  while (open > 0 && failure.ok()) {
    std::vector<pollfd> pf;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (fds[r] < 0) continue;
      pf.push_back({fds[r], POLLIN, 0});
      who.push_back(r);
    }
    const int ready = poll(pf.data(), pf.size(), 200);
    if (ready < 0 && errno != EINTR) {
      failure = UnavailableError(std::string("poll: ") + std::strerror(errno));
      break;
    }
    for (size_t i = 0; i < pf.size() && ready > 0; ++i) {
      if (pf[i].revents == 0) continue;
      const int r = who[i];
      char buf[4096];
      const ssize_t got = read(fds[r], buf, sizeof(buf));
      if (got > 0) {
        partial[r].append(buf, static_cast<size_t>(got));
        for (size_t nl; (nl = partial[r].find('\n')) != std::string::npos;) {
          const std::string line = partial[r].substr(0, nl);
          partial[r].erase(0, nl + 1);
          if (line.rfind("error ", 0) == 0) errors[r] = line.substr(6);
          else on_line(r, line);
        }
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      // End of the pipe: the rank has ended (or is about to).
      close(fds[r]);
      fds[r] = -1;
      --open;
      int status = 0;
      waitpid(pids[r], &status, 0);
      pids[r] = -1;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        failure = AbortedError("rank " + std::to_string(r) + ": " +
                               (errors[r].empty() ? ExitText(status) : errors[r]));
      }
    }
    if (failure.ok() && Clock::now() > deadline) {
      failure = DeadlineExceededError("ranks still running after " + std::to_string(limit.count()) + " s");
    }
  }
  kill_all();
  for (int r = 0; r < n; ++r) {
    if (fds[r] >= 0) close(fds[r]);
    if (pids[r] > 0) waitpid(pids[r], nullptr, 0);
  }
  return failure;
}

// ---------------------------------------------------------------------------
// alpha and beta over a Link (ranks 0 and 1).

// The knobs of every measurement on `kind`: that transport, tcp over
// loopback, and no tuning file (the algorithms are forced; a stale or broken
// file in the environment must not stop the run that replaces it).
Config BackendConfig(const Config& base, BackendKind kind) {
  Config c = base;
  (void)c.Set("CIUIC_TRANSPORT", transport::BackendName(kind));
  (void)c.Set("CIUIC_TUNING_FILE", "");
  if (kind == BackendKind::kTcp) (void)c.Set("CIUIC_SOCKET_IFNAME", "lo");
  return c;
}

struct LinkBench {
  std::unique_ptr<transport::Backend> backend;
  std::unique_ptr<transport::BufferPool> pool;
  std::unique_ptr<transport::Link> link;
  std::chrono::steady_clock::time_point deadline;
  // As the communicator's waits: a spinner would hold the core a rank
  // sharing it needs, and count that as the link's latency.
  std::chrono::microseconds spin = transport::kDefaultSpin;

  Status Wait(const std::function<bool()>& ready, const char* what) {
    return transport::WaitFor(
        *backend, [this] { return link->Progress(); }, ready, deadline, what, spin);
  }
  Status Send(const void* src, size_t len) {
    void* slot = nullptr;
    CIUIC_RETURN_IF_ERROR(Wait([&] { return (slot = link->AcquireSend()) != nullptr; }, "a free slot of the peer"));
    kernels::CopyBytes(slot, src, len);
    return link->CommitSend(len);
  }
  Status Recv() {
    size_t len = 0;
    CIUIC_RETURN_IF_ERROR(Wait([&] { return link->PeekRecv(&len) != nullptr; }, "a chunk from the peer"));
    return link->ReleaseRecv();
  }
};

// The CPUs this process may run on (0: unknown).
int AffinityCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

// The one CPU this thread is bound to, -1 where it may run on several.
int BoundCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) return i;
  }
  return -1;
}

// The machine's busy CPU time so far, all cores (user, nice, system, irq
// and softirq of /proc/stat: the kernel's network stack included), in
// seconds; -1 where /proc/stat cannot be read.
double MachineBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  const long hz = sysconf(_SC_CLK_TCK);
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || cpu != "cpu" || hz <= 0) {
    return -1;
  }
  return static_cast<double>(user + nice + system + irq + softirq) / static_cast<double>(hz);
}

// This kernel's boot id: ranks that read the same one share a machine's
// CPUs (simulated hosts are network namespaces of one kernel).
std::string BootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  f >> id;
  return id;
}

// One side (`role` 0 or 1) of a pair measuring a Link of `kind` whose
// store keys live under `prefix`; role 0 returns its result line
// ("link KIND alpha_us beta_gbps slot_bytes beta_dram_gbps pair_cores exchange_gbps
// exchange_dram_gbps cpu_gbps", cpu_gbps 0 unless `machine_cpu`), role 1 an
// empty one. With `machine_cpu` (a pair between hosts, whose link and not
// whose CPU sets the rate) it also measures the machine's CPU time per byte.
StatusOr<std::string> MeasureLinkOver(transport::Store& store, const std::string& prefix, int role,
                                      const std::string& job_id, const Config& config, BackendKind kind,
                                      const Effort& e, bool machine_cpu = false,
                                      std::chrono::microseconds spin = transport::kDefaultSpin) {
  const auto timeout = std::chrono::milliseconds(config.timeout_ms);
  transport::BackendOptions bo;
  bo.rank = role;
  bo.world_size = 2;
  bo.job_id = job_id;
  bo.config = config;
  CIUIC_ASSIGN_OR_RETURN(transport::LinkOptions lo, transport::LinkOptions::FromConfig(config));
  LinkBench b;
  b.deadline = Clock::now() + timeout;
  b.spin = spin;
  CIUIC_ASSIGN_OR_RETURN(b.backend, transport::OpenBackend(kind, bo));
  b.pool = std::make_unique<transport::BufferPool>(*b.backend, 16u << 20);
  CIUIC_ASSIGN_OR_RETURN(b.link, transport::Link::Create(*b.backend, *b.pool, store, prefix + "/link", role, 1 - role,
                                                         0, lo, timeout));
  std::vector<char> src(lo.slot_size, 1);
  // Over shm the exchanges' receivers copy each chunk out, as a
  // collective's receiver reads it: the read pulls the lines the peer's
  // core just wrote, whose cost follows how far apart the two cores are (a
  // VM's vCPU placement: 4.5x). Elsewhere the chunk is this core's own
  // (tcp's recv wrote it here) and gamma and copy, measured on local data,
  // already charge reading it.
  const bool copy_out = b.link->writes_into_peer_memory();
  std::vector<char> sink(copy_out ? lo.slot_size : 0);
  // Whether the pair shares one core (a launcher's binding): the stream's
  // rate then adds both sides' costs.
  if (role == 1) CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/link/cpu", std::to_string(BoundCpu())));
  // alpha: 8 B ping-pong, one way = half the round trip, median.
  const int warm = e.pingpongs / 10;
  std::vector<double> one_way;
  for (int i = 0; i < warm + e.pingpongs; ++i) {
    if (role == 0) {
      const auto t0 = Clock::now();
      CIUIC_RETURN_IF_ERROR(b.Send(src.data(), 8));
      CIUIC_RETURN_IF_ERROR(b.Recv());
      if (i >= warm) one_way.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
    } else {
      CIUIC_RETURN_IF_ERROR(b.Recv());
      CIUIC_RETURN_IF_ERROR(b.Send(src.data(), 8));
    }
  }
  // exchange steps: one step's bytes each way alone, both sides at once and
  // each then waiting for the peer's, back to back as a collective's steps
  // run. A lone step that fits the transport's buffering outruns the stream
  // (loopback tcp's socket buffers take a whole chunk without the peer).
  // Measured before the streams below: after them loopback tcp's lone
  // steps ran at the stream's rate in 5 of 6 runs, before them at twice it
  // in 6 of 6, as a collective's do. Not between hosts, whose link sets
  // the rate (and a slow one would take seconds).
  std::string steps;
  // Sent from the buffer itself where the link allows it, as a collective's
  // registered buffers are (no staging copy).
  std::vector<char> step_src(machine_cpu ? 0 : kExchangeStepBytes[std::size(kExchangeStepBytes) - 1], 1);
  std::unique_ptr<transport::MemoryRegion> step_region;
  if (!machine_cpu && !b.link->writes_into_peer_memory()) {
    // Where it cannot be registered (a locked-memory limit), staged.
    StatusOr<std::unique_ptr<transport::MemoryRegion>> r = b.backend->Register(step_src.data(), step_src.size());
    if (r.ok()) step_region = std::move(*r);
  }
  for (size_t bytes : kExchangeStepBytes) {
    if (machine_cpu) break;
    auto step = [&](size_t reps) -> StatusOr<double> {
      const auto t0 = Clock::now();
      for (size_t r = 0; r < reps; ++r) {
        size_t sent = 0, got = 0;
        Status st;
        CIUIC_RETURN_IF_ERROR(b.Wait(
            [&] {
              while (st.ok() && sent < bytes) {
                const size_t len = std::min(lo.slot_size, bytes - sent);
                if (step_region != nullptr) {
                  if (!b.link->CanSend()) break;
                  st = b.link->CommitSendFrom(*step_region, sent, len);
                } else {
                  void* slot = b.link->AcquireSend();
                  if (slot == nullptr) break;
                  kernels::CopyBytes(slot, step_src.data() + sent, len);
                  st = b.link->CommitSend(len);
                }
                sent += len;
              }
              size_t len = 0;
              for (const void* in = nullptr; st.ok() && got < bytes && (in = b.link->PeekRecv(&len)) != nullptr;
                   got += len) {
                if (copy_out) kernels::CopyBytes(sink.data(), in, len);
                st = b.link->ReleaseRecv();
              }
              return !st.ok() || (sent == bytes && got == bytes);
            },
            "the peer's step of the exchange"));
        if (!st.ok()) return st;
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      // Both sides start the next batch together.
      CIUIC_RETURN_IF_ERROR(role == 0 ? b.Recv() : b.Send(src.data(), 8));
      CIUIC_RETURN_IF_ERROR(role == 0 ? b.Send(src.data(), 8) : b.Recv());
      return s / static_cast<double>(reps);
    };
    // Enough steps a batch to outlast the clock's and a wakeup's noise.
    const size_t reps = std::clamp<size_t>((size_t{8} << 20) / bytes, 2, 32);
    CIUIC_RETURN_IF_ERROR(step(reps).status());
    std::vector<double> per_step;
    for (int i = 0; i < 5; ++i) {
      CIUIC_ASSIGN_OR_RETURN(double s, step(reps));
      per_step.push_back(s);
    }
    std::sort(per_step.begin(), per_step.end());
    char field[64];
    std::snprintf(field, sizeof(field), " %zu %.6g", bytes, 2.0 * static_cast<double>(bytes) / per_step[2] / 1e9);
    steps += field;
  }
  // beta: full slots streamed 0 -> 1, then an 8 B answer; a short warm-up
  // round first, then the median of five: a rate-limited link's burst
  // (tbf) lets the first stream after a pause through above the rate, and
  // a loopback stream is noisy both ways.
  // Out of DRAM: each chunk from the next part of a buffer far larger than
  // the caches, as a large collective's input is; the two interleaved.
  const size_t stream = kind == BackendKind::kShm ? e.stream_bytes : e.stream_bytes / 4;
  const size_t chunks = std::max<size_t>(16, stream / lo.slot_size);
  // Whole slots of a buffer of at least kDramBytes (two slots where slots
  // are larger); both sides send in the exchange.
  const size_t big_slots = std::max<size_t>(2, kDramBytes / lo.slot_size);
  std::vector<char> big(big_slots * lo.slot_size, 1);
  auto timed = [&](size_t n, bool dram) -> StatusOr<double> {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      if (role != 0) {
        CIUIC_RETURN_IF_ERROR(b.Recv());
        continue;
      }
      const char* from = dram ? big.data() + (i % big_slots) * lo.slot_size : src.data();
      CIUIC_RETURN_IF_ERROR(b.Send(from, lo.slot_size));
    }
    CIUIC_RETURN_IF_ERROR(role == 0 ? b.Recv() : b.Send(src.data(), 8));
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // A warm-up, then five rounds in cache and out of DRAM interleaved: the
  // median seconds of each.
  using Run = std::function<StatusOr<double>(size_t, bool)>;
  auto medians = [&](const Run& run) -> StatusOr<std::pair<double, double>> {
    CIUIC_RETURN_IF_ERROR(run(lo.nslots * 2, false).status());
    std::vector<double> cache, dram;
    for (int round = 0; round < 5; ++round) {
      CIUIC_ASSIGN_OR_RETURN(double s, run(chunks, false));
      CIUIC_ASSIGN_OR_RETURN(double d, run(chunks, true));
      cache.push_back(s);
      dram.push_back(d);
    }
    std::sort(cache.begin(), cache.end());
    std::sort(dram.begin(), dram.end());
    return std::make_pair(cache[cache.size() / 2], dram[dram.size() / 2]);
  };
  CIUIC_ASSIGN_OR_RETURN(const auto stream_s, medians(timed));
  const double seconds = stream_s.first, dram_seconds = stream_s.second;
  // exchange: both sides stream at once, as a ring's step does; the rate is
  // a rank's bytes sent and received together per second. Where a side's
  // cost differs between sending and receiving (tcp's sender runs more of
  // the stack than its receiver) the one-way stream shows only the slower.
  auto exchange = [&](size_t n, bool dram) -> StatusOr<double> {
    const auto t0 = Clock::now();
    size_t sent = 0, got = 0;
    Status st;
    CIUIC_RETURN_IF_ERROR(b.Wait(
        [&] {
          for (void* slot = nullptr; st.ok() && sent < n && (slot = b.link->AcquireSend()) != nullptr; ++sent) {
            kernels::CopyBytes(slot, dram ? big.data() + (sent % big_slots) * lo.slot_size : src.data(), lo.slot_size);
            st = b.link->CommitSend(lo.slot_size);
          }
          size_t len = 0;
          for (const void* in = nullptr; st.ok() && got < n && (in = b.link->PeekRecv(&len)) != nullptr; ++got) {
            // Into the one cached sink out of DRAM too: a DRAM-sized sink
            // (tried) took exchange_dram from ~27 to 16 GB/s near, while
            // the 2-rank rows at 16-64 MiB were over-predicted already
            // (1.1-1.4x): a reduction's output write is gamma's.
            if (copy_out) kernels::CopyBytes(sink.data(), in, len);
            st = b.link->ReleaseRecv();
          }
          return !st.ok() || (sent == n && got == n);
        },
        "the peer's chunks of the exchange"));
    if (!st.ok()) return st;
    CIUIC_RETURN_IF_ERROR(role == 0 ? b.Recv() : b.Send(src.data(), 8));
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  CIUIC_ASSIGN_OR_RETURN(const auto exchange_s, medians(exchange));
  const double exchanged = 2.0 * static_cast<double>(chunks * lo.slot_size);
  // The machine's CPU per byte: the exchange again with waits that sleep
  // (a spinning wait would count as busy), for at least half a second
  // (/proc/stat counts 10 ms ticks); rank 0 reads the machine's busy time
  // around it and sets the length, which both sides must share.
  double cpu_gbps = 0;
  if (machine_cpu) {
    // A side blocked in the store moves no bytes: its last writes first.
    CIUIC_RETURN_IF_ERROR(b.Wait([&] { return b.link->sends_in_flight() == 0; }, "the last write to complete"));
    const std::string key = prefix + "/link/cpu_chunks";
    size_t n = 0;
    if (role == 0) {
      const double per_side = exchanged / 2 / exchange_s.first;
      n = std::max(chunks, static_cast<size_t>(0.5 * per_side / static_cast<double>(lo.slot_size)) + 1);
      CIUIC_RETURN_IF_ERROR(store.Set(key, std::to_string(n)));
    } else {
      CIUIC_ASSIGN_OR_RETURN(std::string v, store.Get(key, timeout));
      n = std::strtoull(v.c_str(), nullptr, 10);
      CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/link/boot", BootId()));
    }
    const double busy0 = role == 0 ? MachineBusySeconds() : 0;
    size_t sent = 0, got = 0;
    while (sent < n || got < n) {
      CIUIC_ASSIGN_OR_RETURN(bool any, b.link->Progress());
      bool moved = false;
      for (void* slot = nullptr; sent < n && (slot = b.link->AcquireSend()) != nullptr; ++sent, moved = true) {
        kernels::CopyBytes(slot, src.data(), lo.slot_size);
        CIUIC_RETURN_IF_ERROR(b.link->CommitSend(lo.slot_size));
      }
      size_t len = 0;
      for (; got < n && b.link->PeekRecv(&len) != nullptr; ++got, moved = true) {
        CIUIC_RETURN_IF_ERROR(b.link->ReleaseRecv());
      }
      if (Clock::now() >= b.deadline) return DeadlineExceededError("timed out waiting for the peer's chunks");
      if (!any && !moved) b.backend->WaitForActivity(std::chrono::milliseconds(1));
    }
    CIUIC_RETURN_IF_ERROR(role == 0 ? b.Recv() : b.Send(src.data(), 8));
    if (role == 0) {
      const double busy = MachineBusySeconds() - busy0;
      CIUIC_ASSIGN_OR_RETURN(std::string peer_boot, store.Get(prefix + "/link/boot", timeout));
      // Both sides' bytes where the peer runs on this kernel's CPUs too.
      const double sides = !peer_boot.empty() && peer_boot == BootId() ? 2 : 1;
      if (busy0 >= 0 && busy > 0) cpu_gbps = sides * 2 * static_cast<double>(n * lo.slot_size) / busy / 1e9;
    }
  }
  CIUIC_RETURN_IF_ERROR(b.Wait([&] { return b.link->sends_in_flight() == 0; }, "the last write to complete"));
  // Neither side tears the link down while the other still uses it.
  CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/link/done/" + std::to_string(role), "1"));
  CIUIC_RETURN_IF_ERROR(store.Wait({prefix + "/link/done/0", prefix + "/link/done/1"}, timeout));
  if (role != 0) return std::string();
  CIUIC_ASSIGN_OR_RETURN(std::string peer_cpu, store.Get(prefix + "/link/cpu", timeout));
  const int mine = BoundCpu();
  const int pair_cores = mine >= 0 && peer_cpu == std::to_string(mine) ? 1 : 2;
  std::sort(one_way.begin(), one_way.end());
  char line[256];
  std::snprintf(line, sizeof(line), "link %s %.6g %.6g %zu %.6g %d %.6g %.6g %.6g", transport::BackendName(kind),
                one_way[one_way.size() / 2], static_cast<double>(chunks * lo.slot_size) / seconds / 1e9, lo.slot_size,
                static_cast<double>(chunks * lo.slot_size) / dram_seconds / 1e9, pair_cores,
                exchanged / exchange_s.first / 1e9, exchanged / exchange_s.second / 1e9,
                cpu_gbps);
  return std::string(line) + (steps.empty() ? "" : " steps" + steps);
}

// A forked pair: its own store client to the parent's store.
Status MeasureLink(int rank, const std::string& host, uint16_t port, const std::string& secret, const Config& config,
                   BackendKind kind, const Effort& e, const Reporter& out) {
  const auto timeout = std::chrono::milliseconds(config.timeout_ms);
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::TcpStoreClient> store,
                         transport::TcpStoreClient::Connect(host, port, secret, timeout));
  // The pair's two processes on one CPU: wait as a communicator whose
  // ranks outnumber their CPUs does, without spinning.
  const auto spin = AffinityCpus() == 1 ? std::chrono::microseconds(0) : transport::kDefaultSpin;
  CIUIC_ASSIGN_OR_RETURN(std::string line, MeasureLinkOver(*store, "tune", rank, "tune" + std::to_string(port), config,
                                                           kind, e, /*machine_cpu=*/false, spin));
  if (!line.empty()) out.Line(line);
  return Status::Ok();
}

// A "link ..." line as a backend line of the file (false: not one).
bool ParseLinkLine(const std::string& line, collectives::BackendTuning* bt, size_t* slot) {
  double alpha = 0, beta = 0, beta_dram = 0, exchange = 0, exchange_dram = 0, cpu = 0;
  int pair_cores = 0;
  char name[16];
  // The line is this tool's own (a child's or a rank's); a malformed one is
  // no result.
  int end = 0;
  // NOLINTNEXTLINE(cert-err34-c)
  if (std::sscanf(line.c_str(), "link %15s %lf %lf %zu %lf %d %lf %lf %lf%n", name, &alpha, &beta, slot, &beta_dram,
                  &pair_cores, &exchange, &exchange_dram, &cpu, &end) != 9 ||
      (pair_cores != 1 && pair_cores != 2)) {
    return false;
  }
  // Then " steps BYTES GBPS ...", the exchange-step curve: whole pairs of a
  // byte count above the last and a rate, or nothing.
  std::istringstream rest(line.substr(static_cast<size_t>(end)));
  std::vector<std::string> words;
  for (std::string w; rest >> w;) words.push_back(w);
  bt->exchange_steps.clear();
  if (!words.empty()) {
    if (words[0] != "steps" || words.size() < 3 || words.size() % 2 != 1) return false;
    std::vector<std::pair<size_t, double>> curve;
    for (size_t i = 1; i + 1 < words.size(); i += 2) {
      char* b_end = nullptr;
      char* g_end = nullptr;
      const unsigned long long bytes = std::strtoull(words[i].c_str(), &b_end, 10);
      const double gbps = std::strtod(words[i + 1].c_str(), &g_end);
      if (*b_end != '\0' || *g_end != '\0' || words[i][0] == '-' || bytes == 0 || !(gbps > 0) ||
          !std::isfinite(gbps) || (!curve.empty() && bytes <= curve.back().first)) {
        return false;
      }
      // Two decimals as the other rates, never rounded down to 0.
      curve.emplace_back(static_cast<size_t>(bytes), std::max(0.01, std::round(gbps * 100) / 100));
    }
    bt->exchange_steps = std::move(curve);
  }
  bt->alpha_us = std::round(alpha * 1000) / 1000;
  bt->pair_cores = pair_cores;
  bt->beta_gbps = std::round(beta * 100) / 100;
  bt->beta_dram_gbps = std::round(beta_dram * 100) / 100;
  bt->exchange_gbps = std::round(exchange * 100) / 100;
  bt->exchange_dram_gbps = std::round(exchange_dram * 100) / 100;
  if (cpu > 0) bt->cpu_gbps = std::round(cpu * 100) / 100;
  return true;
}

void PrintLink(const collectives::BackendTuning& bt, size_t slot) {
  std::printf("# %-5s%s alpha %.3f us (8 B ping-pong over a Link, median one way)  beta %.2f GB/s (%s chunks), "
              "%.2f GB/s out of DRAM; both ways at once %.2f GB/s sent + received (%.2f out of DRAM)%s\n",
              transport::BackendName(bt.backend), bt.between_hosts ? " between hosts" : "", *bt.alpha_us,
              *bt.beta_gbps, SizeText(slot).c_str(), bt.beta_dram_gbps.value_or(0), bt.exchange_gbps.value_or(0),
              bt.exchange_dram_gbps.value_or(0),
              bt.pair_cores == 1 ? "; the pair on one core" : "");
  if (bt.cpu_gbps) {
    std::printf("#       %.2f GB/s sent + received per second of the machine's CPU time\n", *bt.cpu_gbps);
  }
  if (!bt.exchange_steps.empty()) {
    std::printf("#       one step alone, both ways, sent + received:");
    for (const auto& [bytes, gbps] : bt.exchange_steps) std::printf(" %s %.2f GB/s", SizeText(bytes).c_str(), gbps);
    std::printf("\n");
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// The all-reduce sweep (every rank of a group).

// The all-reduce algorithms of the registry that run on `kind`.
std::vector<std::string> AlgorithmsOn(BackendKind kind) {
  std::vector<std::string> out;
  for (const collectives::AlgorithmInfo* e : collectives::EntriesFor(Collective::kAllReduce)) {
    if (e->RunsOn(kind)) out.push_back(e->name());
  }
  return out;
}

// Small integers: every sum over up to 64 ranks is exact in f32.
float Value(int rank, size_t i) { return static_cast<float>(static_cast<int>((i % 61 + 7 * rank) % 23) - 11); }

struct SweepArgs {
  std::vector<BackendKind> backends;
  std::vector<size_t> sizes;
  Effort effort;
  Config config;
};

// The slowest rank's value (every rank gets it).
StatusOr<double> MaxOverRanks(Communicator& comm, double v) {
  double out = 0;
  CIUIC_RETURN_IF_ERROR(comm.AllReduce(&v, &out, 1, DataType::kFloat64, ReduceOp::kMax));
  return out;
}

// Checks and times one size on `comm`; *report gets "bytes us wrong iters"
// (us: the slowest rank's mean per call, best batch; wrong: over all ranks).
Status TimeOneSize(Communicator& comm, const SweepArgs& a, size_t bytes, bool first, std::vector<float>& send,
                   std::vector<float>& recv, std::string* report) {
  const int rank = comm.rank(), n = comm.size();
  const size_t count = bytes / 4;
  for (size_t i = 0; i < count; ++i) send[i] = Value(rank, i);
  std::fill(recv.begin(), recv.begin() + static_cast<long>(count), -1.0f);
  CIUIC_RETURN_IF_ERROR(comm.AllReduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum));
  double wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float expect = 0;
    for (int r = 0; r < n; ++r) expect += Value(r, i);
    wrong += recv[i] != expect;
  }
  const Effort& e = a.effort;
  // The first size of a communicator warms up longer: its connections and
  // progress thread have just started (small sizes only: the count is fixed,
  // every rank runs the same number of calls).
  const int warmup = bytes > (8u << 20) ? 1 : (first && bytes <= (64u << 10) ? 20 : e.warmup);
  auto t0 = Clock::now();
  for (int w = 0; w < warmup; ++w) {
    CIUIC_RETURN_IF_ERROR(comm.AllReduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum));
  }
  CIUIC_ASSIGN_OR_RETURN(double per_call,
                         MaxOverRanks(comm, std::chrono::duration<double>(Clock::now() - t0).count() / warmup));
  // The same count on every rank: it comes from the slowest rank's time.
  const int iters = std::clamp(static_cast<int>(e.budget_s / std::max(per_call, 1e-7)), e.min_iters, e.max_iters);
  const int batches = std::min(e.batches, iters);
  double best = 1e30;
  for (int b = 0; b < batches; ++b) {
    const int k = iters / batches;
    CIUIC_RETURN_IF_ERROR(comm.Barrier());
    t0 = Clock::now();
    for (int it = 0; it < k; ++it) {
      CIUIC_RETURN_IF_ERROR(comm.AllReduce(send.data(), recv.data(), count, DataType::kFloat32, ReduceOp::kSum));
    }
    CIUIC_ASSIGN_OR_RETURN(double slowest,
                           MaxOverRanks(comm, std::chrono::duration<double>(Clock::now() - t0).count() / k));
    best = std::min(best, slowest);
  }
  double total_wrong = 0;
  CIUIC_RETURN_IF_ERROR(comm.AllReduce(&wrong, &total_wrong, 1, DataType::kFloat64, ReduceOp::kSum));
  char line[96];
  std::snprintf(line, sizeof(line), "%zu %.6g %.0f %d", bytes, best * 1e6, total_wrong, iters);
  *report = line;
  return Status::Ok();
}

Status Sweep(int rank, int n, const std::string& host, uint16_t port, const std::string& secret, const SweepArgs& a,
             const Reporter& out) {
  // Touched once up front: first-touch faults cost ~12 us per 4 KiB page.
  std::vector<float> send(a.sizes.back() / 4 + 1, 1.0f), recv(a.sizes.back() / 4 + 1, 2.0f);
  for (BackendKind kind : a.backends) {
    for (const std::string& algo : AlgorithmsOn(kind)) {
      Config c = BackendConfig(a.config, kind);
      CIUIC_RETURN_IF_ERROR(c.Set("CIUIC_ALGO", algo));
      const std::string what = std::string(transport::BackendName(kind)) + " " + std::to_string(n) + " " + algo;
      const auto t0 = Clock::now();
      StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::CreateTcp(rank, n, host, port, /*external=*/true, secret, c);
      CIUIC_RETURN_IF_ERROR(comm.status());
      const collectives::AlgorithmInfo* entry = nullptr;
      if (StatusOr<collectives::Algorithm> id = collectives::ParseAlgorithm(Collective::kAllReduce, algo); id.ok()) {
        entry = collectives::FindEntry(Collective::kAllReduce, *id);
      }
      for (size_t bytes : a.sizes) {
        if (entry != nullptr && entry->gathers) {
          // Sizes whose gathered scratch the communicator would refuse
          // (CIUIC_SCRATCH_MAX): the rest of this algorithm's sweep is
          // skipped, as every rank computes alike.
          collectives::CollectiveArgs args;
          args.nranks = n;
          args.count = bytes / 4;
          StatusOr<collectives::Schedule> s0 = collectives::MakeSchedule(entry->id, args);
          CIUIC_RETURN_IF_ERROR(s0.status());
          const size_t limit = collectives::ScratchLimitBytes(bytes, c.scratch_max_bytes);
          if (s0->scratch_count * 4 > limit) {
            if (rank == 0) {
              out.Line("skip " + what + " from " + std::to_string(bytes) + " B: its scratch (" +
                       std::to_string(s0->scratch_count * 4) + " B, every rank's vector) is over " +
                       std::to_string(limit) + " B (CIUIC_SCRATCH_MAX)");
            }
            break;
          }
        }
        std::string report;
        Status s = TimeOneSize(**comm, a, bytes, bytes == a.sizes.front(), send, recv, &report);
        if (!s.ok()) return Status(s.code(), what + " at " + std::to_string(bytes) + " B: " + s.message());
        if (rank == 0) out.Line("run " + what + " " + report);
      }
      if (rank == 0) {
        char line[64];
        std::snprintf(line, sizeof(line), "done %s %.1f", what.c_str(),
                      std::chrono::duration<double>(Clock::now() - t0).count());
        out.Line(line);
      }
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Analysis (parent).

struct Point {
  double us = 0;
  double wrong = 0;
};
// [backend][nranks][algorithm][bytes]
using Results = std::map<BackendKind, std::map<int, std::map<std::string, std::map<size_t, Point>>>>;

// The fastest algorithm at `bytes` and its time; "" when none ran there.
std::pair<std::string, double> Fastest(const std::map<std::string, std::map<size_t, Point>>& by_algo, size_t bytes) {
  std::pair<std::string, double> best{"", 0};
  for (const auto& [algo, points] : by_algo) {
    auto it = points.find(bytes);
    if (it == points.end()) continue;
    if (best.first.empty() || it->second.us < best.second) best = {algo, it->second.us};
  }
  return best;
}

// Whether `challenger` beats `current` at `bytes` by more than the
// hysteresis (or `current` did not run there).
bool Beats(const std::map<std::string, std::map<size_t, Point>>& by_algo, const std::string& challenger,
           const std::string& current, size_t bytes) {
  auto c = by_algo.at(challenger).find(bytes);
  auto k = by_algo.at(current).find(bytes);
  if (c == by_algo.at(challenger).end()) return false;
  return k == by_algo.at(current).end() || k->second.us > c->second.us * kHysteresis;
}

// The rules for one (backend, nranks): the fastest algorithm per size,
// switching only where the new winner beats the current one by more than
// kHysteresis, at that size and at the next one too (a one-size blip is
// noise; the last size needs no confirmation).
std::vector<collectives::TuningRule> DeriveRules(BackendKind kind, int n,
                                                 const std::map<std::string, std::map<size_t, Point>>& by_algo,
                                                 const std::vector<size_t>& sizes) {
  std::vector<collectives::TuningRule> rules;
  std::string current;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string best = Fastest(by_algo, sizes[i]).first;
    if (best.empty() || best == current) continue;
    if (!current.empty()) {
      if (!Beats(by_algo, best, current, sizes[i])) continue;
      if (i + 1 < sizes.size() && !Beats(by_algo, best, current, sizes[i + 1])) continue;
    }
    collectives::TuningRule r;
    r.collective = Collective::kAllReduce;
    r.backend = kind;
    r.nranks = n;
    r.nhosts = 1;  // forked on this machine: says nothing of a job across hosts
    r.from_bytes = rules.empty() ? 0 : sizes[i];
    r.algorithm = best;
    rules.push_back(r);
    current = best;
  }
  return rules;
}

// Prints the table of one (backend, nranks): measured and predicted time of
// every algorithm per size, the fastest, and the model's choice.
void PrintTable(BackendKind kind, int n, const std::map<std::string, std::map<size_t, Point>>& by_algo,
                const std::vector<size_t>& sizes, const collectives::CostParams& params) {
  collectives::SelectionContext ctx;
  ctx.backend = kind;
  ctx.params = params;
  ctx.host_of = params.host_of;  // several hosts: the two-level model, hier a candidate
  ctx.limits.slot_bytes = params.chunk_bytes;
  collectives::SelectionCache cache;
  auto shape = [&](size_t bytes) {
    collectives::CallShape call;
    call.collective = Collective::kAllReduce;
    call.count = bytes / 4;
    call.bytes = call.input_bytes = bytes;
    call.elem_size = 4;
    call.nranks = n;
    call.backend = kind;
    return call;
  };
  std::vector<std::string> algos;
  for (const std::string& a : AlgorithmsOn(kind)) {
    if (by_algo.count(a)) algos.push_back(a);
  }
  std::printf("#\n# allreduce on %s, %d ranks (f32 sum, out of place): us per call, measured (model)\n",
              transport::BackendName(kind), n);
  std::printf("#%11s", "size");
  for (const std::string& a : algos) std::printf(" %21s", a.c_str());
  std::printf("  %-12s %-12s %6s\n", "fastest", "model", "#wrong");
  int agree = 0, rows = 0;
  for (size_t bytes : sizes) {
    std::printf("%12zu", bytes);
    double wrong = 0;
    for (const std::string& a : algos) {
      auto it = by_algo.at(a).find(bytes);
      if (it == by_algo.at(a).end()) {
        std::printf(" %21s", "-");
        continue;
      }
      wrong += it->second.wrong;
      StatusOr<collectives::Algorithm> algo = collectives::ParseAlgorithm(Collective::kAllReduce, a);
      StatusOr<double> pred = algo.ok() ? collectives::PredictCall(*collectives::FindEntry(Collective::kAllReduce, *algo),
                                                                   shape(bytes), params, ctx.limits)
                                        : StatusOr<double>(algo.status());
      char model[16] = "n/a";
      if (pred.ok()) std::snprintf(model, sizeof(model), "%.1f", *pred * 1e6);
      std::printf(" %10.1f (%8s)", it->second.us, model);
    }
    StatusOr<collectives::Selection> sel =
        collectives::Select(shape(bytes), DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
    const std::string model = sel.ok() ? sel->name() : "?";
    std::printf("  %-12s %-12s %6.0f\n", Fastest(by_algo, bytes).first.c_str(), model.c_str(), wrong);
    ++rows;
    agree += model == Fastest(by_algo, bytes).first;
  }
  std::printf("# the model picks the fastest measured algorithm at %d of %d sizes\n", agree, rows);
}

collectives::CostParams ModelParams(const collectives::Tuning& tuning, BackendKind kind, const Config& config,
                                    size_t chunk_bytes,
                                    collectives::TuningLevel level = collectives::TuningLevel::kOneMachine) {
  collectives::CostParams p = collectives::DefaultCostParams(kind);
  collectives::ApplyTuning(tuning, kind, &p, DataType::kFloat32, ReduceOp::kSum, level);
  p.chunk_bytes = chunk_bytes;
  p.nchannels = config.nchannels;
  p.radix = config.knomial_radix;
  p.aggregation = config.pat_aggregation;
  p.elem_size = 4;
  return p;
}

// The last-level cache that `cores` cores have between them (the instances
// covering them), as topology discovery sees it; 0 when it found no caches.
// Working sets within it do not contend for DRAM (memory_shared's beyond).
// Counts instances as ceil(cores / PUs per instance): right where CPUs
// 0..cores-1 fill instances in order, as SharedDramCopy pins them.
size_t SharedCacheBytes(int cores) {
  StatusOr<topology::Topology> t = topology::DiscoverLive();
  if (!t.ok() || !t->caches.measured || t->caches.llc == 0) return 0;
  const int per = t->caches.llc_cpus;
  const size_t instances = per > 0 && per < cores ? static_cast<size_t>((cores + per - 1) / per) : 1;
  return t->caches.llc * instances;
}

// MeasureKernels, printed, with a gamma line per dtype added to `tuning`.
StatusOr<KernelRates> MeasureGammas(const kernels::Reducer& reducer, const Effort& e, collectives::Tuning* tuning) {
  CIUIC_ASSIGN_OR_RETURN(KernelRates rates, MeasureKernels(reducer, e));
  std::printf("# gamma (dst = a + b, %s result, GB/s of result):", SizeText(kKernelBytes).c_str());
  for (const auto& [t, gbps] : rates.reduce_gbps) {
    std::printf(" %s %.1f", DataTypeName(t), gbps);
    collectives::GammaTuning g;
    g.dtype = t;
    g.op = ReduceOp::kSum;
    g.gbps = std::round(gbps * 100) / 100;
    // Out of DRAM every dtype streams the same bytes: f32's rate, unless
    // the kernel is slower than that in cache already.
    g.dram_gbps = std::round(std::min(gbps, rates.sum_dram_gbps) * 100) / 100;
    tuning->gammas.push_back(g);
  }
  tuning->memory = rates.memory;
  if (rates.shared_cores >= 2) {
    tuning->memory_shared_cores = rates.shared_cores;
    tuning->memory_shared_gbps = std::round(rates.shared_copy_gbps * 100) / 100;
    tuning->memory_shared_beyond = SharedCacheBytes(rates.shared_cores);
  }
  std::printf("\n# copy %.1f GB/s (%s)  from DRAM: copy %.1f GB/s, f32 sum %.1f GB/s (%s)\n# copy by working set:",
              rates.copy_gbps, SizeText(kKernelBytes).c_str(), rates.copy_dram_gbps, rates.sum_dram_gbps,
              SizeText(kDramBytes).c_str());
  for (const auto& [bytes, gbps] : rates.memory) std::printf(" %s %.1f", SizeText(bytes).c_str(), gbps);
  std::printf("\n");
  if (rates.shared_cores >= 2) {
    std::printf("# copy from DRAM on %d cores at once: %.1f GB/s each; their shared cache %s\n", rates.shared_cores,
                rates.shared_copy_gbps,
                tuning->memory_shared_beyond != 0 ? SizeText(tuning->memory_shared_beyond).c_str() : "unknown");
  }
  return rates;
}

Status WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!(f << text) || !f.flush()) return UnavailableError("-o " + path + ": cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    return UnavailableError("-o " + path + ": " + err);
  }
  return Status::Ok();
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", kProg, what.c_str());
  return 1;
}

// The end of a run: the results check, then the file and its rules
// (`where`: what the final line adds about the file).
int WriteResult(const Options& o, const collectives::Tuning& tuning, double wrong, Clock::time_point started,
                const std::string& where) {
  std::printf("#\n# Out of bounds values : %.0f %s\n", wrong, wrong > 0 ? "FAILED" : "OK");
  if (wrong > 0) return Fail("wrong all-reduce results (see #wrong above); no tuning file written");
  if (Status s = collectives::CheckTuning(tuning); !s.ok()) return Fail("internal: " + s.ToString());
  if (Status s = WriteFile(o.output, collectives::FormatTuning(tuning)); !s.ok()) return Fail(s.message());
  std::printf("# rules:\n");
  for (const collectives::TuningRule& r : tuning.rules) std::printf("#   %s\n", collectives::FormatRule(r).c_str());
  std::printf("# wrote %s (%zu rules) in %.0f s%s%s; use it with CIUIC_TUNING_FILE=%s\n", o.output.c_str(),
              tuning.rules.size(), std::chrono::duration<double>(Clock::now() - started).count(),
              where.empty() ? "" : " ", where.c_str(), o.output.c_str());
  return 0;
}

// Every rank publishes what it measures (sizes, effort); a rank started
// with other flags than rank 0 fails on every rank, naming both.
Status AgreeOnFlags(collectives::CommImpl& impl, const Options& o) {
  transport::Store& store = *impl.store();
  const auto timeout = std::chrono::milliseconds(impl.config().timeout_ms);
  const std::string key = impl.prefix() + "/tune/flags/";
  CIUIC_RETURN_IF_ERROR(store.Set(key + std::to_string(impl.rank()), o.Canonical()));
  CIUIC_ASSIGN_OR_RETURN(std::string first, store.Get(key + "0", timeout));
  for (int r = 1; r < impl.size(); ++r) {
    CIUIC_ASSIGN_OR_RETURN(std::string theirs, store.Get(key + std::to_string(r), timeout));
    if (theirs != first) {
      return InvalidArgumentError("rank " + std::to_string(r) + " was started with " + LogSafe(theirs) +
                                  ", rank 0 with " + LogSafe(first) + ": every rank must measure the same sizes");
    }
  }
  return Status::Ok();
}

// The pairs whose links are measured: the two lowest ranks of the first
// host with two or more (shm), and rank 0 with the lowest rank of another
// host (the network). -1: no such pair.
struct LevelPairs {
  int intra_a = -1, intra_b = -1;
  int net_b = -1;  // with rank 0
};

LevelPairs PairsOf(const std::vector<int>& host_of) {
  LevelPairs p;
  std::map<int, std::vector<int>> by_host;
  for (size_t r = 0; r < host_of.size(); ++r) by_host[host_of[r]].push_back(static_cast<int>(r));
  int first_two = -1;
  for (size_t r = 0; r < host_of.size() && first_two < 0; ++r) {
    if (by_host[host_of[r]].size() >= 2) first_two = host_of[r];
  }
  if (first_two >= 0) {
    p.intra_a = by_host[first_two][0];
    p.intra_b = by_host[first_two][1];
  }
  for (size_t r = 1; r < host_of.size(); ++r) {
    if (host_of[r] != host_of[0]) {
      p.net_b = static_cast<int>(r);
      break;
    }
  }
  return p;
}

// Every rank of `size` arrives at `key`; returns once all have. Waits in the
// store (a blocked socket), not on a core.
Status StoreBarrier(transport::Store& store, const std::string& key, int size, std::chrono::milliseconds timeout) {
  CIUIC_ASSIGN_OR_RETURN(int64_t arrived, store.Add(key + "/arrived", 1));
  if (arrived == size) CIUIC_RETURN_IF_ERROR(store.Set(key + "/all", "1"));
  return store.Wait({key + "/all"}, timeout);
}

// Every rank: measures the links its pairs ask of it, one level at a time
// (the others wait at a barrier, not on the cores); rank 0 returns the
// backend lines (shm, the network's between_hosts, and tcp inside a host
// where tcp is the network), the others none.
// Under a forced CIUIC_TRANSPORT the pairs inside a host use that
// transport too, so that is what is measured there (a plain line).
StatusOr<std::vector<collectives::BackendTuning>> MeasureLevels(Communicator& comm, const Config& base,
                                                                const Effort& e) {
  collectives::CommImpl& impl = collectives::CommImpl::Of(comm);
  const int rank = impl.rank();
  const std::vector<int>& host_of = impl.host_of();
  const LevelPairs pairs = PairsOf(host_of);
  const auto timeout = std::chrono::milliseconds(impl.config().timeout_ms);
  transport::Store& store = *impl.store();
  struct Level {
    int a, b;
    BackendKind kind;
    bool between_hosts;
    const char* name;  // in store keys
  };
  const BackendKind inside = impl.transport_forced() ? impl.transport() : BackendKind::kShm;
  std::vector<Level> levels = {{pairs.intra_a, pairs.intra_b, inside, false, "inside"},
                               {0, pairs.net_b, impl.transport(), true, "network"}};
  // tcp between two ranks of one host too: its rate there is what the CPU
  // pays per byte of tcp, apart from the network's links (a plain line, as
  // on one machine; ciuic-sim --cpu-cores charges the network's bytes so).
  if (inside == BackendKind::kShm && impl.transport() == BackendKind::kTcp && pairs.net_b >= 0) {
    levels.push_back({pairs.intra_a, pairs.intra_b, BackendKind::kTcp, false, "inside-tcp"});
  }
  std::vector<collectives::BackendTuning> out;
  for (const Level& l : levels) {
    if (l.b < 0) continue;  // no such pair in this job
    const std::string prefix = impl.prefix() + "/tune/level/" + l.name;
    if (rank == l.a || rank == l.b) {
      const int role = rank == l.a ? 0 : 1;
      StatusOr<std::string> line =
          MeasureLinkOver(store, prefix, role, impl.job_id() + "-tune-" + l.name, base, l.kind, e, l.between_hosts,
                          impl.wait_spin());
      if (!line.ok()) {
        return Status(line.status().code(), std::string(transport::BackendName(l.kind)) +
                                                (l.between_hosts ? " link between hosts" : " link") + " of ranks " +
                                                std::to_string(l.a) + " and " + std::to_string(l.b) + ": " +
                                                line.status().message());
      }
      if (role == 0) CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/line", *line));
    }
    if (rank == 0) {
      CIUIC_ASSIGN_OR_RETURN(std::string line, store.Get(prefix + "/line", timeout));
      collectives::BackendTuning bt;
      bt.backend = l.kind;
      bt.between_hosts = l.between_hosts;
      size_t slot = 0;
      if (!ParseLinkLine(line, &bt, &slot)) return InternalError("a malformed link result: " + LogSafe(line));
      PrintLink(bt, slot);
      out.push_back(bt);
    }
    // One level at a time: two pairs on the same cores would measure each
    // other. The others wait in the store, off the cores.
    CIUIC_RETURN_IF_ERROR(StoreBarrier(store, prefix + "/barrier", impl.size(), timeout));
  }
  return out;
}

// Launched (ciuic-run, mpirun, srun): the job's own communicator decides
// what each pair uses, and every all-reduce algorithm that runs on its
// collective kind is swept on communicators of the same ranks (each forced
// to it), so rules come out for this rank count and host count. Rank 0
// prints and writes; the others only take part.
int RunLaunched(const Options& o, const Config& config, const kernels::Reducer& reducer, const Effort& e,
                const std::vector<size_t>& sizes, const transport::JobInfo& job) {
  if (o.ranks_given || o.backends_given) {
    std::fprintf(stderr, "%s: %s: the launcher sets the ranks (%d) and the job's hosts decide the transports\n",
                 kProg, o.ranks_given ? "-n" : "-t", job.world_size);
    return 2;
  }
  Config base = config;
  base.tuning_file.clear();  // measure the library's own choices
  StatusOr<std::unique_ptr<Communicator>> parent = Communicator::CreateFromEnv(base);
  if (!parent.ok()) return Fail("the job's communicator: " + parent.status().ToString());
  collectives::CommImpl& impl = collectives::CommImpl::Of(**parent);
  const int rank = (*parent)->rank(), n = (*parent)->size();
  const BackendKind kind = impl.transport();
  int nhosts = 0;
  for (int h : impl.host_of()) nhosts = std::max(nhosts, h + 1);
  nhosts = std::max(nhosts, 1);
  const bool lead = rank == 0;
  if (lead) {
    std::printf("# ciuic-tune  version %s  git %s  %s  (launched: %s)\n", Version(), GitRevision(), UtcNow().c_str(),
                job.launcher.c_str());
    std::printf("# host %s  cpu %s  simd %s\n", HostName().c_str(), CpuName().c_str(), reducer.target_name());
    std::printf("# allreduce on %s (%s), %d ranks on %d host%s, sizes %s..%s x%zu\n", (*parent)->job_transport_name().c_str(),
                transport::BackendName(kind), n, nhosts, nhosts == 1 ? "" : "s", SizeText(sizes.front()).c_str(),
                SizeText(sizes.back()).c_str(), e.factor);
    std::fflush(stdout);
  }
  if (Status s = AgreeOnFlags(impl, o); !s.ok()) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProg, rank, s.message().c_str());
    return 2;
  }
  collectives::Tuning tuning;
  // Both levels: shm between two ranks of one host, the network between
  // rank 0 and a rank on another host, and tcp inside a host where tcp is
  // the network (rank 0 gets the lines via the store).
  StatusOr<std::vector<collectives::BackendTuning>> links = MeasureLevels(**parent, base, e);
  if (!links.ok()) return Fail("rank " + std::to_string(rank) + ": " + links.status().ToString());
  if (lead) {
    StatusOr<KernelRates> rates = MeasureGammas(reducer, e, &tuning);
    if (!rates.ok()) return Fail("kernels: " + rates.status().ToString());
    for (collectives::BackendTuning bt : *links) {
      bt.copy_gbps = std::round(rates->copy_gbps * 100) / 100;
      bt.copy_dram_gbps = std::round(rates->copy_dram_gbps * 100) / 100;
      tuning.backends.push_back(bt);
    }
    std::fflush(stdout);
  }
  std::vector<std::string> algos;
  for (const collectives::AlgorithmInfo* a : collectives::EntriesFor(Collective::kAllReduce)) {
    if (!a->RunsOn(kind) || (a->needs_hosts && nhosts < 2)) continue;
    if (kind != BackendKind::kShm && a->kind != collectives::AlgorithmKind::kSchedule) continue;
    algos.push_back(a->name());
  }
  std::vector<float> send(sizes.back() / 4 + 1, 1.0f), recv(sizes.back() / 4 + 1, 2.0f);
  std::map<std::string, std::map<size_t, Point>> by_algo;
  const auto started = Clock::now();
  SweepArgs args{{kind}, sizes, e, base};
  for (const std::string& algo : algos) {
    Config c = base;
    if (Status s = c.Set("CIUIC_ALGO", "allreduce:" + algo); !s.ok()) return Fail(s.ToString());
    StatusOr<std::unique_ptr<Communicator>> comm =
        Communicator::CreateWithStore(rank, n, impl.store(), c, impl.prefix() + "/tune/" + algo);
    if (!comm.ok()) return Fail("allreduce " + algo + ": " + comm.status().ToString());
    const auto t0 = Clock::now();
    for (size_t bytes : sizes) {
      std::string report;
      Status s = TimeOneSize(**comm, args, bytes, bytes == sizes.front(), send, recv, &report);
      if (!s.ok()) return Fail("allreduce " + algo + " at " + std::to_string(bytes) + " B: " + s.ToString());
      Point p;
      size_t b = 0;
      std::istringstream in(report);
      in >> b >> p.us >> p.wrong;
      by_algo[algo][bytes] = p;
    }
    if (lead) {
      std::printf("#   %-12s %zu sizes in %.1f s\n", algo.c_str(), sizes.size(),
                  std::chrono::duration<double>(Clock::now() - t0).count());
      std::fflush(stdout);
    }
  }
  // Every rank waits here: rank 0 may serve the store the others still read.
  if (Status s = (*parent)->Barrier(); !s.ok()) return Fail("the final barrier: " + s.ToString());
  if (!lead) return 0;

  tuning.origin = o.output;
  tuning.meta = {{"host", MetaText(HostName())},
                 {"hosts", std::to_string(nhosts)},
                 {"date", UtcNow()},
                 {"git", MetaText(GitRevision())},
                 {"version", MetaText(Version())},
                 {"launcher", MetaText(job.launcher)},
                 {"transports", MetaText((*parent)->job_transport_name())},
                 {"ranks", std::to_string(n)},
                 {"command", MetaText(o.command)},
                 {collectives::kShmExchangeMetaKey, collectives::kShmExchangeCopiesReceived}};
  // The parameters a communicator of this job would take from the file.
  const StatusOr<transport::LinkOptions> link = transport::LinkOptions::FromConfig(base);
  collectives::CostParams params =
      ModelParams(tuning, kind, base, link.ok() ? link->slot_size : collectives::DefaultCostParams(kind).chunk_bytes,
                  nhosts > 1 ? collectives::TuningLevel::kBetweenHosts : collectives::TuningLevel::kOneMachine);
  params.cpu_cores = impl.selection_cpu_cores();
  // Two levels only where the pairs inside a host use shm (as CommImpl).
  if (nhosts > 1 && !impl.transport_forced()) {
    collectives::CostParams shm = collectives::DefaultCostParams(BackendKind::kShm);
    collectives::ApplyTuning(tuning, BackendKind::kShm, &shm);
    params.host_of = impl.host_of();
    collectives::TakeIntraFrom(shm, &params);
  }
  PrintTable(kind, n, by_algo, sizes, params);
  double wrong = 0;
  for (const auto& [algo, points] : by_algo) {
    for (const auto& [bytes, p] : points) wrong += p.wrong;
  }
  for (collectives::TuningRule r : DeriveRules(kind, n, by_algo, sizes)) {
    r.nhosts = nhosts;
    tuning.rules.push_back(r);
  }
  return WriteResult(o, tuning, wrong, started,
                     "on rank 0's host; every rank must load the same file (copied to each host)");
}

int Main(int argc, char** argv) {
  // A rank that died early closes its pipe: writing its port must be an
  // error (EPIPE), not a signal that ends the tool.
  signal(SIGPIPE, SIG_IGN);
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  if (!o.check.empty()) {
    StatusOr<collectives::Tuning> t = collectives::LoadTuningFile(o.check);
    if (!t.ok()) return Fail(t.status().message());
    std::fputs(collectives::FormatTuning(*t).c_str(), stdout);
    return 0;
  }
  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, config.status().ToString().c_str());
    return 2;
  }
  StatusOr<transport::LinkOptions> link_options = transport::LinkOptions::FromConfig(*config);
  if (!link_options.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, link_options.status().ToString().c_str());
    return 2;
  }
  StatusOr<kernels::Reducer> reducer = kernels::Reducer::FromEnv();
  if (!reducer.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, reducer.status().ToString().c_str());
    return 2;
  }
  const Effort e = EffortFor(o.quick);
  const std::vector<size_t> sizes = Sizes(o, e);
  // Started by a launcher as one of several ranks: tune that job.
  StatusOr<transport::JobInfo> job = transport::DiscoverJob(*config);
  if (!job.ok()) return Fail(job.status().ToString());
  if (job->launcher != "none" && job->world_size > 1) return RunLaunched(o, *config, *reducer, e, sizes, *job);

  // Transports: as asked (each must be usable), or shm, tcp and verbs where usable.
  transport::BackendOptions probe;
  probe.world_size = 2;
  probe.job_id = "tune-probe";
  std::vector<BackendKind> backends = o.backends;
  std::string verbs_note;
  if (backends.empty()) {
    backends = {BackendKind::kShm, BackendKind::kTcp};
    probe.config = BackendConfig(*config, BackendKind::kVerbs);
    std::string why;
    if (transport::BackendAvailable(BackendKind::kVerbs, probe, &why)) backends.push_back(BackendKind::kVerbs);
    else verbs_note = "verbs skipped: " + why;
  }
  for (BackendKind k : backends) {
    probe.config = BackendConfig(*config, k);
    std::string why;
    if (!transport::BackendAvailable(k, probe, &why)) {
      return Fail(std::string("-t ") + transport::BackendName(k) + ": not usable here: " + why);
    }
  }
  std::vector<std::string> backend_names, rank_names;
  for (BackendKind k : backends) backend_names.push_back(transport::BackendName(k));
  for (int n : o.ranks) rank_names.push_back(std::to_string(n));

  const auto started = Clock::now();
  const std::string host = HostName(), cpu = CpuName(), date = UtcNow();
  std::printf("# ciuic-tune  version %s  git %s  %s\n", Version(), GitRevision(), date.c_str());
  std::printf("# host %s  cpu %s  simd %s\n", host.c_str(), cpu.c_str(), reducer->target_name());
  std::printf("# ranks %s  transports %s  sizes %s..%s x%zu  chunk %s  channels %d%s\n", Join(rank_names, ",").c_str(),
              Join(backend_names, ",").c_str(), SizeText(sizes.front()).c_str(), SizeText(sizes.back()).c_str(),
              e.factor, SizeText(link_options->slot_size).c_str(), config->nchannels, o.quick ? "  (quick)" : "");
  if (!verbs_note.empty()) std::printf("# %s\n", verbs_note.c_str());
  for (const KnobDescription& k : DescribeKnobs(*config)) {
    if (k.source != "default") std::printf("# %s=%s\n", k.name.c_str(), k.value.c_str());
  }
  std::fflush(stdout);

  collectives::Tuning tuning;
  tuning.origin = o.output;
  // "hosts 1": measured on one machine (tcp over loopback), so a job across
  // hosts keeps the defaults for its network and skips these rules.
  tuning.meta = {{"host", MetaText(host)},
                 {"hosts", "1"},
                 {"date", date},
                 {"git", MetaText(GitRevision())},
                 {"version", MetaText(Version())},
                 {"cpu", MetaText(cpu)},
                 {"simd", MetaText(reducer->target_name())},
                 {"ranks", Join(rank_names, ",")},
                 {"transports", Join(backend_names, ",")},
                 {"chunk_bytes", std::to_string(link_options->slot_size)},
                 {"nchannels", std::to_string(config->nchannels)},
                 {"command", MetaText(o.command)},
                 {collectives::kShmExchangeMetaKey, collectives::kShmExchangeCopiesReceived}};

  // gamma and copy.
  StatusOr<KernelRates> rates = MeasureGammas(*reducer, e, &tuning);
  if (!rates.ok()) return Fail("kernels: " + rates.status().ToString());
  std::fflush(stdout);

  const auto limit = std::chrono::seconds(std::max<int64_t>(900, config->timeout_ms / 1000 + 60));
  // alpha and beta per backend.
  for (BackendKind kind : backends) {
    const Config c = BackendConfig(*config, kind);
    collectives::BackendTuning bt;
    bt.backend = kind;
    bt.copy_gbps = std::round(rates->copy_gbps * 100) / 100;
    bt.copy_dram_gbps = std::round(rates->copy_dram_gbps * 100) / 100;
    Status s = RunRanks(
        2,
        [&](int rank, const std::string& h, uint16_t port, const std::string& secret, const Reporter& out) {
          return MeasureLink(rank, h, port, secret, c, kind, e, out);
        },
        [&](int, const std::string& line) {
          size_t slot = 0;
          if (ParseLinkLine(line, &bt, &slot)) PrintLink(bt, slot);
        },
        limit);
    if (!s.ok()) return Fail(std::string(transport::BackendName(kind)) + " link test: " + s.message());
    if (!bt.alpha_us || !bt.beta_gbps) return Fail(std::string(transport::BackendName(kind)) + " link test: no result");
    tuning.backends.push_back(bt);
  }

  // The all-reduce sweep, one group of forked ranks per rank count.
  Results results;
  SweepArgs args{backends, sizes, e, *config};
  for (int n : o.ranks) {
    std::printf("# allreduce sweep, %d ranks: %s\n", n, Join(backend_names, ", ").c_str());
    std::fflush(stdout);
    Status s = RunRanks(
        n,
        [&](int rank, const std::string& h, uint16_t port, const std::string& secret, const Reporter& out) {
          return Sweep(rank, n, h, port, secret, args, out);
        },
        [&](int, const std::string& line) {
          std::istringstream in(line);
          std::string kw, backend, algo;
          int ranks = 0;
          in >> kw >> backend >> ranks >> algo;
          StatusOr<BackendKind> kind = transport::ParseBackendKind(backend);
          if (!kind.ok()) return;
          if (kw == "run") {
            size_t bytes = 0;
            Point p;
            in >> bytes >> p.us >> p.wrong;
            results[*kind][ranks][algo][bytes] = p;
          } else if (kw == "skip") {
            std::string why;
            std::getline(in, why);
            const size_t text = why.find_first_not_of(' ');
            std::printf("#   %s %d ranks %s: skipped (%s)\n", backend.c_str(), ranks, algo.c_str(),
                        text == std::string::npos ? "" : why.c_str() + text);
          } else if (kw == "done") {
            double secs = 0;
            in >> secs;
            std::printf("#   %s %d ranks %-12s %zu sizes in %.1f s\n", backend.c_str(), ranks, algo.c_str(),
                        results[*kind][ranks][algo].size(), secs);
          }
          std::fflush(stdout);
        },
        limit);
    if (!s.ok()) return Fail(std::to_string(n) + "-rank sweep: " + s.message());
  }

  // Tables, checks and rules.
  double wrong = 0;
  for (BackendKind kind : backends) {
    collectives::CostParams params = ModelParams(tuning, kind, *config, link_options->slot_size);
    for (int n : o.ranks) {
      // As a communicator of n ranks on this machine costs them (CommImpl):
      // on its CPUs where they do not outnumber them.
      const int cpus = AffinityCpus();
      params.cpu_cores = kind != BackendKind::kVerbs && cpus >= n ? cpus : 0;
      const auto& by_algo = results[kind][n];
      if (by_algo.empty()) return Fail(std::string("no results for ") + transport::BackendName(kind));
      PrintTable(kind, n, by_algo, sizes, params);
      for (const auto& [algo, points] : by_algo) {
        for (const auto& [bytes, p] : points) wrong += p.wrong;
      }
      for (const collectives::TuningRule& r : DeriveRules(kind, n, by_algo, sizes)) tuning.rules.push_back(r);
    }
  }
  return WriteResult(o, tuning, wrong, started, "");
}

}  // namespace
}  // namespace ciuic::tune

int main(int argc, char** argv) { return ciuic::tune::Main(argc, argv); }
