// transport_perf: bandwidth and latency of ciuic's data transports (shm, tcp,
// verbs) between two ranks, in the manner of perftest's ib_write_bw and
// ib_write_lat, over the Connection interface of transport/bootstrap.h.
//
//   bandwidth  rank 0 streams one-sided writes (PostWrite with an immediate)
//              of S bytes into one registered region of rank 1, keeping W
//              writes outstanding; rank 1 counts the kWriteReceived
//              completions and answers with a message after the last one.
//              BW_avg = n*S / (first timed post .. that answer); BW_peak =
//              the best rate over L consecutive writes, post of the first
//              to completion of the last, L = max(W, n/10, 8 MiB / S).
//              memcpy[GB/s] copies S bytes between two private buffers of
//              rank 0 in the same run, before and after the backends of
//              that size, the faster kept (the yardstick of the shm goal).
//   latency    ping-pong of S-byte writes: rank 0 writes, rank 1 writes back
//              when the write arrives; both busy-poll; one way = RTT / 2.
//
// Every test checks its data: the writer's source carries a pattern derived
// from the size and direction, the receiver poisons its region first and
// counts the bytes that differ after the last iteration (#wrong).
//
// Ranks: by default this process forks rank 1 and the two meet through a
// FileStore in a fresh mkdtemp directory (the parent is rank 0 and prints).
// Under a launcher (CIUIC_RANK / CIUIC_WORLD_SIZE, Open MPI, Slurm, PMI) with
// CIUIC_STORE_ADDR, ranks 0 and 1 of the job are the pair and meet through
// the TCP store (served by rank 0 unless CIUIC_STORE_EXTERNAL=1); other ranks
// exit at once.
//
// Control messages (Connection::PostMessage, at most 64 bytes, little-endian):
//   u8 type, u8[7] zero, u64 a, u64 b
//   kReady  receiver -> writer: region poisoned, source filled; a = size
//   kDone   rank 1 -> rank 0 (bandwidth): a = writes received
//   kAck    rank 0 -> rank 1: kDone arrived (rank 1 waits for it before
//           checking the data, progressing, so kDone leaves at once)
//   kWrong  rank 1 -> rank 0: a = wrong bytes, b = protocol errors
//   kBye    both ways at the end: this rank has finished with the backend
// Posting only queues a message; it leaves during a later Progress. So every
// wait progresses all connections, not only the one under test, and a rank
// that must know its message left waits for an answer.
//
// Exit status: 0 all good; 1 a wrong byte, or a backend named with -t that
// is unavailable or failed (with -t all, an unavailable backend is only
// reported); 2 bad flags or knobs.
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "transport/net.h"
#include "transport/transport.h"
#include "common/cpu_relax.h"
#include "common/version.h"

namespace ciuic::perf {
namespace {

using transport::Backend;
using transport::BackendKind;
using transport::Completion;
using transport::Connection;
using transport::MemoryRegion;
using transport::RemoteRegion;
using transport::Store;
using Clock = std::chrono::steady_clock;

constexpr int kModeBw = 1;
constexpr int kModeLat = 2;
constexpr const char* kProg = "transport_perf";

struct Options {
  std::vector<BackendKind> kinds = {BackendKind::kShm};
  bool all = false;  // -t all: unavailable backends are reported, not errors
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 256ull << 20;
  uint64_t factor = 2;
  long iters = -1;   // -1: by size (IterationsFor)
  long warmup = -1;  // -1: by iterations (WarmupFor)
  long window = -1;  // -1: 16, or the connection's max_outstanding if lower
  int mode = kModeBw | kModeLat;
  std::string format = "table";
  bool bind = true;  // fork mode: pin the two ranks to two different cores
  std::string command;  // the command line, for the header
};

void Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: transport_perf [options]\n"
      "Bandwidth (like ib_write_bw) and latency (like ib_write_lat) of ciuic's transports\n"
      "between two ranks; by default forks the second rank itself.\n"
      "  -t, --transport T  shm, tcp, verbs, a comma list, or all (every backend usable\n"
      "                     here, side by side, interleaved per size); default shm\n"
      "  -b, --min-bytes N  smallest message (default 8; K/M/G suffixes)\n"
      "  -e, --max-bytes N  largest message (default 256M)\n"
      "  -f, --factor N     size multiplier between rows (default 2)\n"
      "  -n, --iters N      timed iterations per size (default: by size; bandwidth 1 GiB\n"
      "                     per size, 5..20000 writes; latency 256 MiB, 5..10000)\n"
      "  -w, --warmup N     untimed iterations first (default n/10, 2..1000)\n"
      "  -W, --window N     outstanding writes in the bandwidth test (default 16, or the\n"
      "                     connection's max_outstanding if lower)\n"
      "      --mode M       bw, lat or both (default both)\n"
      "      --format F     table, csv or json (default table)\n"
      "      --bind B       core (default: the forked ranks run pinned to two different\n"
      "                     cores, as mpirun binds its ranks) or none\n"
      "  -h, --help\n"
      "Under a launcher (CIUIC_RANK/CIUIC_WORLD_SIZE, mpirun, srun) with CIUIC_STORE_ADDR,\n"
      "ranks 0 and 1 of the job measure and rank 0 prints. CIUIC_* knobs apply (see\n"
      "ciuic-info); CIUIC_TIMEOUT_MS bounds every wait (default here 60 s).\n");
}

// Flag errors name the flag; the caller exits 2.
bool BadFlag(const std::string& flag, const char* value, const std::string& expected) {
  std::fprintf(stderr, "%s: %s '%s': expected %s\n", kProg, flag.c_str(), value ? value : "",
               expected.c_str());
  return false;
}

