// allreduce_perf and the other *_perf: nccl-tests conventions over ciuic's
// communicator. One source, one executable per collective (CIUIC_PERF_OP).
//
// Ranks: under a launcher (CIUIC_RANK/CIUIC_WORLD_SIZE + CIUIC_STORE_ADDR,
// mpirun, srun) each process is one rank; otherwise `-N n` forks n local
// ranks that meet at a store served by the parent (default 1 rank).
// Columns (nccl-tests doc/PERFORMANCE.md): size count type redop root |
// out-of-place time algbw busbw #wrong | in-place time algbw busbw #wrong.
// time = the slowest rank's mean per iteration (us); algbw = size / time;
// busbw = algbw x the collective's factor (all-reduce 2(n-1)/n, all-gather
// and reduce-scatter and all-to-all (n-1)/n, broadcast and reduce 1).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#ifdef CIUIC_PERF_CUDA
#include <cuda_runtime.h>
#endif

#include "ciuic/collectives.h"
#include "ciuic/config.h"
#include "collectives/registry.h"
#include "kernels/reference.h"
#include "transport/transport.h"
#include "common/version.h"

#ifndef CIUIC_PERF_OP
#define CIUIC_PERF_OP "allreduce"
#endif

namespace {

using ciuic::Communicator;
using ciuic::DataType;
using ciuic::ReduceOp;
using ciuic::Status;
using Clock = std::chrono::steady_clock;

enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

struct Options {
  std::string op = CIUIC_PERF_OP;
  Coll coll = Coll::kAllReduce;  // `op`, parsed once (the timed loop switches on it)
  size_t min_bytes = 8, max_bytes = 64u << 20;
  double factor = 2;
  long step_bytes = 0;  // -i: additive step instead of factor
  int iters = 0;        // 0 = auto by size
  int warmup = 3;
  int check = 1;
  std::string redop = "sum";
  std::string dtype = "float";
  int root = 0;
  int nranks = 1;
  std::string algo;     // --algo: sets CIUIC_ALGO
  std::string transport;
  std::string format = "table";
  bool inplace = true;
  bool cuda = false;  // --mem cuda: buffers in GPU memory (cudaMalloc)
};

// The registry's collective this tool runs ("reduce_scatter" is reducescatter).
ciuic::collectives::Collective ThisCollective() {
  std::string name = CIUIC_PERF_OP;
  name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
  return *ciuic::collectives::ParseCollective(name);
}

[[noreturn]] void Usage(const char* argv0, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "%s: %s\n", argv0, error.c_str());
  const std::string algos = ciuic::collectives::AlgorithmNamesFor(ThisCollective());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: %s [-N ranks] [-b minbytes] [-e maxbytes] [-f factor | -i step] [-n iters]\n"
               "          [-w warmup] [-c 0|1] [-o sum|prod|min|max|avg] [-d float|double|half|bfloat16|f8e4m3|f8e5m2|int8|uint8|int16|uint16|int32|uint32|int64|uint64]\n"
               "          [-r root] [-a algo] [-t shm|tcp|verbs] [--no-inplace] [--format table|csv|json]\n"
               "          [--mem host|cuda]\n"
               "  -N  local ranks to fork when not started by a launcher (default 1)\n"
               "  -a  algorithm of %s: auto, %s (CIUIC_ALGO=%s:NAME; ciuic-info lists them all)\n"
               "  --mem  where the buffers live: host (default) or cuda (GPU memory; CIUIC_GPU decides\n"
               "         between NCCL and host copies; builds with CUDA only)\n"
               "  sizes take K/M/G suffixes; -n 0 = scaled by size\n",
               argv0, CIUIC_PERF_OP, algos.c_str(), ciuic::collectives::CollectiveName(ThisCollective()));
  std::exit(error.empty() ? 0 : 2);
}

