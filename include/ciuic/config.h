// ciuic::Config: every tunable knob of the library in one struct, read from
// CIUIC_* environment variables through a single table (name, default, doc,
// parser). A bad value is an error naming the variable, never a silent
// default. Nothing is cached globally: build a Config where you need one
// (tests vary any knob by building their own).
// Thread contract: a Config is a value; FromEnv() reads the environment and
// may run concurrently with other readers (not with setenv).
#ifndef CIUIC_CONFIG_H_
#define CIUIC_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic {

enum class LogLevel : int { kWarn = 0, kInfo = 1, kTrace = 2 };

struct Config {
  // CIUIC_DEBUG: WARN|INFO|TRACE.
  LogLevel debug = LogLevel::kWarn;
  // CIUIC_DEBUG_FILE: log file instead of stderr; %h host, %p pid, %r rank.
  std::string debug_file;
  // CIUIC_SIMD_TARGET: highest SIMD target the kernels may use
  // (auto = the best this CPU supports; e.g. avx3, avx2, sse4, scalar).
  std::string simd_target = "auto";
  // CIUIC_FP8_PAIRS: the kernel for two-input fp8 sum and avg: auto (on
  // the AVX3 targets the AVX512-FP16 one where the CPU has it, else the
  // AVX-512 one; on AVX2 the F16C one; else f32), avx512fp16, avx512, f16c,
  // or f32 (the target's own, widening to f32). All round alike.
  std::string fp8_pairs = "auto";
  // CIUIC_KERNEL_TILE: bytes of the L1-resident tile used for n-ary
  // reductions with more than 4 inputs (0 = auto: a quarter of L1d).
  size_t kernel_tile_bytes = 0;
  // CIUIC_KERNEL_NT_THRESHOLD: output size in bytes from which kernels use
  // non-temporal stores (-1 = auto: half the last-level cache, capped at
  // 32 MiB; 0 = never).
  int64_t kernel_nt_threshold = -1;
  // CIUIC_KERNEL_PREFETCH: software prefetch distance in bytes for streams
  // larger than L2 (0 = off; the two-input fp8 kernels go 3x as far).
  size_t kernel_prefetch_bytes = 1024;

  // CIUIC_TOPO_FILE: hwloc XML file to use instead of discovering this
  // machine (empty = discover).
  std::string topo_file;
  // CIUIC_IB_HCA: RDMA devices to use, as NCCL_IB_HCA: "mlx5_0:1,mlx5_1:1"
  // (prefix match; a leading "=" for exact names, "^" to exclude instead).
  // Empty = all, nearest first.
  std::string ib_hca;
  // CIUIC_PROGRESS_CPU: OS CPU for the progress thread; kProgressCpuAuto
  // (the topology plan's: a CPU no local rank uses, near the NIC, else the
  // rank's own; topology::RankPlan) or kProgressCpuNone (do not pin).
  static constexpr int kProgressCpuAuto = -1;
  static constexpr int kProgressCpuNone = -2;
  int progress_cpu = kProgressCpuAuto;
  // CIUIC_NUMA_POLICY: binding of buffer pools to their NUMA node:
  // bind, preferred, interleave or local (first touch).
  std::string numa_policy = "preferred";

  // Rendezvous (transport/ bootstrap). CIUIC_RANK / CIUIC_WORLD_SIZE: this
  // process's rank and the number of ranks; -1 = not set (the launcher's
  // variables are used instead, see ciuic::transport::DiscoverJob).
  int rank = -1;
  int world_size = -1;
  // CIUIC_LOCAL_RANK: rank among the ranks of this host (set by ciuic-run);
  // -1 = not set.
  int local_rank = -1;
  // CIUIC_STORE_ADDR: host:port (or [v6addr]:port) of the rendezvous store.
  std::string store_addr;
  // CIUIC_STORE_EXTERNAL: true = the store is served by someone else; rank 0
  // does not start a server.
  bool store_external = false;
  // CIUIC_SECRET: the job secret every store client must prove (never
  // printed). CIUIC_SECRET_FILE: file holding it (not world-readable).
  std::string secret;
  std::string secret_file;
  // CIUIC_TIMEOUT_MS: timeout of bootstrap operations in milliseconds.
  int64_t timeout_ms = 300000;

  // Data transports (transport/ backends). CIUIC_TRANSPORT: auto, shm, tcp or
  // verbs (auto: shm between ranks of one host, else verbs when a device is
  // usable, else tcp).
  std::string transport = "auto";
  // CIUIC_BUFFER_SIZE: bytes of the receive ring of each connection (slot
  // size x slot count). CIUIC_CHUNK_SIZE: bytes of one slot, the unit of
  // pipelining; the ring has buffer_size / chunk_size slots (at least 2),
  // plus one slot of slack (see transport::Link): as many full chunks as
  // slots are always under way, and smaller chunks take only their bytes
  // (up to max(slots, 64) chunks).
  size_t buffer_size = 4u << 20;
  size_t chunk_size = 512u << 10;
  // CIUIC_SCRATCH_MAX: a schedule that gathers every rank's vector
  // (swinglat) may take the larger of this and twice the call's buffer as
  // scratch; a call over it is an error naming the algorithm, not an
  // allocation that takes the host down. Must match on every rank.
  size_t scratch_max_bytes = size_t{1} << 30;
  // TCP backend: CIUIC_SOCKET_IFNAME (interface by prefix, '=' exact, '^'
  // exclude; empty = the first non-loopback interface that is up, else lo),
  // CIUIC_SOCKET_NSOCKS sockets per peer connection.
  std::string socket_ifname;
  int socket_nsocks = 1;
  // Verbs backend: CIUIC_IB_GID_INDEX (-1 = the IPv4-mapped RoCE v2 GID, or
  // the port's GID 0 on InfiniBand), CIUIC_IB_TIMEOUT (local ACK timeout,
  // 4.096 us * 2^t), CIUIC_IB_RETRY_CNT, CIUIC_IB_QPS_PER_PEER (queue pairs
  // striped per connection).
  int ib_gid_index = -1;
  int ib_timeout = 20;
  int ib_retry_cnt = 7;
  int ib_qps_per_peer = 1;