bool ParseCount(const char* text, long min, long max, long* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || v < min || v > max) return false;
  *out = v;
  return true;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  static const option kLong[] = {
      {"transport", 1, nullptr, 't'}, {"min-bytes", 1, nullptr, 'b'}, {"max-bytes", 1, nullptr, 'e'},
      {"factor", 1, nullptr, 'f'},    {"iters", 1, nullptr, 'n'},     {"warmup", 1, nullptr, 'w'},
      {"window", 1, nullptr, 'W'},    {"mode", 1, nullptr, 'm'},      {"format", 1, nullptr, 'F'},
      {"bind", 1, nullptr, 'B'},
      {"help", 0, nullptr, 'h'},      {nullptr, 0, nullptr, 0}};
  for (int i = 0; i < argc; ++i) o->command += (i ? " " : "") + std::string(argv[i]);
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":t:b:e:f:n:w:W:h", kLong, nullptr)) != -1) {
    long v = 0;
    switch (c) {
      case 't': {
        o->kinds.clear();
        o->all = false;
        const std::string list = optarg;
        if (list == "all") {
          o->all = true;
          o->kinds = {BackendKind::kShm, BackendKind::kTcp, BackendKind::kVerbs};
          break;
        }
        size_t b = 0;
        while (b <= list.size()) {
          size_t e = list.find(',', b);
          if (e == std::string::npos) e = list.size();
          StatusOr<BackendKind> k = transport::ParseBackendKind(list.substr(b, e - b));
          if (!k.ok()) return BadFlag("-t/--transport", optarg, "shm, tcp, verbs, a comma list or all");
          if (std::find(o->kinds.begin(), o->kinds.end(), *k) == o->kinds.end()) o->kinds.push_back(*k);
          b = e + 1;
        }
        break;
      }
      case 'b': {
        StatusOr<uint64_t> n = ParseByteSize(optarg);
        if (!n.ok() || *n == 0) return BadFlag("-b/--min-bytes", optarg, "a size >= 1 such as 8, 64K, 1M");
        o->min_bytes = *n;
        break;
      }
      case 'e': {
        StatusOr<uint64_t> n = ParseByteSize(optarg);
        if (!n.ok() || *n == 0 || *n > (4ull << 30)) {
          return BadFlag("-e/--max-bytes", optarg, "a size from 1 to 4G such as 256M");
        }
        o->max_bytes = *n;
        break;
      }
      case 'f':
        if (!ParseCount(optarg, 2, 1 << 20, &v)) return BadFlag("-f/--factor", optarg, "an integer >= 2");
        o->factor = static_cast<uint64_t>(v);
        break;
      case 'n':
        if (!ParseCount(optarg, 1, 100000000, &o->iters)) return BadFlag("-n/--iters", optarg, "an integer >= 1");
        break;
      case 'w':
        if (!ParseCount(optarg, 0, 100000000, &o->warmup)) return BadFlag("-w/--warmup", optarg, "an integer >= 0");
        break;
      case 'W':
        if (!ParseCount(optarg, 1, 4096, &o->window)) return BadFlag("-W/--window", optarg, "an integer from 1 to 4096");
        break;
      case 'm': {
        const std::string m = optarg;
        if (m == "bw") o->mode = kModeBw;
        else if (m == "lat") o->mode = kModeLat;
        else if (m == "both") o->mode = kModeBw | kModeLat;
        else return BadFlag("--mode", optarg, "bw, lat or both");
        break;
      }
      case 'F':
        o->format = optarg;
        if (o->format != "table" && o->format != "csv" && o->format != "json") {
          return BadFlag("--format", optarg, "table, csv or json");
        }
        break;
      case 'B': {
        const std::string v = optarg;
        if (v != "core" && v != "none") return BadFlag("--bind", optarg, "core or none");
        o->bind = v == "core";
        break;
      }
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
    std::fprintf(stderr, "%s: -b (%" PRIu64 ") is larger than -e (%" PRIu64 ")\n", kProg,
                 o->min_bytes, o->max_bytes);
    return false;
  }
  return true;
}

// Timed iterations for one size when -n is not given: enough bytes for a
// stable figure, few enough that the default sweep over shm and tcp stays
// under two minutes on a 2-core machine. perf/peers/mpi_p2p.c uses the same
// rule, so both tools run the same iterations.
long IterationsFor(int mode, uint64_t bytes) {
  const uint64_t budget = mode == kModeBw ? (1ull << 30) : (256ull << 20);
  const uint64_t max_iters = mode == kModeBw ? 20000 : 10000;
  return static_cast<long>(std::clamp<uint64_t>(budget / bytes, 5, max_iters));
}

long WarmupFor(const Options& o, long iters) {
  return o.warmup >= 0 ? o.warmup : std::clamp<long>(iters / 10, 2, 1000);
}

std::vector<uint64_t> Sizes(const Options& o) {
  std::vector<uint64_t> out;
  for (uint64_t s = o.min_bytes;; s *= o.factor) {
    out.push_back(s);
    if (s > o.max_bytes / o.factor) break;  // the next would pass -e (or overflow)
  }
  return out;
}

// ---------------------------------------------------------------------------
// Data pattern: 64-bit words of a SplitMix64 sequence keyed by the size and
// the direction, so a region left over from another size or test never
// passes. The poison is the bitwise complement, wrong in every byte.

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t Seed(uint64_t bytes, int direction) { return bytes * 4 + static_cast<uint64_t>(direction); }
enum Direction { kBwData = 0, kPing = 1, kPong = 2 };

void Fill(void* dst, uint64_t n, uint64_t seed, bool poison) {
  auto* p = static_cast<unsigned char*>(dst);
  const uint64_t key = Mix(seed), flip = poison ? ~0ull : 0;
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = Mix(key + i) ^ flip;
    std::memcpy(p + i, &w, 8);
  }
  if (i < n) {
    const uint64_t w = Mix(key + i) ^ flip;
    std::memcpy(p + i, &w, n - i);
  }
}

uint64_t CountWrong(const void* src, uint64_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(src);
  const uint64_t key = Mix(seed);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t len = std::min<uint64_t>(8, n - i);
    uint64_t have = 0;
    std::memcpy(&have, p + i, len);
    uint64_t diff = (have ^ Mix(key + i)) & (len == 8 ? ~0ull : (1ull << (8 * len)) - 1);
    for (; diff != 0; diff >>= 8) wrong += (diff & 0xff) != 0;
  }
  return wrong;
}