size_t Bytes(const char* argv0, const char* flag, const char* v) {
  auto r = ciuic::ParseByteSize(v);
  if (!r.ok()) Usage(argv0, std::string(flag) + ": " + r.status().message());
  return *r;
}
int Int(const char* argv0, const char* flag, const char* v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
    Usage(argv0, std::string(flag) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  }
  return static_cast<int>(x);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Usage(argv[0], a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") Usage(argv[0], "");
    else if (a == "-b") o.min_bytes = Bytes(argv[0], "-b", next());
    else if (a == "-e") o.max_bytes = Bytes(argv[0], "-e", next());
    else if (a == "-f") {
      const char* v = next();
      char* end = nullptr;
      o.factor = std::strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o.factor > 1.0)) {
        Usage(argv[0], std::string("-f: factor must be a number > 1, got '") + v + "'");
      }
    } else if (a == "-i") o.step_bytes = static_cast<long>(Bytes(argv[0], "-i", next()));
    else if (a == "-n") o.iters = Int(argv[0], "-n", next(), 0, 1000000);
    else if (a == "-w") o.warmup = Int(argv[0], "-w", next(), 0, 100000);
    else if (a == "-c") o.check = Int(argv[0], "-c", next(), 0, 1);
    else if (a == "-o") o.redop = next();
    else if (a == "-d") o.dtype = next();
    else if (a == "-r") o.root = Int(argv[0], "-r", next(), 0, 1 << 20);
    else if (a == "-N") o.nranks = Int(argv[0], "-N", next(), 1, 256);
    else if (a == "-a" || a == "--algo") o.algo = next();
    else if (a == "-t" || a == "--transport") o.transport = next();
    else if (a == "--no-inplace") o.inplace = false;
    else if (a == "--mem") {
      const std::string v = next();
      if (v != "host" && v != "cuda") Usage(argv[0], "--mem: host or cuda");
      o.cuda = v == "cuda";
#ifndef CIUIC_PERF_CUDA
      if (o.cuda) Usage(argv[0], "--mem cuda: this build has no CUDA (CIUIC_WITH_CUDA=OFF)");
#endif
    }
    else if (a == "--format") {
      o.format = next();
      if (o.format != "table" && o.format != "csv" && o.format != "json") Usage(argv[0], "--format: table, csv or json");
    } else Usage(argv[0], "unknown flag '" + a + "'");
  }
  if (o.min_bytes > o.max_bytes) Usage(argv[0], "-b is larger than -e");
  static const char* kOps[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"};
  const auto* at = std::find(std::begin(kOps), std::end(kOps), o.op);
  if (at == std::end(kOps)) Usage(argv[0], "unknown collective " + o.op);
  o.coll = static_cast<Coll>(at - std::begin(kOps));
  return o;
}

struct TypeInfo {
  const char* name;
  DataType dtype;
};
bool FindType(const std::string& n, TypeInfo* t) {
  static const TypeInfo kTypes[] = {{"float", DataType::kFloat32},   {"double", DataType::kFloat64},
                                    {"half", DataType::kFloat16},    {"bfloat16", DataType::kBFloat16},
                                    {"int32", DataType::kInt32},     {"int64", DataType::kInt64},
                                    {"uint8", DataType::kUint8},     {"int8", DataType::kInt8},
                                    {"uint32", DataType::kUint32},   {"uint64", DataType::kUint64},
                                    {"int16", DataType::kInt16},     {"uint16", DataType::kUint16},
                                    {"f8e4m3", DataType::kFloat8E4M3}, {"f8e5m2", DataType::kFloat8E5M2}};
  for (const auto& k : kTypes) {
    if (n == k.name) {
      *t = k;
      return true;
    }
  }
  return false;
}
bool FindOp(const std::string& n, ReduceOp* op) {
  static const std::pair<const char*, ReduceOp> kOps[] = {{"sum", ReduceOp::kSum}, {"prod", ReduceOp::kProd},
                                                          {"min", ReduceOp::kMin}, {"max", ReduceOp::kMax},
                                                          {"avg", ReduceOp::kAvg}};
  for (const auto& k : kOps) {
    if (n == k.first) {
      *op = k.second;
      return true;
    }
  }
  return false;
}