  // Collectives. CIUIC_ALGO: auto (a CIUIC_TUNING_FILE rule, else the
  // cheapest prediction), an algorithm name (forced for every collective
  // that has it: ring, tree, direct, ...; `ciuic-info --algorithms` lists
  // them) or COLLECTIVE:NAME items, comma-separated; checked when a
  // communicator is created. CIUIC_NCHANNELS: parallel rings /
  // connections per peer; CIUIC_PROGRESS: "thread" (a progress thread runs
  // the operations, so async calls overlap the caller's work) or "caller"
  // (operations run inside wait/test and the blocking calls).
  std::string algo = "auto";
  int nchannels = 1;
  // CIUIC_KNOMIAL_RADIX: the k-nomial algorithms' radix, 2-64 (0: 4).
  // CIUIC_PAT_AGGREGATION: PAT's aggregation, at most this many blocks per
  // message and scratch for about A x log2(n / A) blocks, a power of two
  // (0: all blocks while n of them stay under 16 Mi elements, else the
  // largest whose scratch does). Every rank must set the same of each.
  int knomial_radix = 0;
  int pat_aggregation = 0;
  std::string progress = "thread";
  // CIUIC_ACCUMULATE: how reductions of f16/bf16/e4m3/e5m2 keep their
  // partial sums between the hops of a network algorithm (ring, tree, ...):
  // "wire" (rounded to the type at every hop, as NCCL does: the bytes the
  // type was chosen to save) or "f32" (kept in f32 and rounded once at the
  // end: f32 partials on the wire, two / four times the bytes). The
  // shared-memory family rounds once in either mode. Every rank must set
  // the same.
  std::string accumulate = "wire";
  // CIUIC_SHM_CMA: how the direct shared-memory all-reduce moves messages
  // of CIUIC_SHM_CMA_MIN to CIUIC_SHM_CMA_MAX bytes: auto (with one copy,
  // reading the peers' buffers with process_vm_readv, where that measures
  // faster than the shared slots and every rank can read every other's
  // memory: same user, no Yama ptrace restriction, not blocked by
  // seccomp), on (always single-copy; an error when it cannot) or off
  // (always through the slots). Every rank must set the same of each.
  std::string shm_cma = "auto";
  size_t shm_cma_min = 256u << 10;
  size_t shm_cma_max = 64u << 20;
  // CIUIC_HOST_ID: appended to what identifies this rank's host (boot id,
  // pid namespace, host name), so ranks of one machine that set different
  // ids count as different hosts (tcp or verbs between them, as between
  // machines). It can split a machine, never join two. Empty: unset.
  std::string host_id;
  // CIUIC_TUNING_FILE: a tuning file written by ciuic-tune (cost-model
  // parameters per backend and measured algorithm crossovers); empty = the
  // built-in defaults.
  std::string tuning_file;

  // GPU buffers (CUDA device memory passed to a collective). CIUIC_GPU:
  // auto (NCCL when it loads and every rank has a GPU of its own, else the
  // operation runs on host copies of the buffers), nccl (NCCL or an error
  // naming why not), host (always host copies), off (buffers are never
  // looked at: host memory only; no CUDA driver is loaded).
  // CIUIC_NCCL_LIB: the NCCL library to load (dlopen name or path).
  std::string gpu = "auto";
  std::string nccl_lib = "libnccl.so.2";

  // Names of the knobs whose value came from the environment.
  std::vector<std::string> from_env;

  // Defaults overridden by every CIUIC_* variable in the environment.
  // Errors: kInvalidArgument naming the variable and the bad value.
  static StatusOr<Config> FromEnv();
  // The same with `lookup(name)` (nullptr = unset) instead of getenv.
  static StatusOr<Config> FromLookup(const std::function<const char*(const char*)>& lookup);
  // Sets one knob by its variable name from text, exactly as the
  // environment would. Errors: kNotFound (unknown name), kInvalidArgument.
  Status Set(const std::string& name, const std::string& value);
};

struct KnobDescription {
  std::string name;           // e.g. "CIUIC_DEBUG"
  std::string value;          // current value as text
  std::string default_value;  // the table's default
  std::string source;         // "default", "env" or "set"
  std::string doc;
};

// Every knob of the table with its value in `config` and where it came from.
std::vector<KnobDescription> DescribeKnobs(const Config& config);

// CIUIC_* variables set in the environment that name no knob (typos);
// CIUIC_TEST_* (test-harness switches) are not reported.
std::vector<std::string> UnknownEnvKnobs();

// Parses "4096", "64K", "1M", "2G" (binary multiples; an optional trailing
// "B" or "iB" is accepted). Errors: kInvalidArgument.
StatusOr<uint64_t> ParseByteSize(const std::string& text);

const char* LogLevelName(LogLevel level);

}  // namespace ciuic

#endif  // CIUIC_CONFIG_H_