// A private, pre-faulted, huge-page-advised buffer for the memcpy yardstick.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : len_((bytes + 4095) / 4096 * 4096) {
    void* p = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    madvise(p, len_, MADV_HUGEPAGE);
    std::memset(p, 1, len_);
    p_ = static_cast<unsigned char*>(p);
  }
  ~Buffer() {
    if (p_ != nullptr) munmap(p_, len_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* data() const { return p_; }

 private:
  size_t len_;
  unsigned char* p_ = nullptr;
};

// memcpy GB/s of `bytes` (counted once, like the transfers), best of three
// batches.
double MemcpyGbs(unsigned char* dst, const unsigned char* src, uint64_t bytes) {
  const uint64_t reps = std::clamp<uint64_t>((256ull << 20) / bytes, 3, 100000);
  double best = 1e30;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = Clock::now();
    for (uint64_t r = 0; r < reps; ++r) {
      std::memcpy(dst, src, bytes);
      asm volatile("" : : "r"(dst) : "memory");  // keep every copy
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return static_cast<double>(bytes) * static_cast<double>(reps) / best / 1e9;
}

// ---------------------------------------------------------------------------
// Control messages (format in the file comment).

enum MsgType : uint8_t { kReady = 1, kDone = 2, kAck = 3, kWrong = 4, kBye = 5 };
constexpr size_t kMsgBytes = 24;
static_assert(kMsgBytes <= transport::kMaxMessageBytes, "control message too long");

struct Msg {
  uint8_t type = 0;
  uint64_t a = 0, b = 0;
};


// One backend and its connection to the other rank, with the completion
// bookkeeping of the tests. Thread contract: one thread (the rank's main).
struct Bench {
  BackendKind kind = BackendKind::kShm;
  std::string name;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Connection> conn;
  std::unique_ptr<MemoryRegion> send;  // sources of this rank's writes
  std::unique_ptr<MemoryRegion> recv;  // the peer writes here
  RemoteRegion remote;                 // the peer's recv
  size_t window = 16;
  std::string describe;
  Status error;  // first failure; the bench is skipped afterwards
  bool reported = false;  // `error` has been printed

  // Per-test counters (ResetCounters).
  uint64_t posted = 0, write_done = 0;
  uint64_t received = 0;
  uint64_t bad_imm = 0;  // writes that arrived with an unexpected immediate
  // Completion times of the bandwidth writes: done_times[k] = when write
  // stamp_base + k*stamp_stride + stamp_stride-1 completed.
  std::vector<Clock::time_point>* done_times = nullptr;
  uint64_t stamp_base = 0, stamp_stride = 1;
  std::deque<Msg> msgs;

  void ResetCounters() {
    posted = write_done = received = bad_imm = stamp_base = 0;
    stamp_stride = 1;
    done_times = nullptr;
  }
};

// Liveness of the other rank (fork mode), the idle limit of every wait, and
// every bench, so that waits progress all connections.
struct Guard {
  std::function<Status()> peer_alive;  // OK while the peer may still answer
  std::chrono::milliseconds idle_limit{60000};
  std::vector<Bench*> benches;
};

// One Progress call; dispatches the completions. `*any` = something came.
Status Pump(Bench& b, bool* any) {
  Completion done[16];
  StatusOr<size_t> n = b.conn->Progress(done, 16);
  if (!n.ok()) return n.status();
  *any = *n > 0;
  if (*n == 0) return Status::Ok();
  for (size_t i = 0; i < *n; ++i) {
    const Completion& c = done[i];
    switch (c.kind) {
      case Completion::Kind::kWriteDone:
        ++b.write_done;
        if (b.done_times != nullptr && c.wr_id >= b.stamp_base &&
            (c.wr_id - b.stamp_base) % b.stamp_stride == b.stamp_stride - 1) {
          const uint64_t k = (c.wr_id - b.stamp_base) / b.stamp_stride;
          if (k < b.done_times->size()) (*b.done_times)[k] = Clock::now();
        }
        break;
      case Completion::Kind::kWriteReceived:
        if (c.imm != static_cast<uint32_t>(b.received)) ++b.bad_imm;
        ++b.received;
        break;
      case Completion::Kind::kMessage: {
        if (c.len != kMsgBytes) {
          return DataLossError("control message of " + std::to_string(c.len) + " bytes from rank " +
                               std::to_string(b.conn->peer()));
        }
        Msg m;
        m.type = c.data[0];
        m.a = transport::net::GetLe64(c.data + 8);
        m.b = transport::net::GetLe64(c.data + 16);
        b.msgs.push_back(m);
        break;
      }
    }
  }
  return Status::Ok();
}

// Progresses until ready(): busy-polls (the measurement), yields after
// 200 us without completions, sleeps in WaitForActivity after 50 ms (the
// other rank may be filling or checking a large region, or measuring
// memcpy), and gives up after guard.idle_limit without any completion.
Status WaitUntil(Bench& b, const Guard& guard, const std::function<bool()>& ready,
                 const char* what) {
  auto last = Clock::now();
  uint32_t idle_polls = 0;
  bool active = false;  // completions since `last` was taken
  for (;;) {
    if (ready()) return Status::Ok();
    bool any = false;
    CIUIC_RETURN_IF_ERROR(Pump(b, &any));
    if (any) {
      idle_polls = 0;
      active = true;
      continue;
    }
    // The clock is read only every 256 idle polls, off the hot path.
    if (++idle_polls < 256) {
      CpuRelax();
      continue;
    }
    idle_polls = 0;
    const auto now = Clock::now();
    if (active) {
      last = now;
      active = false;
    }
    const auto idle = now - last;
    // The other connections: their queued messages leave, their peers' arrive.
    for (Bench* other : guard.benches) {
      if (other == &b || !other->error.ok() || !other->conn) continue;
      bool other_any = false;
      if (Status s = Pump(*other, &other_any); !s.ok()) other->error = s;
    }
    if (idle > std::chrono::microseconds(200)) {
      if (guard.peer_alive) CIUIC_RETURN_IF_ERROR(guard.peer_alive());
      if (idle > guard.idle_limit) {
        return DeadlineExceededError(std::string("nothing from rank ") + std::to_string(b.conn->peer()) +
                                     " for " + std::to_string(guard.idle_limit.count()) +
                                     " ms while waiting for " + what);
      }
      if (idle > std::chrono::milliseconds(50)) {
        b.backend->WaitForActivity(std::chrono::microseconds(1000));
      } else {
        sched_yield();
      }
    }
  }
}

Status SendMsg(Bench& b, const Guard& guard, uint8_t type, uint64_t a, uint64_t c) {
  uint8_t buf[kMsgBytes] = {};
  buf[0] = type;
  transport::net::PutLe64(buf + 8, a);
  transport::net::PutLe64(buf + 16, c);
  // Queue full: progress and retry.
  Status s;
  CIUIC_RETURN_IF_ERROR(WaitUntil(
      b, guard,
      [&] {
        s = b.conn->PostMessage(buf, sizeof(buf));
        return s.code() != StatusCode::kResourceExhausted;
      },
      "room for a control message"));
  return s;
}

StatusOr<Msg> RecvMsg(Bench& b, const Guard& guard, uint8_t type, const char* what) {
  CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return !b.msgs.empty(); }, what));
  Msg m = b.msgs.front();
  b.msgs.pop_front();
  if (m.type != type) {
    return DataLossError(std::string("expected ") + what + ", got control message type " +
                         std::to_string(m.type) + " from rank " + std::to_string(b.conn->peer()));
  }
  return m;
}

// Posts one write, progressing and retrying while the connection refuses it
// (kResourceExhausted: outstanding writes, or a backend's queue or
// notification ring that only the peer's progress frees).
Status PostOne(Bench& b, const Guard& guard, uint64_t bytes, uint32_t imm) {
  Status s = b.conn->PostWrite(*b.send, 0, b.remote, 0, bytes, imm, b.posted);
  if (s.code() == StatusCode::kResourceExhausted) {
    CIUIC_RETURN_IF_ERROR(WaitUntil(
        b, guard,
        [&] {
          s = b.conn->PostWrite(*b.send, 0, b.remote, 0, bytes, imm, b.posted);
          return s.code() != StatusCode::kResourceExhausted;
        },
        "room to post a write (connection full)"));
  }
  if (s.ok()) ++b.posted;
  return s;
}

struct Row {
  std::string transport;
  bool bw = true;
  uint64_t bytes = 0;
  long iters = 0;
  double peak = 0, avg = 0, rate = 0, memcpy_gbs = 0;        // GB/s, Mpps
  double tmin = 0, tmax = 0, typical = 0, tavg = 0, t99 = 0, t999 = 0;  // us, one way
  uint64_t wrong = 0;
};