// Element values used by the check: small integers so every dtype and
// every summation order is exact. Stored through float conversion helpers.
// fp8 (2-3 mantissa bits): powers of two alike on every rank, so sums over
// up to 8 ranks stay exact whatever the order and rounding mode.
double Value(int rank, size_t i, DataType t) {
  if (t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2) return std::ldexp(1.0, -static_cast<int>(i % 4));
  return static_cast<double>((rank * 3 + i * 5) % 7 + 1);
}

void Store(void* buf, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v); break;
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::kUint16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(ciuic::kernels::ref::F32ToNarrow(t, static_cast<float>(v)));
      break;
    case DataType::kBool: static_cast<uint8_t*>(buf)[i] = v != 0; break;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      // Small integers are exact in both; build the bits directly.
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t h;
      if (t == DataType::kBFloat16) {
        h = static_cast<uint16_t>(u >> 16);
      } else {
        const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
        h = v == 0 ? 0 : static_cast<uint16_t>((e << 10) | ((u >> 13) & 0x3ff));
      }
      static_cast<uint16_t*>(buf)[i] = h;
      break;
    }
  }
}
double Load(const void* buf, DataType t, size_t i) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(buf)[i];
    case DataType::kUint16: return static_cast<const uint16_t*>(buf)[i];
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2: return ciuic::kernels::ref::NarrowToF32(t, static_cast<const uint8_t*>(buf)[i]);
    case DataType::kBool: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const uint16_t h = static_cast<const uint16_t*>(buf)[i];
      uint32_t u;
      if (t == DataType::kBFloat16) {
        u = static_cast<uint32_t>(h) << 16;
      } else {
        const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
        u = h == 0 ? 0 : ((e - 15 + 127) << 23) | (m << 13);
      }
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
  return 0;
}

double Reduce(ReduceOp op, int n, size_t i, DataType t) {
  double acc = Value(0, i, t);
  for (int r = 1; r < n; ++r) {
    const double v = Value(r, i, t);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      default: break;  // not offered by -o
    }
  }
  return op == ReduceOp::kAvg ? acc / n : acc;
}

struct Case {
  size_t count = 0;       // per-rank element count as nccl-tests prints it
  size_t send_elems = 0, recv_elems = 0;
  double bus_factor = 1;
  size_t size_bytes = 0;  // the "size" column
};

Case MakeCase(const std::string& op, size_t bytes, size_t es, int n) {
  Case c;
  if (op == "allreduce") {
    c.count = bytes / es;
    c.send_elems = c.recv_elems = c.count;
    c.bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0;
  } else if (op == "broadcast" || op == "reduce") {
    c.count = bytes / es;
    c.send_elems = c.recv_elems = c.count;
    c.bus_factor = 1;
  } else if (op == "allgather") {
    c.count = bytes / es / n;  // per rank
    c.send_elems = c.count;
    c.recv_elems = c.count * n;
    c.bus_factor = static_cast<double>(n - 1) / n;
  } else if (op == "reduce_scatter") {
    c.count = bytes / es / n;
    c.send_elems = c.count * n;
    c.recv_elems = c.count;
    c.bus_factor = static_cast<double>(n - 1) / n;
  } else {  // alltoall
    c.count = bytes / es / n;
    c.send_elems = c.recv_elems = c.count * n;
    c.bus_factor = static_cast<double>(n - 1) / n;
  }
  c.size_bytes = (op == "allgather" || op == "reduce_scatter" || op == "alltoall") ? c.count * n * es : c.count * es;
  return c;
}

// Buffers: host memory, or GPU memory with host shadows for filling and
// checking.
struct Buffers {
  std::vector<char> send_h, recv_h;
  char* send = nullptr;  // what the collectives get
  char* recv = nullptr;
  bool cuda = false;
  ~Buffers() {
#ifdef CIUIC_PERF_CUDA
    if (cuda) {
      cudaFree(send);
      cudaFree(recv);
    }
#endif
  }
};

void CopyBuf(const Options& o, void* dst, const void* src, size_t bytes) {
#ifdef CIUIC_PERF_CUDA
  if (o.cuda) {
    cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    return;
  }
#endif
  (void)o;
  std::memcpy(dst, src, bytes);
}

