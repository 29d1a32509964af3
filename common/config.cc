#include "ciuic/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace ciuic {
namespace {

// One row of the knob table. `parse` stores the text into the Config or
// returns why it cannot; `print` renders the current value.
struct Knob {
  const char* name;
  const char* default_value;
  const char* doc;
  Status (*parse)(const std::string& text, Config* config);
  std::string (*print)(const Config& config);
};

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status ParseLogLevel(const std::string& text, Config* c) {
  const std::string v = Upper(text);
  if (v == "WARN") c->debug = LogLevel::kWarn;
  else if (v == "INFO") c->debug = LogLevel::kInfo;
  else if (v == "TRACE") c->debug = LogLevel::kTrace;
  else return InvalidArgumentError("expected WARN, INFO or TRACE");
  return Status::Ok();
}

Status ParseSimdTarget(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  static const char* const kNames[] = {"auto", "avx3_dl", "avx3", "avx2", "sse4", "ssse3",
                                       "neon", "sve", "sve2", "emu128", "scalar"};
  for (const char* n : kNames) {
    if (v == n) {
      c->simd_target = v;
      return Status::Ok();
    }
  }
  return InvalidArgumentError("expected auto, avx3, avx2, sse4, ssse3, neon, sve, sve2, emu128 or scalar");
}

Status ParseFp8Pairs(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  for (const char* n : {"auto", "avx512fp16", "avx512", "f16c", "f32"}) {
    if (v == n) {
      c->fp8_pairs = v;
      return Status::Ok();
    }
  }
  return InvalidArgumentError("expected auto, avx512fp16, avx512, f16c or f32");
}

Status ParseTile(const std::string& text, Config* c) {
  if (text == "auto") {
    c->kernel_tile_bytes = 0;
    return Status::Ok();
  }
  CIUIC_ASSIGN_OR_RETURN(uint64_t v, ParseByteSize(text));
  if (v != 0 && (v < 1024 || v > 64u * 1024u)) {
    return InvalidArgumentError("tile must be 0 (auto) or between 1K and 64K bytes");
  }
  c->kernel_tile_bytes = v;
  return Status::Ok();
}

Status ParseNt(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  if (v == "auto" || v == "-1") {
    c->kernel_nt_threshold = -1;
    return Status::Ok();
  }
  if (v == "never" || v == "0") {
    c->kernel_nt_threshold = 0;
    return Status::Ok();
  }
  CIUIC_ASSIGN_OR_RETURN(uint64_t b, ParseByteSize(text));
  c->kernel_nt_threshold = static_cast<int64_t>(b);
  return Status::Ok();
}

Status ParsePrefetch(const std::string& text, Config* c) {
  CIUIC_ASSIGN_OR_RETURN(uint64_t b, ParseByteSize(text));
  if (b > 64u * 1024u) return InvalidArgumentError("prefetch distance must be at most 64K bytes");
  c->kernel_prefetch_bytes = b;
  return Status::Ok();
}

Status ParseIbHca(const std::string& text, Config* c) {
  // Syntax only (the names are checked against the topology when used):
  // [^|=]name[:port](,name[:port])*.
  size_t i = 0;
  if (i < text.size() && text[i] == '^') ++i;
  if (i < text.size() && text[i] == '=') ++i;
  const std::string list = text.substr(i);
  if (!text.empty() && list.empty()) return InvalidArgumentError("empty device list");
  size_t start = 0;
  while (!list.empty() && start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (name.empty()) return InvalidArgumentError("empty device name in '" + text + "'");
    if (colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      if (port.empty() || port.size() > 3 ||
          !std::all_of(port.begin(), port.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
        return InvalidArgumentError("bad port in '" + item + "' (expected name[:port], e.g. mlx5_0:1)");
      }
    }
    start = end + 1;
  }
  c->ib_hca = text;
  return Status::Ok();
}

Status ParseProgressCpu(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  if (v == "auto" || v == "-1") {
    c->progress_cpu = Config::kProgressCpuAuto;
    return Status::Ok();
  }
  if (v == "none") {
    c->progress_cpu = Config::kProgressCpuNone;
    return Status::Ok();
  }
  if (v.empty() || v.size() > 6 ||
      !std::all_of(v.begin(), v.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
    return InvalidArgumentError("expected auto, none or a CPU number");
  }
  c->progress_cpu = static_cast<int>(std::strtol(v.c_str(), nullptr, 10));  // at most 6 digits
  return Status::Ok();
}

Status ParseNumaPolicy(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  if (v != "bind" && v != "preferred" && v != "interleave" && v != "local") {
    return InvalidArgumentError("expected bind, preferred, interleave or local");
  }
  c->numa_policy = v;
  return Status::Ok();
}

bool AllDigits(const std::string& v) {
  return !v.empty() &&
         std::all_of(v.begin(), v.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); });
}

// A non-negative int below 2^31 ("" is an error).
StatusOr<int> ParseCount(const std::string& text) {
  if (!AllDigits(text) || text.size() > 10) return InvalidArgumentError("expected a non-negative integer");
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (v > 0x7fffffffull) return InvalidArgumentError("out of range");
  return static_cast<int>(v);
}

Status ParseRank(const std::string& text, Config* c) {
  CIUIC_ASSIGN_OR_RETURN(c->rank, ParseCount(text));
  return Status::Ok();
}

Status ParseWorldSize(const std::string& text, Config* c) {
  CIUIC_ASSIGN_OR_RETURN(int v, ParseCount(text));
  if (v == 0) return InvalidArgumentError("world size must be at least 1");
  c->world_size = v;
  return Status::Ok();
}

Status ParseStoreAddr(const std::string& text, Config* c) {
  if (text.empty()) {
    c->store_addr.clear();
    return Status::Ok();
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgumentError("expected host:port");
  const std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') return InvalidArgumentError("expected [v6address]:port");
  StatusOr<int> port = ParseCount(text.substr(colon + 1));
  if (!port.ok() || *port < 1 || *port > 65535) return InvalidArgumentError("port must be 1..65535");
  c->store_addr = text;
  return Status::Ok();
}

Status ParseStoreExternal(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") c->store_external = true;
  else if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) c->store_external = false;
  else return InvalidArgumentError("expected 0 or 1");
  return Status::Ok();
}

Status ParseTimeoutMs(const std::string& text, Config* c) {
  if (!AllDigits(text) || text.size() > 12) return InvalidArgumentError("expected milliseconds (a positive integer)");
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (v <= 0) return InvalidArgumentError("timeout must be positive");
  c->timeout_ms = v;
  return Status::Ok();
}

// Integer knob stored in Config::*Field, accepted in [Lo, Hi].
template <int Config::*Field, int Lo, int Hi>
Status ParseIntIn(const std::string& text, Config* c) {
  const bool negative = !text.empty() && text[0] == '-';
  StatusOr<int> v = ParseCount(negative ? text.substr(1) : text);
  const int value = v.ok() ? (negative ? -*v : *v) : 0;
  if (!v.ok() || value < Lo || value > Hi) {
    return InvalidArgumentError("expected an integer in [" + std::to_string(Lo) + ", " +
                                std::to_string(Hi) + "]");
  }
  c->*Field = value;
  return Status::Ok();
}
template <int Config::*Field>
std::string PrintInt(const Config& c) {
  return std::to_string(c.*Field);
}

// Byte-size knob stored in Config::*Field, accepted in [Lo, Hi].
template <size_t Config::*Field, uint64_t Lo, uint64_t Hi>
Status ParseSizeIn(const std::string& text, Config* c) {
  CIUIC_ASSIGN_OR_RETURN(uint64_t v, ParseByteSize(text));
  if (v < Lo || v > Hi) {
    return InvalidArgumentError("expected a size in [" + std::to_string(Lo) + ", " +
                                std::to_string(Hi) + "] bytes");
  }
  c->*Field = static_cast<size_t>(v);
  return Status::Ok();
}
template <size_t Config::*Field>
std::string PrintSize(const Config& c) {
  return std::to_string(c.*Field);
}

Status ParseTransport(const std::string& text, Config* c) {
  const std::string v = Lower(text);
  if (v != "auto" && v != "shm" && v != "tcp" && v != "verbs") {
    return InvalidArgumentError("expected auto, shm, tcp or verbs");
  }
  c->transport = v;
  return Status::Ok();
}

const Knob kKnobs[] = {
    {"CIUIC_DEBUG", "WARN", "log level: WARN, INFO or TRACE", ParseLogLevel,
     [](const Config& c) { return std::string(LogLevelName(c.debug)); }},
    {"CIUIC_DEBUG_FILE", "", "log to this file instead of stderr (%h host, %p pid, %r rank)",
     [](const std::string& t, Config* c) {
       c->debug_file = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.debug_file; }},
    {"CIUIC_SIMD_TARGET", "auto",
     "highest SIMD target for the kernels: auto, avx3, avx2, sse4, ssse3, scalar, ...",
     ParseSimdTarget, [](const Config& c) { return c.simd_target; }},
    {"CIUIC_FP8_PAIRS", "auto",
     "kernel for two-input fp8 sum/avg: auto, avx512fp16, avx512, f16c or f32 (the target's widening one); "
     "every one gives the same bytes",
     ParseFp8Pairs, [](const Config& c) { return c.fp8_pairs; }},
    {"CIUIC_KERNEL_TILE", "0", "L1 tile in bytes for reductions of more than 4 inputs (0 = auto)",
     ParseTile, [](const Config& c) { return std::to_string(c.kernel_tile_bytes); }},
    {"CIUIC_KERNEL_NT_THRESHOLD", "auto",
     "output bytes from which kernels use non-temporal stores (auto, never, or a size)", ParseNt,
     [](const Config& c) {
       if (c.kernel_nt_threshold < 0) return std::string("auto");
       if (c.kernel_nt_threshold == 0) return std::string("never");
       return std::to_string(c.kernel_nt_threshold);
     }},
    {"CIUIC_KERNEL_PREFETCH", "1024",
     "software prefetch distance in bytes for streams larger than L2 (0 = off; the two-input fp8 kernels go 3x as far)", ParsePrefetch,
     [](const Config& c) { return std::to_string(c.kernel_prefetch_bytes); }},
    {"CIUIC_TOPO_FILE", "", "hwloc XML topology to use instead of discovering this machine",
     [](const std::string& t, Config* c) {
       c->topo_file = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.topo_file; }},
    {"CIUIC_IB_HCA", "",
     "RDMA devices to use, as NCCL_IB_HCA: mlx5_0:1,mlx5_1:1 (prefix match; '=' exact, '^' exclude)",
     ParseIbHca, [](const Config& c) { return c.ib_hca; }},
    {"CIUIC_PROGRESS_CPU", "auto",
     "CPU for the progress thread: auto (one no local rank uses, near the NIC, else it stays with its rank), none, or a CPU number",
     ParseProgressCpu,
     [](const Config& c) {
       if (c.progress_cpu == Config::kProgressCpuAuto) return std::string("auto");
       if (c.progress_cpu == Config::kProgressCpuNone) return std::string("none");
       return std::to_string(c.progress_cpu);
     }},
    {"CIUIC_NUMA_POLICY", "preferred",
     "NUMA binding of buffer pools: bind, preferred, interleave or local (first touch)",
     ParseNumaPolicy, [](const Config& c) { return c.numa_policy; }},
    {"CIUIC_RANK", "", "this process's rank (unset: taken from the launcher: Open MPI, Slurm, PMI)",
     ParseRank, [](const Config& c) { return c.rank < 0 ? std::string() : std::to_string(c.rank); }},
    {"CIUIC_WORLD_SIZE", "", "number of ranks (unset: taken from the launcher)", ParseWorldSize,
     [](const Config& c) { return c.world_size < 0 ? std::string() : std::to_string(c.world_size); }},
    {"CIUIC_STORE_ADDR", "", "rendezvous store address, host:port (rank 0 serves it unless external)",
     ParseStoreAddr, [](const Config& c) { return c.store_addr; }},
    {"CIUIC_STORE_EXTERNAL", "0", "1 = the store is served elsewhere; rank 0 does not start one",
     ParseStoreExternal, [](const Config& c) { return std::string(c.store_external ? "1" : "0"); }},
    {"CIUIC_SECRET", "", "job secret every store client must prove (printed as '(set)')",
     [](const std::string& t, Config* c) {
       c->secret = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.secret.empty() ? std::string() : std::string("(set)"); }},
    {"CIUIC_SECRET_FILE", "", "file holding the job secret (must not be world-readable)",
     [](const std::string& t, Config* c) {
       c->secret_file = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.secret_file; }},
    {"CIUIC_TIMEOUT_MS", "300000", "timeout of bootstrap operations (store connect, get, wait) in ms",
     ParseTimeoutMs, [](const Config& c) { return std::to_string(c.timeout_ms); }},
    {"CIUIC_LOCAL_RANK", "-1", "rank among this host's ranks (set by ciuic-run; -1 = unknown)",
     ParseIntIn<&Config::local_rank, -1, 1 << 20>, PrintInt<&Config::local_rank>},
    {"CIUIC_TRANSPORT", "auto",
     "data transport: auto (shm within a host, else verbs if usable, else tcp), shm, tcp, verbs",
     ParseTransport, [](const Config& c) { return c.transport; }},
    {"CIUIC_BUFFER_SIZE", "4194304",
     "bytes of each connection's receive ring (slot count = buffer size / chunk size)",
     ParseSizeIn<&Config::buffer_size, 4096, (1ull << 30)>, PrintSize<&Config::buffer_size>},
    {"CIUIC_CHUNK_SIZE", "524288", "bytes of one ring slot, the unit of pipelining",
     ParseSizeIn<&Config::chunk_size, 1024, (1ull << 30)>, PrintSize<&Config::chunk_size>},
    {"CIUIC_SCRATCH_MAX", "1073741824",
     "scratch a gathering schedule (swinglat) may take: the larger of this and twice the call's buffer (more is an "
     "error naming the algorithm)",
     ParseSizeIn<&Config::scratch_max_bytes, 1, (1ull << 40)>, PrintSize<&Config::scratch_max_bytes>},
    {"CIUIC_SOCKET_IFNAME", "",
     "network interface for tcp: prefix match, '=' exact, '^' exclude (empty = first up non-loopback)",
     [](const std::string& t, Config* c) {
       c->socket_ifname = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.socket_ifname; }},
    {"CIUIC_SOCKET_NSOCKS", "1", "tcp sockets per peer connection, writes striped across them (1-16)",
     ParseIntIn<&Config::socket_nsocks, 1, 16>, PrintInt<&Config::socket_nsocks>},
    {"CIUIC_IB_GID_INDEX", "-1",
     "verbs GID index (-1 = IPv4-mapped RoCE v2 GID, or GID 0 on InfiniBand)",
     ParseIntIn<&Config::ib_gid_index, -1, 255>, PrintInt<&Config::ib_gid_index>},
    {"CIUIC_IB_TIMEOUT", "20", "verbs local ACK timeout exponent: 4.096 us * 2^t (1-31)",
     ParseIntIn<&Config::ib_timeout, 1, 31>, PrintInt<&Config::ib_timeout>},
    {"CIUIC_IB_RETRY_CNT", "7", "verbs transport retry count (0-7)",
     ParseIntIn<&Config::ib_retry_cnt, 0, 7>, PrintInt<&Config::ib_retry_cnt>},
    {"CIUIC_ALGO", "auto", "collective algorithm: auto (a tuning-file rule, else the cheapest prediction), a name (forced for every collective that has it), or COLLECTIVE:NAME items, comma-separated; `ciuic-info --algorithms` lists the names",
     [](const std::string& t, Config* c) {
       if (t.empty()) return InvalidArgumentError("expected auto or an algorithm name");
       c->algo = Lower(t);
       return Status::Ok();
     },
     [](const Config& c) { return c.algo; }},
    {"CIUIC_NCHANNELS", "1", "parallel channels (rings / connections per peer) of a collective (1-16)",
     ParseIntIn<&Config::nchannels, 1, 16>, PrintInt<&Config::nchannels>},
    {"CIUIC_KNOMIAL_RADIX", "0", "radix of the knomial algorithms (2-64; 0 = 4); every rank the same",
     [](const std::string& t, Config* c) {
       Config probe;
       if (Status s = ParseIntIn<&Config::knomial_radix, 0, 64>(t, &probe); !s.ok()) return s;
       if (probe.knomial_radix == 1) return InvalidArgumentError("expected 0 or an integer in [2, 64]");
       c->knomial_radix = probe.knomial_radix;
       return Status::Ok();
     },
     PrintInt<&Config::knomial_radix>},
    {"CIUIC_PAT_AGGREGATION", "0",
     "PAT's aggregation: at most A blocks per message, scratch for about A x log2(n/A) blocks (a power of two; 0 = all while n blocks fit 16 Mi elements); every rank the same",
     [](const std::string& t, Config* c) {
       Config probe;
       if (Status s = ParseIntIn<&Config::pat_aggregation, 0, 1 << 24>(t, &probe); !s.ok()) return s;
       const int a = probe.pat_aggregation;
       if ((a & (a - 1)) != 0) return InvalidArgumentError("expected 0 or a power of two up to 2^24");
       c->pat_aggregation = a;
       return Status::Ok();
     },
     PrintInt<&Config::pat_aggregation>},
    {"CIUIC_PROGRESS", "thread",
     "who runs collectives: thread (a progress thread; async calls overlap) or caller",
     [](const std::string& t, Config* c) {
       const std::string v = Lower(t);
       if (v != "thread" && v != "caller") return InvalidArgumentError("expected thread or caller");
       c->progress = v;
       return Status::Ok();
     },
     [](const Config& c) { return c.progress; }},
    {"CIUIC_ACCUMULATE", "wire",
     "partial sums of f16/bf16/e4m3/e5m2 reductions between the hops of network algorithms: wire (rounded at every hop, as NCCL) or f32 (rounded once at the end; partials sent in f32, 2x/4x the bytes)",
     [](const std::string& t, Config* c) {
       const std::string v = Lower(t);
       if (v != "f32" && v != "wire") return InvalidArgumentError("expected f32 or wire");
       c->accumulate = v;
       return Status::Ok();
     },
     [](const Config& c) { return c.accumulate; }},
    {"CIUIC_SHM_CMA", "auto",
     "single-copy direct shm all-reduce (process_vm_readv from the peers' buffers): auto (where measured faster than the shared slots, when every rank can read every other's memory), on (always within the limits; an error when it cannot) or off; every rank the same",
     [](const std::string& t, Config* c) {
       const std::string v = Lower(t);
       if (v != "auto" && v != "on" && v != "off") return InvalidArgumentError("expected auto, on or off");
       c->shm_cma = v;
       return Status::Ok();
     },
     [](const Config& c) { return c.shm_cma; }},
    {"CIUIC_SHM_CMA_MIN", "262144", "smallest all-reduce (bytes) the single-copy shm path takes; every rank the same",
     ParseSizeIn<&Config::shm_cma_min, 0, (1ull << 40)>, PrintSize<&Config::shm_cma_min>},
    {"CIUIC_SHM_CMA_MAX", "67108864", "largest all-reduce (bytes) the single-copy shm path takes; every rank the same",
     ParseSizeIn<&Config::shm_cma_max, 0, (1ull << 40)>, PrintSize<&Config::shm_cma_max>},
    {"CIUIC_HOST_ID", "",
     "splits this machine into hosts for the transport choice: ranks with different ids talk as if on different machines (tcp/verbs, not shm); letters, digits, '-', '_', '.', at most 64",
     [](const std::string& t, Config* c) {
       if (t.size() > 64 || std::any_of(t.begin(), t.end(), [](char ch) {
             return !std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.';
           })) {
         return InvalidArgumentError("expected at most 64 letters, digits, '-', '_' or '.'");
       }
       c->host_id = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.host_id; }},
    {"CIUIC_TUNING_FILE", "",
     "tuning file from ciuic-tune: measured cost-model parameters and algorithm crossovers (empty = built-in)",
     [](const std::string& t, Config* c) {
       c->tuning_file = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.tuning_file; }},
    {"CIUIC_GPU", "auto",
     "GPU (CUDA) buffers: auto (NCCL when every rank has its own GPU, else through host copies), nccl, host, off (host buffers only)",
     [](const std::string& t, Config* c) {
       const std::string v = Lower(t);
       if (v != "auto" && v != "nccl" && v != "host" && v != "off") return InvalidArgumentError("expected auto, nccl, host or off");
       c->gpu = v;
       return Status::Ok();
     },
     [](const Config& c) { return c.gpu; }},
    {"CIUIC_NCCL_LIB", "libnccl.so.2", "the NCCL library loaded for GPU buffers (a dlopen name or a path)",
     [](const std::string& t, Config* c) {
       if (t.empty()) return InvalidArgumentError("expected a library name or path");
       c->nccl_lib = t;
       return Status::Ok();
     },
     [](const Config& c) { return c.nccl_lib; }},
    {"CIUIC_IB_QPS_PER_PEER", "1", "verbs queue pairs per connection, writes striped across them (1-16)",
     ParseIntIn<&Config::ib_qps_per_peer, 1, 16>, PrintInt<&Config::ib_qps_per_peer>},
};

const Knob* FindKnob(const std::string& name) {
  for (const Knob& k : kKnobs) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

Status ApplyKnob(const Knob& k, const std::string& value, Config* c) {
  Status s = k.parse(value, c);
  if (!s.ok()) {
    return InvalidArgumentError(std::string(k.name) + "='" + value + "': " + s.message());
  }
  return Status::Ok();
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
  }
  return "WARN";
}

StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  if (text.empty()) return InvalidArgumentError("empty size");
  const char* p = text.c_str();
  if (!std::isdigit(static_cast<unsigned char>(*p))) {
    return InvalidArgumentError("'" + text + "' is not a size (e.g. 4096, 64K, 1M)");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long base = std::strtoull(p, &end, 10);
  if (errno != 0) return InvalidArgumentError("'" + text + "' is out of range");
  std::string suffix = Upper(end);
  uint64_t mult = 1;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      case 'B': mult = 1; break;
      default: return InvalidArgumentError("'" + text + "': unknown unit '" + suffix + "'");
    }
    const std::string rest = suffix.substr(1);  // after K/M/G or B
    const bool ok = suffix[0] == 'B' ? rest.empty() : (rest.empty() || rest == "B" || rest == "IB");
    if (!ok) {
      return InvalidArgumentError("'" + text + "': unknown unit '" + suffix + "'");
    }
  }
  if (base > UINT64_MAX / mult) return InvalidArgumentError("'" + text + "' is out of range");
  return static_cast<uint64_t>(base * mult);
}