// Bandwidth of one size on one backend. Rank 0 fills `row`.
Status RunBw(Bench& b, const Guard& guard, int rank, const Options& o, uint64_t bytes, Row* row) {
  const long iters = o.iters > 0 ? o.iters : IterationsFor(kModeBw, bytes);
  const long warm = WarmupFor(o, iters);
  const uint64_t total = static_cast<uint64_t>(warm + iters);
  row->iters = iters;
  b.ResetCounters();
  if (rank == 1) {
    Fill(b.recv->data(), bytes, Seed(bytes, kBwData), true);
    CIUIC_RETURN_IF_ERROR(SendMsg(b, guard, kReady, bytes, 0));
    CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.received >= total; }, "bandwidth writes"));
    CIUIC_RETURN_IF_ERROR(SendMsg(b, guard, kDone, b.received, 0));
    CIUIC_RETURN_IF_ERROR(RecvMsg(b, guard, kAck, "rank 0's acknowledgement").status());
    const uint64_t wrong = CountWrong(b.recv->data(), bytes, Seed(bytes, kBwData));
    return SendMsg(b, guard, kWrong, wrong, b.bad_imm);
  }
  Fill(b.send->data(), bytes, Seed(bytes, kBwData), false);
  CIUIC_ASSIGN_OR_RETURN(Msg ready, RecvMsg(b, guard, kReady, "the receiver's ready message"));
  if (ready.a != bytes) return DataLossError("rank 1 is at size " + std::to_string(ready.a));
  // Peak, as perftest's: the best rate over L consecutive timed writes, from
  // the post of the first to the completion of the last, L = the window, a
  // tenth of the run or 8 MiB worth of writes, whichever is most (shorter
  // runs would time bursts into socket buffers, not the transport). The
  // clock is read at every g-th post and completion only (g = L/4), so that
  // timing does not slow small writes down.
  const uint64_t n = static_cast<uint64_t>(iters);
  uint64_t span = std::clamp<uint64_t>(std::max<uint64_t>({b.window, n / 10, (8u << 20) / bytes}), 1, n);
  const uint64_t g = std::max<uint64_t>(1, span / 4);
  span = span / g * g;
  std::vector<Clock::time_point> post_times(n / g + 1), done_times(n / g + 1);
  b.done_times = &done_times;
  b.stamp_base = static_cast<uint64_t>(warm);
  b.stamp_stride = g;
  // Warm-up, drained before the clock starts.
  auto post_window = [&](uint64_t upto) -> Status {
    while (b.posted < upto) {
      if (b.posted - b.write_done >= b.window) {
        CIUIC_RETURN_IF_ERROR(WaitUntil(
            b, guard, [&] { return b.posted - b.write_done < b.window; }, "write completions"));
      }
      if (b.posted >= b.stamp_base && (b.posted - b.stamp_base) % g == 0) {
        post_times[(b.posted - b.stamp_base) / g] = Clock::now();
      }
      CIUIC_RETURN_IF_ERROR(PostOne(b, guard, bytes, static_cast<uint32_t>(b.posted)));
      // Completions are reaped when the window is full (above), once per
      // window as perftest polls its CQ, not after every post.
    }
    return Status::Ok();
  };
  CIUIC_RETURN_IF_ERROR(post_window(static_cast<uint64_t>(warm)));
  CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.write_done >= b.posted; }, "warm-up writes"));
  const auto t0 = Clock::now();
  CIUIC_RETURN_IF_ERROR(post_window(total));
  CIUIC_ASSIGN_OR_RETURN(Msg done, RecvMsg(b, guard, kDone, "the receiver's done message"));
  const double t = std::chrono::duration<double>(Clock::now() - t0).count();
  CIUIC_RETURN_IF_ERROR(SendMsg(b, guard, kAck, 0, 0));
  CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.write_done >= b.posted; }, "write completions"));
  b.done_times = nullptr;
  double peak = 0;
  for (uint64_t a = 0; a + span <= n; a += g) {
    const double dt =
        std::chrono::duration<double>(done_times[(a + span - 1) / g] - post_times[a / g]).count();
    if (dt > 0) peak = std::max(peak, static_cast<double>(bytes) * span / dt / 1e9);
  }
  CIUIC_ASSIGN_OR_RETURN(Msg wrong, RecvMsg(b, guard, kWrong, "the receiver's check"));
  if (done.a != total || wrong.b != 0) {
    return DataLossError("rank 1 received " + std::to_string(done.a) + " of " + std::to_string(total) +
                         " writes, " + std::to_string(wrong.b) + " with an out-of-order immediate");
  }
  row->avg = static_cast<double>(bytes) * iters / t / 1e9;
  row->peak = std::max(peak, row->avg);
  row->rate = iters / t / 1e6;
  row->wrong = wrong.a;
  return Status::Ok();
}

// Latency of one size on one backend. Rank 0 fills `row`.
Status RunLat(Bench& b, const Guard& guard, int rank, const Options& o, uint64_t bytes,
              std::vector<double>* one_way, Row* row) {
  const long iters = o.iters > 0 ? o.iters : IterationsFor(kModeLat, bytes);
  const long warm = WarmupFor(o, iters);
  const uint64_t total = static_cast<uint64_t>(warm + iters);
  row->iters = iters;
  b.ResetCounters();
  Fill(b.send->data(), bytes, Seed(bytes, rank == 0 ? kPing : kPong), false);
  Fill(b.recv->data(), bytes, Seed(bytes, rank == 0 ? kPong : kPing), true);
  if (rank == 1) {
    CIUIC_RETURN_IF_ERROR(SendMsg(b, guard, kReady, bytes, 0));
    for (uint64_t i = 0; i < total; ++i) {
      CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.received > i; }, "a ping"));
      CIUIC_RETURN_IF_ERROR(PostOne(b, guard, bytes, static_cast<uint32_t>(i)));
    }
    CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.write_done >= b.posted; }, "write completions"));
    const uint64_t wrong = CountWrong(b.recv->data(), bytes, Seed(bytes, kPing));
    return SendMsg(b, guard, kWrong, wrong, b.bad_imm);
  }
  CIUIC_ASSIGN_OR_RETURN(Msg ready, RecvMsg(b, guard, kReady, "the receiver's ready message"));
  if (ready.a != bytes) return DataLossError("rank 1 is at size " + std::to_string(ready.a));
  one_way->clear();
  for (uint64_t i = 0; i < total; ++i) {
    const auto t0 = Clock::now();
    CIUIC_RETURN_IF_ERROR(PostOne(b, guard, bytes, static_cast<uint32_t>(i)));
    // Busy-poll for the pong (WaitUntil only yields after 200 us idle).
    CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.received > i; }, "a pong"));
    const auto t1 = Clock::now();
    if (i >= static_cast<uint64_t>(warm)) {
      one_way->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
  }
  CIUIC_RETURN_IF_ERROR(WaitUntil(b, guard, [&] { return b.write_done >= b.posted; }, "write completions"));
  CIUIC_ASSIGN_OR_RETURN(Msg theirs, RecvMsg(b, guard, kWrong, "the receiver's check"));
  if (theirs.b != 0 || b.bad_imm != 0) {
    return DataLossError("writes arrived out of order (" + std::to_string(theirs.b + b.bad_imm) +
                         " unexpected immediates)");
  }
  row->wrong = theirs.a + CountWrong(b.recv->data(), bytes, Seed(bytes, kPong));
  std::vector<double>& v = *one_way;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const size_t n = v.size();
  auto pct = [&](double p) { return v[std::min(n - 1, static_cast<size_t>(std::ceil(n * p)) - 1)]; };
  row->tmin = v.front();
  row->tmax = v.back();
  row->typical = v[n / 2];
  row->tavg = sum / n;
  row->t99 = pct(0.99);
  row->t999 = pct(0.999);
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Output (rank 0).

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