ciuic::Status MakeBuffers(const Options& o, size_t cap, Buffers* b) {
  // Touch the host buffers once up front: first-touch faults cost ~12 us / 4 KiB.
  b->send_h.assign(cap, 1);
  b->recv_h.assign(cap, 2);
  b->send = b->send_h.data();
  b->recv = b->recv_h.data();
#ifdef CIUIC_PERF_CUDA
  if (o.cuda) {
    void* s = nullptr;
    void* r = nullptr;
    cudaError_t e = cudaMalloc(&s, cap);
    if (e == cudaSuccess) e = cudaMalloc(&r, cap);
    if (e != cudaSuccess) return ciuic::UnavailableError(std::string("--mem cuda: cudaMalloc: ") + cudaGetErrorString(e));
    b->cuda = true;
    b->send = static_cast<char*>(s);
    b->recv = static_cast<char*>(r);
    cudaMemcpy(s, b->send_h.data(), cap, cudaMemcpyHostToDevice);
    cudaMemcpy(r, b->recv_h.data(), cap, cudaMemcpyHostToDevice);
  }
#else
  (void)o;
#endif
  return ciuic::Status::Ok();
}

Status RunOnce(Communicator& comm, const Options& o, const Case& c, DataType t, ReduceOp op, const void* send,
               void* recv) {
  switch (o.coll) {
    case Coll::kAllReduce: return comm.AllReduce(send, recv, c.count, t, op);
    case Coll::kBroadcast:
      if (send != recv && comm.rank() == o.root) CopyBuf(o, recv, send, c.count * ciuic::DataTypeSize(t));
      return comm.Broadcast(recv, c.count, t, o.root);
    case Coll::kReduce: return comm.Reduce(send, recv, c.count, t, op, o.root);
    case Coll::kAllGather: return comm.AllGather(send, recv, c.count, t);
    case Coll::kReduceScatter: return comm.ReduceScatter(send, recv, c.count, t, op);
    case Coll::kAllToAll: break;
  }
  return comm.AllToAll(send, recv, c.count, t);
}

// Fills inputs, runs once, and counts wrong output elements on this rank.
ciuic::StatusOr<size_t> Check(Communicator& comm, const Options& o, const Case& c, DataType t, ReduceOp op,
                              Buffers& b, bool inplace) {
  const int r = comm.rank(), n = comm.size();
  void* send = b.send_h.data();
  for (size_t i = 0; i < c.send_elems; ++i) Store(send, t, i, Value(r, i, t));
  const size_t es = ciuic::DataTypeSize(t);
  void* out = b.recv_h.data();
  if (inplace) {
    out = send;
    if (o.op == "allgather") {
      for (size_t i = 0; i < c.count; ++i) Store(send, t, r * c.count + i, Value(r, i, t));
    }
  }
  // The same pointers in the buffers the collective gets.
  const size_t in_bytes = (inplace && o.op == "allgather" ? c.recv_elems : c.send_elems) * es;
  if (b.cuda) CopyBuf(o, b.send, send, in_bytes);
  char* dev_out = inplace ? b.send : b.recv;
  const char* dev_in = inplace && o.op == "allgather" ? b.send + r * c.count * es : b.send;
  CIUIC_RETURN_IF_ERROR(RunOnce(comm, o, c, t, op, dev_in, dev_out));
  if (b.cuda) CopyBuf(o, out, dev_out, c.recv_elems * es);
  size_t wrong = 0;
  auto expect = [&](size_t i, double v) { wrong += Load(out, t, i) != v; };
  if (o.op == "allreduce") {
    for (size_t i = 0; i < c.count; ++i) expect(i, Reduce(op, n, i, t));
  } else if (o.op == "broadcast") {
    for (size_t i = 0; i < c.count; ++i) expect(i, Value(o.root, i, t));
  } else if (o.op == "reduce") {
    if (r == o.root) for (size_t i = 0; i < c.count; ++i) expect(i, Reduce(op, n, i, t));
  } else if (o.op == "allgather") {
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < c.count; ++i) expect(p * c.count + i, Value(p, i, t));
  } else if (o.op == "reduce_scatter") {
    for (size_t i = 0; i < c.count; ++i) expect(i, Reduce(op, n, r * c.count + i, t));
  } else {
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < c.count; ++i) expect(p * c.count + i, Value(p, r * c.count + i, t));
  }
  return wrong;
}