StatusOr<Config> Config::FromLookup(const std::function<const char*(const char*)>& lookup) {
  Config c;
  for (const Knob& k : kKnobs) {
    const char* v = lookup(k.name);
    if (v == nullptr) continue;
    CIUIC_RETURN_IF_ERROR(ApplyKnob(k, v, &c));
    c.from_env.emplace_back(k.name);
  }
  return c;
}

StatusOr<Config> Config::FromEnv() {
  return FromLookup([](const char* name) { return std::getenv(name); });
}

Status Config::Set(const std::string& name, const std::string& value) {
  const Knob* k = FindKnob(name);
  if (k == nullptr) return NotFoundError("no knob named " + name);
  CIUIC_RETURN_IF_ERROR(ApplyKnob(*k, value, this));
  from_env.erase(std::remove(from_env.begin(), from_env.end(), name), from_env.end());
  from_env.push_back("=" + name);  // "=" marks a programmatic set
  return Status::Ok();
}

std::vector<KnobDescription> DescribeKnobs(const Config& config) {
  std::vector<KnobDescription> out;
  for (const Knob& k : kKnobs) {
    KnobDescription d;
    d.name = k.name;
    d.value = k.print(config);
    d.default_value = k.default_value;
    d.doc = k.doc;
    d.source = "default";
    for (const std::string& n : config.from_env) {
      if (n == k.name) d.source = "env";
      if (n == std::string("=") + k.name) d.source = "set";
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> UnknownEnvKnobs() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "CIUIC_", 6) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    std::string name = eq ? std::string(*e, static_cast<size_t>(eq - *e)) : std::string(*e);
    if (name.rfind("CIUIC_TEST_", 0) == 0) continue;
    if (FindKnob(name) == nullptr) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ciuic