class Printer {
 public:
  explicit Printer(const Options& o) : o_(o) {}

  // `#` lines (table, csv) or the opening of the JSON object.
  void Header(const std::vector<std::pair<std::string, std::string>>& fields,
              const std::vector<std::string>& lines) {
    if (o_.format == "json") {
      std::printf("{\"benchmark\":\"transport_perf\"");
      for (const auto& f : fields) std::printf(",\"%s\":\"%s\"", f.first.c_str(), JsonEscape(f.second).c_str());
      std::printf(",\"notes\":[");
      for (size_t i = 0; i < lines.size(); ++i) {
        std::printf("%s\"%s\"", i ? "," : "", JsonEscape(lines[i]).c_str());
      }
      std::printf("],\"rows\":[");
    } else {
      for (const std::string& l : lines) std::printf("# %s\n", l.c_str());
      if (o_.format == "csv") {
        std::printf("transport,test,bytes,iters,bw_peak_gbs,bw_avg_gbs,msg_rate_mpps,memcpy_gbs,"
                    "bw_over_memcpy,t_min_us,t_max_us,t_typical_us,t_avg_us,t99_us,t999_us,wrong\n");
      }
    }
    std::fflush(stdout);
  }

  void Note(const std::string& line) {
    if (o_.format != "json") std::printf("# %s\n", line.c_str());
    std::fflush(stdout);
  }

  void Heading(int mode, const std::string& what) {
    if (o_.format != "table") return;
    if (mode == kModeBw) {
      std::printf("# bandwidth: %s\n", what.c_str());
      std::printf("%-14s %12s %8s %14s %13s %14s %13s %11s %7s\n", "#transport", "#bytes", "#iters",
                  "BW_peak[GB/s]", "BW_avg[GB/s]", "MsgRate[Mpps]", "memcpy[GB/s]", "avg/memcpy",
                  "#wrong");
    } else {
      std::printf("# latency: %s\n", what.c_str());
      std::printf("%-14s %12s %8s %10s %10s %14s %10s %10s %10s %7s\n", "#transport", "#bytes", "#iters",
                  "t_min[us]", "t_max[us]", "t_typical[us]", "t_avg[us]", "t99[us]", "t99.9[us]",
                  "#wrong");
    }
    std::fflush(stdout);
  }

  void Print(const Row& r) {
    const double ratio = r.memcpy_gbs > 0 ? r.avg / r.memcpy_gbs : 0;
    const char* t = r.transport.c_str();
    if (o_.format == "csv") {
      if (r.bw) {
        std::printf("%s,bw,%" PRIu64 ",%ld,%.4f,%.4f,%.4f,%.4f,%.4f,,,,,,,%" PRIu64 "\n", t, r.bytes,
                    r.iters, r.peak, r.avg, r.rate, r.memcpy_gbs, ratio, r.wrong);
      } else {
        std::printf("%s,lat,%" PRIu64 ",%ld,,,,,,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%" PRIu64 "\n", t,
                    r.bytes, r.iters, r.tmin, r.tmax, r.typical, r.tavg, r.t99, r.t999, r.wrong);
      }
    } else if (o_.format == "json") {
      if (r.bw) {
        std::printf("%s\n  {\"transport\":\"%s\",\"test\":\"bw\",\"bytes\":%" PRIu64 ",\"iters\":%ld,"
                    "\"bw_peak_gbs\":%.4f,\"bw_avg_gbs\":%.4f,\"msg_rate_mpps\":%.4f,"
                    "\"memcpy_gbs\":%.4f,\"wrong\":%" PRIu64 "}",
                    rows_ ? "," : "", t, r.bytes, r.iters, r.peak, r.avg, r.rate, r.memcpy_gbs, r.wrong);
      } else {
        std::printf("%s\n  {\"transport\":\"%s\",\"test\":\"lat\",\"bytes\":%" PRIu64 ",\"iters\":%ld,"
                    "\"t_min_us\":%.3f,\"t_max_us\":%.3f,\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,"
                    "\"t99_us\":%.3f,\"t999_us\":%.3f,\"wrong\":%" PRIu64 "}",
                    rows_ ? "," : "", t, r.bytes, r.iters, r.tmin, r.tmax, r.typical, r.tavg, r.t99,
                    r.t999, r.wrong);
      }
    } else if (r.bw) {
      std::printf("%-14s %12" PRIu64 " %8ld %14.4f %13.4f %14.4f %13.2f %11.3f %7" PRIu64 "\n", t,
                  r.bytes, r.iters, r.peak, r.avg, r.rate, r.memcpy_gbs, ratio, r.wrong);
    } else {
      std::printf("%-14s %12" PRIu64 " %8ld %10.3f %10.3f %14.3f %10.3f %10.3f %10.3f %7" PRIu64 "\n",
                  t, r.bytes, r.iters, r.tmin, r.tmax, r.typical, r.tavg, r.t99, r.t999, r.wrong);
    }
    ++rows_;
    std::fflush(stdout);
  }

  void Footer(uint64_t wrong, const std::vector<std::string>& failures) {
    if (o_.format == "json") {
      std::printf("\n],\"wrong\":%" PRIu64 ",\"failures\":[", wrong);
      for (size_t i = 0; i < failures.size(); ++i) {
        std::printf("%s\"%s\"", i ? "," : "", JsonEscape(failures[i]).c_str());
      }
      std::printf("]}\n");
    } else {
      std::printf("# %zu rows, %" PRIu64 " wrong bytes in total%s\n", rows_, wrong,
                  failures.empty() ? "" : "; FAILED:");
      for (const std::string& f : failures) std::printf("#   %s\n", f.c_str());
    }
    std::fflush(stdout);
  }

 private:
  const Options& o_;
  size_t rows_ = 0;
};

// ---------------------------------------------------------------------------
// One rank's whole run.

struct RankSetup {
  int rank = 0;
  int world_size = 2;
  std::string job_id;
  std::string how;  // how the ranks met, for the header
  Config config;
  Guard guard;
};