struct Row {
  size_t size = 0, count = 0;
  double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  double wrong[2] = {-1, -1};
  std::string algo;
};

int RunRank(const Options& o, std::unique_ptr<Communicator> comm) {
  TypeInfo ti;
  ReduceOp op;
  if (!FindType(o.dtype, &ti)) {
    std::fprintf(stderr, "-d: unknown datatype '%s'\n", o.dtype.c_str());
    return 2;
  }
  if (!FindOp(o.redop, &op)) {
    std::fprintf(stderr, "-o: unknown reduction '%s'\n", o.redop.c_str());
    return 2;
  }
  const int rank = comm->rank(), n = comm->size();
  if (o.root >= n) {
    std::fprintf(stderr, "-r: root %d outside the %d ranks\n", o.root, n);
    return 2;
  }
  const size_t es = ciuic::DataTypeSize(ti.dtype);
  const Case big = MakeCase(o.op, o.max_bytes, es, n);
  const size_t cap = std::max(big.send_elems, big.recv_elems) * es + 64;
  Buffers buffers;
  if (Status bs = MakeBuffers(o, cap, &buffers); !bs.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, bs.ToString().c_str());
    return 1;
  }
  const bool json = o.format == "json", csv = o.format == "csv";
  // Several hosts: the ranks on each ("2+2"; empty on one host).
  std::string hosts_layout;
  size_t nhosts = 1;
  {
    std::vector<int> per_host;
    for (int h : comm->host_of()) {
      if (h >= static_cast<int>(per_host.size())) per_host.resize(static_cast<size_t>(h) + 1, 0);
      ++per_host[static_cast<size_t>(h)];
    }
    nhosts = std::max<size_t>(1, per_host.size());
    for (int m : per_host) hosts_layout += (hosts_layout.empty() ? "" : "+") + std::to_string(m);
    if (nhosts == 1) hosts_layout.clear();
  }
  if (rank == 0) {
    auto config = ciuic::Config::FromEnv();
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    std::printf("# ciuic %s_perf  version %s  git %s  %s\n", o.op.c_str(), ciuic::Version(), ciuic::GitRevision(), date);
    std::printf("# host %s  ranks %d  transport %s  dtype %s  redop %s  root %d  check %d  memory %s\n", host, n,
                comm->job_transport_name().c_str(), ti.name, o.redop.c_str(), o.root, o.check, o.cuda ? "cuda" : "host");
    if (!hosts_layout.empty()) std::printf("# hosts %zu  ranks per host %s\n", nhosts, hosts_layout.c_str());
#ifdef CIUIC_PERF_CUDA
    if (o.cuda) {
      cudaDeviceProp prop;
      int dev = 0;
      if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        std::printf("# gpu %d %s\n", dev, prop.name);
      }
    }