std::string Key(const std::string& what, BackendKind kind, int rank) {
  return std::string("tperf/") + what + "/" + transport::BackendName(kind) + "/" + std::to_string(rank);
}

// Store::Get that gives up as soon as the peer is known to be gone (fork
// mode: the store is a FileStore, which polls, so short slices cost
// nothing); one Get of the whole idle limit otherwise (a TcpStoreClient
// closes its connection when a request times out).
StatusOr<std::string> GetWatching(Store& store, const std::string& key, const Guard& guard) {
  if (!guard.peer_alive) return store.Get(key, guard.idle_limit);
  const auto deadline = Clock::now() + guard.idle_limit;
  for (;;) {
    StatusOr<std::string> v = store.Get(key, std::chrono::milliseconds(200));
    if (v.ok() || v.status().code() != StatusCode::kDeadlineExceeded) return v;
    CIUIC_RETURN_IF_ERROR(guard.peer_alive());
    if (Clock::now() >= deadline) return store.Get(key, std::chrono::milliseconds(0));
  }
}

// Opens, connects and allocates one backend on both ranks. Returns the bench
// (with `error` set when it cannot be used) and whether it was merely
// unavailable here (not an error under -t all).
std::unique_ptr<Bench> SetUp(BackendKind kind, const RankSetup& rs, Store& store, uint64_t max_bytes,
                             const Options& o, bool* unavailable) {
  auto b = std::make_unique<Bench>();
  b->kind = kind;
  b->name = transport::BackendName(kind);
  *unavailable = false;
  const int peer = 1 - rs.rank;
  const std::chrono::milliseconds timeout = rs.guard.idle_limit;
  transport::BackendOptions bo;
  bo.rank = rs.rank;
  bo.world_size = rs.world_size;
  bo.job_id = rs.job_id;
  bo.config = rs.config;
  // Both ranks publish whether they could open the backend, so they agree.
  std::string why;
  Status open;
  if (!transport::BackendAvailable(kind, bo, &why)) {
    open = UnavailableError(why);
  } else {
    StatusOr<std::unique_ptr<Backend>> be = transport::OpenBackend(kind, bo);
    if (be.ok()) {
      b->backend = std::move(*be);
    } else {
      open = be.status();
    }
  }
  if (Status s = store.Set(Key("open", kind, rs.rank), open.ok() ? "ok" : open.message()); !s.ok()) {
    b->error = s;
    return b;
  }
  StatusOr<std::string> theirs = GetWatching(store, Key("open", kind, peer), rs.guard);
  if (!theirs.ok()) {
    b->error = theirs.status().WithContext("waiting for rank " + std::to_string(peer));
    return b;
  }
  if (!open.ok() || *theirs != "ok") {
    *unavailable = true;
    b->error = !open.ok() ? open
                          : UnavailableError("rank " + std::to_string(peer) + ": " + *theirs);
    b->backend.reset();
    return b;
  }
  b->describe = b->backend->Describe();
  StatusOr<std::unique_ptr<Connection>> conn =
      transport::ConnectThroughStore(*b->backend, store, "tperf", rs.rank, peer, 0, timeout);
  if (!conn.ok()) {
    b->error = conn.status().WithContext("connecting");
    return b;
  }
  b->conn = std::move(*conn);
  // Regions: a failure is published too, so the peer does not wait for it.
  Status s;
  StatusOr<std::unique_ptr<MemoryRegion>> send = b->backend->Allocate(max_bytes);
  StatusOr<std::unique_ptr<MemoryRegion>> recv =
      send.ok() ? b->backend->Allocate(max_bytes) : StatusOr<std::unique_ptr<MemoryRegion>>(send.status());
  if (recv.ok()) {
    b->send = std::move(*send);
    b->recv = std::move(*recv);
    s = store.Set(Key("region", kind, rs.rank), "R" + b->recv->Describe());
  } else {
    s = store.Set(Key("region", kind, rs.rank), "E" + recv.status().message());
    b->error = recv.status().WithContext("allocating 2 x " + std::to_string(max_bytes) + " bytes");
    if (!s.ok()) b->error = s;
    return b;
  }
  if (!s.ok()) {
    b->error = s;
    return b;
  }
  StatusOr<std::string> blob = GetWatching(store, Key("region", kind, peer), rs.guard);
  if (!blob.ok() || blob->empty() || (*blob)[0] != 'R') {
    b->error = !blob.ok() ? blob.status()
                          : UnavailableError("rank " + std::to_string(peer) + ": " +
                                             (blob->empty() ? std::string("no region") : blob->substr(1)));
    return b;
  }
  StatusOr<RemoteRegion> remote = b->conn->ImportRegion(blob->substr(1));
  if (!remote.ok()) {
    b->error = remote.status().WithContext("importing rank " + std::to_string(peer) + "'s region");
    return b;
  }
  b->remote = *remote;
  if (b->remote.size < max_bytes) {
    b->error = InternalError("rank " + std::to_string(peer) + "'s region holds " +
                             std::to_string(b->remote.size) + " bytes, need " + std::to_string(max_bytes));
    return b;
  }
  const size_t max_out = std::max<size_t>(1, b->conn->max_outstanding());
  b->window = o.window > 0 ? std::min<size_t>(static_cast<size_t>(o.window), max_out)
                           : std::min<size_t>(16, max_out);
  return b;
}