#endif
    if (config.ok()) {
      for (const auto& k : ciuic::DescribeKnobs(*config)) {
        if (k.source != "default") std::printf("# %s=%s\n", k.name.c_str(), k.value.c_str());
      }
    }
    if (csv) {
      std::printf("size,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong,algo\n");
    } else if (!json) {
      std::printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
                  "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      std::printf("#%11s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "",
                  "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  size_t total_wrong = 0;
  int failed = 0;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = o.step_bytes > 0 ? bytes + o.step_bytes : std::max(bytes + 1, static_cast<size_t>(bytes * o.factor))) {
    const Case c = MakeCase(o.op, bytes, es, n);
    Row row;
    row.size = c.size_bytes;
    row.count = c.count;
    const int iters = o.iters > 0 ? o.iters
                                  : static_cast<int>(std::clamp<double>(2e8 / std::max<size_t>(bytes, 1) / std::max(1, n / 2), 5, 1000));
    // In place as MPI/NCCL define it: the same buffer (all-reduce, broadcast,
    // reduce) or this rank's block of the output (all-gather). Reduce-scatter
    // and all-to-all run out of place only.
    const bool can_inplace = o.op != "reduce_scatter" && o.op != "alltoall";
    for (int pass = 0; pass < (o.inplace && can_inplace ? 2 : 1); ++pass) {
      const bool inplace = pass == 1;
      void* out = inplace ? buffers.send : buffers.recv;
      const void* in = buffers.send;
      if (inplace && o.op == "allgather") in = buffers.send + rank * c.count * es;
      if (o.op == "alltoall") out = buffers.recv;
      Status s;
      for (int w = 0; w < o.warmup && s.ok(); ++w) s = RunOnce(*comm, o, c, ti.dtype, op, in, out);
      if (s.ok()) s = comm->Barrier();
      const auto t0 = Clock::now();
      for (int it = 0; it < iters && s.ok(); ++it) s = RunOnce(*comm, o, c, ti.dtype, op, in, out);
      double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
      // A size of no elements calls nothing: last_algorithm() would name the
      // barrier above.
      row.algo = c.count == 0 ? std::string("none (no elements)") : comm->last_algorithm();
      double wrong = 0;
      if (s.ok() && o.check) {
        auto w = Check(*comm, o, c, ti.dtype, op, buffers, inplace);
        if (w.ok()) wrong = static_cast<double>(*w);
        else s = w.status();
      }
      // The slowest rank's time and the total of wrong elements.
      double stats[2] = {us, wrong};
      double maxes[2];
      if (s.ok()) s = comm->AllReduce(&stats[0], &maxes[0], 1, DataType::kFloat64, ReduceOp::kMax);
      if (s.ok()) s = comm->AllReduce(&stats[1], &maxes[1], 1, DataType::kFloat64, ReduceOp::kSum);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s at %zu bytes: %s\n", rank, o.op.c_str(), bytes, s.ToString().c_str());
        return 1;
      }
      row.time_us[pass] = maxes[0];
      row.algbw[pass] = maxes[0] > 0 ? c.size_bytes / maxes[0] / 1e3 : 0;
      row.busbw[pass] = row.algbw[pass] * c.bus_factor;
      row.wrong[pass] = maxes[1];
      total_wrong += static_cast<size_t>(maxes[1]);
    }
    if (rank == 0) {
      if (csv) {
        std::printf("%zu,%zu,%s,%s,%d,%.2f,%.3f,%.3f,%.0f,%.2f,%.3f,%.3f,%.0f,\"%s\"\n", row.size, row.count, ti.name,
                    o.redop.c_str(), o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0], row.time_us[1],
                    row.algbw[1], row.busbw[1], row.wrong[1], row.algo.c_str());
      } else if (!json) {
        std::printf("%12zu %12zu %8s %6s %5d   %9.2f %7.2f %7.2f %6.0f", row.size, row.count, ti.name, o.redop.c_str(),
                    o.root, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0]);
        if (o.inplace && row.wrong[1] >= 0) {
          std::printf("   %9.2f %7.2f %7.2f %6.0f", row.time_us[1], row.algbw[1], row.busbw[1], row.wrong[1]);
        } else if (o.inplace) {
          std::printf("   %9s %7s %7s %6s", "n/a", "", "", "");
        }
        std::printf("\n");
      }
      std::fflush(stdout);
    }
    rows.push_back(row);
    if (bytes == o.max_bytes) break;
  }
  if (rank == 0) {
    double peak = 0;
    size_t peak_size = 0;
    for (const auto& r : rows) {
      if (r.busbw[0] > peak) {
        peak = r.busbw[0];
        peak_size = r.size;
      }
    }
    if (json) {
      std::printf("{\"collective\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"hosts\":%zu,\"ranks_per_host\":\"%s\","
                  "\"dtype\":\"%s\",\"redop\":\"%s\",\"rows\":[",
                  o.op.c_str(), n, comm->job_transport_name().c_str(), nhosts,
                  hosts_layout.empty() ? std::to_string(n).c_str() : hosts_layout.c_str(), ti.name, o.redop.c_str());
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::printf("%s{\"size\":%zu,\"count\":%zu,\"oop\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%.0f},"
                    "\"inplace\":{\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%.0f},\"algo\":\"%s\"}",
                    i ? "," : "", r.size, r.count, r.time_us[0], r.algbw[0], r.busbw[0], r.wrong[0], r.time_us[1],
                    r.algbw[1], r.busbw[1], r.wrong[1], r.algo.c_str());
      }
      std::printf("],\"peak_busbw\":%.4f,\"wrong\":%zu}\n", peak, total_wrong);
    } else {
      std::printf("# Out of bounds values : %zu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
      std::printf("# Peak busbw : %.2f GB/s at %zu B   small-message latency : %.2f us at %zu B\n", peak, peak_size,
                  rows.empty() ? 0.0 : rows.front().time_us[0], rows.empty() ? 0 : rows.front().size);
      std::string last;
      for (const auto& r : rows) {
        const std::string name = r.algo.substr(0, r.algo.find(' '));
        if (name != last) std::printf("# from %zu B: %s\n", r.size, r.algo.c_str());
        last = name;
      }
    }
    std::fflush(stdout);
  }
  return total_wrong > 0 || failed ? 1 : 0;
}