int RunRank(const RankSetup& rs, Store& store, const Options& o) {
  const bool print = rs.rank == 0;
  Printer out(o);
  std::vector<std::string> failures;
  bool failed = false;
  auto fail = [&](const std::string& what) {
    failures.push_back(what);
    failed = true;
    if (!print) std::fprintf(stderr, "%s: rank %d: %s\n", kProg, rs.rank, what.c_str());
  };

  // Header facts.
  std::vector<std::string> notes;
  std::vector<std::pair<std::string, std::string>> fields;
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string knobs;
  for (const KnobDescription& k : DescribeKnobs(rs.config)) {
    // The secret is a knob too; its value is never printed.
    if (k.source != "default") knobs += k.name + "=" + (k.name == "CIUIC_SECRET" ? "***" : k.value) + " ";
  }
  if (!knobs.empty()) knobs.pop_back();
  fields = {{"version", Version()},   {"git", GitRevision()}, {"build", BuildOptions()},
            {"host", host},           {"cpu", CpuModel()},    {"date", date},
            {"command", o.command},   {"ranks", rs.how},      {"knobs", knobs}};
  notes.push_back(std::string("ciuic transport_perf ") + Version() + " (git " + GitRevision() + ") on " + host);
  notes.push_back("cpu: " + CpuModel() + "; build: " + BuildOptions());
  notes.push_back(std::string("date: ") + date);
  notes.push_back("command: " + o.command);
  notes.push_back("ranks: " + rs.how);
  notes.push_back("knobs: " + (knobs.empty() ? std::string("(all defaults)") : knobs));

  // Backends.
  std::vector<std::unique_ptr<Bench>> benches;
  for (BackendKind kind : o.kinds) {
    bool unavailable = false;
    std::unique_ptr<Bench> b = SetUp(kind, rs, store, o.max_bytes, o, &unavailable);
    const std::string name = transport::BackendName(kind);
    if (!b->error.ok()) {
      const std::string line = name + ": " + (unavailable ? "not available: " : "failed: ") + b->error.message();
      notes.push_back(line);
      if (!unavailable || !o.all) {
        fail(line);
        if (print) std::fprintf(stderr, "%s: %s\n", kProg, line.c_str());
      }
      continue;
    }
    notes.push_back(name + ": " + b->describe + "; window " + std::to_string(b->window) +
                    " (max_outstanding " + std::to_string(b->conn->max_outstanding()) + ")");
    benches.push_back(std::move(b));
  }
  if (print) out.Header(fields, notes);
  Guard guard = rs.guard;
  for (auto& b : benches) guard.benches.push_back(b.get());

  const std::vector<uint64_t> sizes = Sizes(o);
  std::unique_ptr<Buffer> msrc, mdst;
  if (print && (o.mode & kModeBw) && !benches.empty()) {
    msrc = std::make_unique<Buffer>(o.max_bytes);
    mdst = std::make_unique<Buffer>(o.max_bytes);
    if (msrc->data() == nullptr || mdst->data() == nullptr) {
      msrc.reset();
      mdst.reset();
      out.Note("memcpy yardstick skipped: cannot map 2 x " + std::to_string(o.max_bytes) + " bytes");
    }
  }
  uint64_t total_wrong = 0;
  std::vector<double> one_way;
  for (int mode : {kModeBw, kModeLat}) {
    if ((o.mode & mode) == 0 || benches.empty()) continue;
    if (print) {
      out.Heading(mode, mode == kModeBw
                            ? "one-sided writes with immediate, window W outstanding, into one remote "
                              "region (ib_write_bw); GB/s = 1e9 B/s; peak = best L = max(W, n/10, 8 MiB/S) writes"
                            : "ping-pong of writes with immediate, busy-polling (ib_write_lat); one way "
                              "= round trip / 2");
    }
    for (uint64_t bytes : sizes) {
      // memcpy is timed before and after the backends of this size and the
      // faster kept: on a shared machine a slow moment then cannot flatter
      // the transport's ratio.
      const bool yardstick = print && mode == kModeBw && msrc != nullptr;
      double mcpy = yardstick ? MemcpyGbs(mdst->data(), msrc->data(), bytes) : 0;
      std::vector<Row> rows;
      for (auto& b : benches) {
        if (!b->error.ok() && !b->reported) {
          // Failed while another backend's wait progressed it.
          b->reported = true;
          const std::string line = b->name + ": failed before " + std::to_string(bytes) +
                                   " bytes: " + b->error.ToString();
          fail(line);
          if (print) out.Note(line);
        }
        if (!b->error.ok()) continue;
        Row row;
        row.transport = b->name;
        row.bw = mode == kModeBw;
        row.bytes = bytes;
        Status s = mode == kModeBw ? RunBw(*b, guard, rs.rank, o, bytes, &row)
                                   : RunLat(*b, guard, rs.rank, o, bytes, &one_way, &row);
        if (!s.ok()) {
          b->error = s;
          b->reported = true;
          const std::string line = b->name + ": failed at " + std::to_string(bytes) + " bytes (" +
                                   (mode == kModeBw ? "bandwidth" : "latency") + "): " + s.ToString();
          fail(line);
          if (print) {
            out.Note(line);
            std::fprintf(stderr, "%s: %s\n", kProg, line.c_str());
          }
          continue;
        }
        if (print) rows.push_back(row);
      }
      if (yardstick && !rows.empty()) mcpy = std::max(mcpy, MemcpyGbs(mdst->data(), msrc->data(), bytes));
      for (Row& row : rows) {
        row.memcpy_gbs = mcpy;
        total_wrong += row.wrong;
        out.Print(row);
      }
    }
  }
  // Goodbye: each rank says it is done with every healthy connection and
  // progresses them until the peer's goodbye arrives or the peer has closed
  // (it got ours and left: our messages are out, nothing is in flight).
  std::vector<Bench*> closing;
  for (auto& b : benches) {
    if (!b->error.ok()) continue;
    if (Status s = SendMsg(*b, guard, kBye, 0, 0); !s.ok()) {
      fail(b->name + ": at the end: " + s.ToString());
      continue;
    }
    closing.push_back(b.get());
  }
  const auto bye_deadline = Clock::now() + rs.guard.idle_limit;
  while (!closing.empty()) {
    for (size_t i = 0; i < closing.size();) {
      Bench& b = *closing[i];
      bool any = false;
      const Status s = Pump(b, &any);
      bool bye = !s.ok();
      for (const Msg& m : b.msgs) bye = bye || m.type == kBye;
      if (bye) {
        closing.erase(closing.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    if (closing.empty()) break;
    if (Clock::now() > bye_deadline) {
      for (Bench* b : closing) fail(b->name + ": at the end: no goodbye from the peer");
      break;
    }
    sched_yield();
  }
  for (auto& b : benches) {
    b->conn.reset();
    b->send.reset();
    b->recv.reset();
    b->backend.reset();
  }
  if (print) out.Footer(total_wrong, failures);
  return failed || total_wrong != 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------
// Launch modes.

std::chrono::milliseconds IdleLimit(const Config& config) {
  for (const std::string& n : config.from_env) {
    if (n == "CIUIC_TIMEOUT_MS") return std::chrono::milliseconds(config.timeout_ms);
  }
  return std::chrono::milliseconds(60000);
}

// Two CPUs of this process's affinity mask on different cores (SMT
// siblings share a core_id within a package), for ranks 0 and 1; -1 when
// there is only one. Both ranks busy-poll: sharing a core costs them whole
// scheduler slices.
std::pair<int, int> TwoCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {-1, -1};
  auto core_of = [](int cpu) {
    std::string id;
    for (const char* f : {"physical_package_id", "core_id"}) {
      std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + f);
      std::string v;
      in >> v;
      id += v + ":";
    }
    return id;
  };
  int first = -1, second = -1, sibling = -1;
  for (int c = 0; c < CPU_SETSIZE && second < 0; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    if (first < 0) {
      first = c;
    } else if (core_of(c) != core_of(first)) {
      second = c;
    } else if (sibling < 0) {
      sibling = c;
    }
  }
  if (second < 0) second = sibling;
  if (second < 0) return {-1, -1};
  return {first, second};
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// Forks rank 1; this process is rank 0. They meet in a FileStore.
int RunForked(const Options& o, const Config& config) {
  char tmpl[] = "/tmp/ciuic-tperf-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "%s: mkdtemp(/tmp/ciuic-tperf-XXXXXX): %s\n", kProg, std::strerror(errno));
    return 1;
  }
  const std::string dir = tmpl;
  const pid_t parent = getpid();
  RankSetup rs;
  rs.world_size = 2;
  rs.job_id = "tperf-" + std::to_string(parent);
  rs.how = "0 and 1 of 2, forked, meeting in a FileStore";
  const std::pair<int, int> cpus = o.bind ? TwoCores() : std::pair<int, int>(-1, -1);
  if (cpus.first >= 0) {
    rs.how += "; bound to cpus " + std::to_string(cpus.first) + " and " + std::to_string(cpus.second);
  } else {
    rs.how += o.bind ? "; not bound (one cpu)" : "; not bound (--bind none)";
  }
  rs.config = config;
  rs.guard.idle_limit = IdleLimit(config);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "%s: fork: %s\n", kProg, std::strerror(errno));
    std::filesystem::remove_all(dir);
    return 1;
  }
  if (child == 0) {
    // Rank 1 never outlives rank 0.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    rs.rank = 1;
    if (cpus.second >= 0) PinTo(cpus.second);
    rs.guard.peer_alive = [parent]() -> Status {
      return getppid() == parent ? Status::Ok() : UnavailableError("rank 0 has exited");
    };
    int code = 1;
    StatusOr<std::unique_ptr<transport::FileStore>> store = transport::FileStore::Open(dir);
    if (store.ok()) {
      code = RunRank(rs, **store, o);
      (*store)->Set("tperf/bye/1", "1").IgnoreError();
    } else {
      std::fprintf(stderr, "%s: rank 1: %s\n", kProg, store.status().ToString().c_str());
    }
    std::fflush(nullptr);
    _exit(code);
  }
  rs.rank = 0;
  if (cpus.first >= 0) PinTo(cpus.first);
  int child_status = 0;
  bool reaped = false;
  rs.guard.peer_alive = [&]() -> Status {
    if (reaped) return UnavailableError("rank 1 has exited");
    if (waitpid(child, &child_status, WNOHANG) == child) {
      reaped = true;
      return UnavailableError(WIFEXITED(child_status)
                                  ? "rank 1 exited with status " + std::to_string(WEXITSTATUS(child_status))
                                  : "rank 1 was killed by signal " + std::to_string(WTERMSIG(child_status)));
    }
    return Status::Ok();
  };
  int code = 1;
  StatusOr<std::unique_ptr<transport::FileStore>> store = transport::FileStore::Open(dir);
  if (store.ok()) {
    code = RunRank(rs, **store, o);
  } else {
    std::fprintf(stderr, "%s: rank 0: %s\n", kProg, store.status().ToString().c_str());
  }
  // Give rank 1 a moment to finish, then make sure it is gone.
  const auto deadline = Clock::now() + std::chrono::seconds(code == 0 ? 30 : 2);
  while (!reaped && Clock::now() < deadline) {
    if (waitpid(child, &child_status, WNOHANG) == child) {
      reaped = true;
      break;
    }
    usleep(2000);
  }
  if (!reaped) {
    kill(child, SIGKILL);
    waitpid(child, &child_status, 0);
    std::fprintf(stderr, "%s: rank 1 did not finish; killed\n", kProg);
    code = 1;
  } else if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) {
    code = 1;
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return code;
}