bool UnderLauncher() {
  for (const char* v : {"CIUIC_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (!o.algo.empty() && o.algo != "auto") {
    // Forced for the collective under test only: the harness's own barriers
    // and all-reduces (timing, checks) stay with the library's choice.
    const ciuic::collectives::Collective c = ThisCollective();
    if (!ciuic::collectives::ParseAlgorithm(c, o.algo).ok() && o.algo.find(':') == std::string::npos) {
      Usage(argv[0], "-a: " + ciuic::collectives::ParseAlgorithm(c, o.algo).status().message());
    }
    const std::string knob = o.algo.find(':') == std::string::npos
                                 ? std::string(ciuic::collectives::CollectiveName(c)) + ":" + o.algo
                                 : o.algo;
    setenv("CIUIC_ALGO", knob.c_str(), 1);
  }
  if (!o.transport.empty()) setenv("CIUIC_TRANSPORT", o.transport.c_str(), 1);
  auto config = ciuic::Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  if (UnderLauncher() || o.nranks == 1) {
    if (!UnderLauncher()) {
      setenv("CIUIC_RANK", "0", 1);
      setenv("CIUIC_WORLD_SIZE", "1", 1);
    }
    auto comm = Communicator::CreateFromEnv();
    if (!comm.ok()) {
      std::fprintf(stderr, "%s_perf: %s\n", o.op.c_str(), comm.status().ToString().c_str());
      return 1;
    }
    return RunRank(o, std::move(*comm));
  }
  // Fork o.nranks local ranks meeting at a store this process serves, with
  // a fresh secret.
  std::random_device rd;
  const std::string secret = std::to_string(rd()) + std::to_string(rd()) + std::to_string(rd());
  auto server = ciuic::transport::TcpStoreServer::Start("127.0.0.1", 0, secret);
  if (!server.ok()) {
    std::fprintf(stderr, "store: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const uint16_t port = (*server)->port();
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      ciuic::Config c = *config;
      auto comm = Communicator::CreateTcp(r, o.nranks, "127.0.0.1", port, /*external=*/true, secret, c);
      if (!comm.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, comm.status().ToString().c_str());
        std::fflush(nullptr);
        _exit(1);
      }
      const int rc = RunRank(o, std::move(*comm));
      std::fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  size_t left = pids.size();
  while (left > 0) {
    int status = 0;
    const pid_t p = wait(&status);
    if (p < 0) break;
    --left;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && rc == 0) {
      rc = code;
      for (pid_t q : pids) kill(q, SIGTERM);  // one failed: stop the others
    }
  }
  return rc;
}