// Ranks from the launcher; the TCP store at CIUIC_STORE_ADDR.
int RunJob(const Options& o, const Config& config, const transport::JobInfo& job) {
  RankSetup rs;
  rs.rank = job.rank;
  rs.world_size = job.world_size;
  rs.config = config;
  rs.guard.idle_limit = IdleLimit(config);
  std::unique_ptr<transport::TcpStoreServer> server;
  if (job.rank == 0 && !job.store_external) {
    StatusOr<std::unique_ptr<transport::TcpStoreServer>> s =
        transport::TcpStoreServer::Start("", job.store_port, job.secret);
    if (!s.ok()) {
      std::fprintf(stderr, "%s: rank 0: serving the store on port %u (CIUIC_STORE_ADDR): %s\n", kProg,
                   job.store_port, s.status().ToString().c_str());
      return 1;
    }
    server = std::move(*s);
  }
  StatusOr<std::unique_ptr<transport::TcpStoreClient>> store =
      transport::TcpStoreClient::Connect(job.store_host, job.store_port, job.secret, job.timeout);
  if (!store.ok()) {
    std::fprintf(stderr, "%s: rank %d: store %s:%u: %s\n", kProg, job.rank, job.store_host.c_str(),
                 job.store_port, store.status().ToString().c_str());
    return 1;
  }
  if (job.rank >= 2) return 0;  // only ranks 0 and 1 measure
  // The job id names shared segments: rank 0 makes it, rank 1 reads it.
  if (job.rank == 0) {
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    rs.job_id = "tperf-" + std::string(host) + "-" + std::to_string(getpid()) + "-" +
                std::to_string(std::time(nullptr));
    if (Status s = (*store)->Set("tperf/job", rs.job_id); !s.ok()) {
      std::fprintf(stderr, "%s: rank 0: %s\n", kProg, s.ToString().c_str());
      return 1;
    }
  } else {
    StatusOr<std::string> id = (*store)->Get("tperf/job", job.timeout);
    if (!id.ok()) {
      std::fprintf(stderr, "%s: rank 1: %s\n", kProg, id.status().ToString().c_str());
      return 1;
    }
    rs.job_id = *id;
  }
  rs.how = "0 and 1 of " + std::to_string(job.world_size) + " (" + job.launcher + "), store " +
           job.store_host + ":" + std::to_string(job.store_port);
  int code = RunRank(rs, **store, o);
  if (job.rank == 1) {
    (*store)->Set("tperf/bye/1", "1").IgnoreError();
  } else if (server) {
    // Keep serving the store until rank 1 no longer needs it.
    (*store)->Get("tperf/bye/1", job.timeout).status().IgnoreError();
  }
  return code;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, config.status().message().c_str());
    return 2;
  }
  for (const std::string& name : UnknownEnvKnobs()) {
    std::fprintf(stderr, "%s: warning: %s is not a ciuic knob (typo?)\n", kProg, name.c_str());
  }
  // A peer that dies mid-write must be an error, not a SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  StatusOr<transport::JobInfo> job = transport::DiscoverJob(*config);
  if (!job.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProg, job.status().message().c_str());
    return 2;
  }
  if (job->world_size > 1) {
    if (job->store_host.empty()) {
      std::fprintf(stderr,
                   "%s: launched as rank %d of %d (%s) but CIUIC_STORE_ADDR is not set: set it to "
                   "host:port of the store (rank 0 serves it unless CIUIC_STORE_EXTERNAL=1)\n",
                   kProg, job->rank, job->world_size, job->launcher.c_str());
      return 2;
    }
    return RunJob(o, *config, *job);
  }
  return RunForked(o, *config);
}

}  // namespace
}  // namespace ciuic::perf

int main(int argc, char** argv) { return ciuic::perf::Main(argc, argv); }
