// Communicator: transport choice, lazy links, the operation queue, the
// progress thread, and the public C++ API (include/ciuic/collectives.h).
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "ciuic/collectives.h"
#include "ciuic/topology.h"
#include "transport/transport.h"
#include "collectives/device.h"
#include "collectives/executor.h"
#include "collectives/nccl.h"
#include "collectives/partition.h"
#include "collectives/plan.h"
#include "collectives/shm_direct.h"
#include "collectives/tuning.h"
#include "common/log.h"
#include "transport/pmix.h"

namespace ciuic {
namespace collectives {

using Clock = std::chrono::steady_clock;
using transport::Backend;
using transport::BackendKind;

struct OpState {
  OpDesc desc;
  std::atomic<bool> done{false};
  Status status;  // written before `done` is set
  std::mutex mu;
  std::condition_variable cv;
};

class CommImpl {
 public:
  int rank = 0;
  int size = 1;
  Config config;
  std::shared_ptr<transport::Store> store;
  std::unique_ptr<transport::TcpStoreServer> server;  // rank 0 when it serves the store
  std::string prefix;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<transport::BufferPool> pool;
  std::map<std::pair<int, int>, std::unique_ptr<transport::Link>> links;
  // Links being set up without waiting on their peer (GetLink).
  struct Building {
    std::unique_ptr<transport::Link::Builder> builder;
    std::chrono::steady_clock::time_point next_poll;
  };
  static constexpr std::chrono::microseconds kLinkPoll{200};
  std::map<std::pair<int, int>, Building> building;
  // verbs: caller buffers registered once and reused for zero-copy sends
  // (watched, so freed memory is never reused stale; transport.h).
  std::unique_ptr<transport::RegistrationCache> reg_cache;
  std::optional<kernels::Reducer> reducer;
  std::optional<kernels::Reducer> streaming_reducer;  // the same with non-temporal stores
  transport::LinkOptions link_options;
  std::vector<char> scratch;
  std::vector<char> staging;  // input copy for unsupported overlaps
  std::string last_algorithm;
  const CallPlan* last_algorithm_plan = nullptr;  // the plan last_algorithm describes
  // What selection needs of this communicator (selection.h): the model's
  // parameters, the tuning file, CIUIC_ALGO parsed, the direct family's
  // limits; filled in by Init.
  SelectionContext selection;
  SelectionCache selections;
  std::unique_ptr<ShmDirect> direct;  // the one-host all-reduce, made on first use
  // What CheckPeer knows of each peer's process.
  struct PeerProcess {
    std::string identity;       // its ProcessIdentity (empty: it has none)
    bool read = false;          // identity read from the store (published at init)
    Clock::time_point checked;  // rate limit: one look per kPeerCheckEvery
  };
  std::vector<PeerProcess> peer_processes;
  // An error naming `peer` when it ran on this host and has exited: run
  // while waiting for its store keys (links, the direct region), so a rank
  // that died before it connected is named within kPeerCheckEvery, not at
  // the timeout.
  Status CheckPeer(int peer);
  transport::PeerCheck peer_check = [this](int peer) { return CheckPeer(peer); };
  std::optional<Tuning> tuning;       // CIUIC_TUNING_FILE
  // GPU buffers (CIUIC_GPU): how device memory is recognised (null: it is
  // not looked for) and the host mirrors of staged calls (device.h).
  std::shared_ptr<DeviceMemory> devmem;
  std::unique_ptr<MirrorCache> mirrors;
  // Decided at the first collective on GPU buffers (DecideGpuRoute): NCCL
  // when every rank loads it and has a GPU of its own, else host copies.
  enum class GpuRoute { kUndecided, kNccl, kHost } gpu_route = GpuRoute::kUndecided;
  std::unique_ptr<NcclComm> nccl;
  Status DecideGpuRoute(const OpDesc& d, Clock::time_point deadline);
  // How long waits spin before yielding: 0 when some host runs more ranks
  // than the CPUs they share (decided by rank 0 at creation).
  std::chrono::microseconds wait_spin = transport::kDefaultSpin;

  // Queue and progress thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<OpState>> queue;
  // queue.size(), kept beside it under `mu`, read without it: a blocking
  // call checks "nothing queued" with one load instead of a lock.
  std::atomic<size_t> queued{0};
  bool stop = false;
  std::thread thread;
  std::mutex exec_mu;  // one operation runs at a time (caller mode)
  std::atomic<bool> aborted{false};
  Status error;  // first failure; sticky (guarded by exec_mu)

  ~CommImpl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    for (auto& op : queue) Complete(*op, AbortedError("communicator destroyed"));
    direct.reset();
    nccl.reset();
    mirrors.reset();
    building.clear();
    links.clear();
    reg_cache.reset();
    pool.reset();
    backend.reset();
  }

  Status Init();
  Status InitDevice();  // CIUIC_GPU
  StatusOr<std::shared_ptr<OpState>> Submit(OpDesc desc);
  // Runs the next queued operation (with the point-to-point ones behind a
  // point-to-point one); false when the queue is empty.
  bool RunNext();
  Status RunBatch(std::vector<std::shared_ptr<OpState>>* batch);
  // Queues `desc`, or with `run_inline` and an empty queue runs it now on
  // the calling thread (blocking calls).
  StatusOr<std::shared_ptr<OpState>> SubmitOrRun(OpDesc desc, bool run_inline);
  // A blocking call: with nothing queued, a collective runs right here on
  // the calling thread (no request object, no hand-off); otherwise, and
  // for send/recv, through the queue as before.
  Status RunBlocking(OpDesc desc);
  // Runs `body` under exec_mu with the sticky-error rules.
  template <typename F>
  Status Guarded(F&& body);
  Status ExecuteBatch(std::vector<std::shared_ptr<OpState>>* batch);
  // One collective (not send/recv).
  Status ExecuteCollective(const OpDesc& d, Clock::time_point deadline);
  // A collective with a GPU buffer: NCCL, or host mirrors around
  // ExecuteCollective.
  Status ExecuteOnDevice(const OpDesc& d, Clock::time_point deadline);
  // A large all-reduce on one device's buffers through host copies, in
  // chunks whose copies overlap the host all-reduce (device.h).
  Status AllReduceStagedPipelined(const OpDesc& d, Clock::time_point deadline);
  // Marks where the buffers of `d` live (nothing without GPU support).
  void Classify(OpDesc* d) {
    if (devmem == nullptr) return;
    ClassifyBuffers(*devmem, d);
    // A reduce's output off the root is unused (may be anything): it takes
    // the input's kind, so every rank with device input picks the same
    // route (NCCL or host copies) as the root.
    if (d->coll == Collective::kReduce && rank != d->root) d->recv_device = d->send_device;
  }
  // Runs `d` on the shared-memory family (plan kinds kShmDirect, kExchange).
  Status RunDirect(const OpDesc& d, Clock::time_point deadline);
  ShmDirectOptions DirectOptions() const;  // from the link options and wait_spin
  StatusOr<ExecJob> Prepare(const OpDesc& d, CallPlan* plan);
  // The plan of a collective, from `plans` when the same call (collective,
  // counts, type, op, root and buffers) ran before: a schedule is built
  // once, not per call (~3500 instructions for an 8-byte recursive
  // doubling). Valid until the next call of PlanFor (exec_mu held).
  StatusOr<const CallPlan*> PlanFor(const OpDesc& d);
  StatusOr<ExecJob> JobFor(const OpDesc& d, const CallPlan& plan);
  struct PlanKey {
    Collective coll;
    const void* send;
    const void* recv;
    size_t count;
    std::vector<size_t> counts;
    DataType dtype;
    ReduceOp op;
    int root;
    bool operator<(const PlanKey& o) const {
      return std::tie(coll, send, recv, count, counts, dtype, op, root) <
             std::tie(o.coll, o.send, o.recv, o.count, o.counts, o.dtype, o.op, o.root);
    }
  };
  static constexpr size_t kMaxCachedPlans = 64;  // then the cache starts over
  std::map<PlanKey, CallPlan> plans;
  // The plan of the last call, checked before the map: a loop of the same
  // call pays one key comparison.
  const PlanKey* last_key = nullptr;
  const CallPlan* last_plan = nullptr;
  Status Finish(const OpDesc& d);
  // The link to `peer` on `channel`. `wait` (collectives): set it up now,
  // waiting for the peer. Otherwise (send/recv) null while it is being set
  // up without waiting (call again: see Executor's LinkSource).
  StatusOr<transport::Link*> GetLink(int peer, int channel, bool wait);
  void ProgressLoop();
  Status WaitFor(OpState& op);
  void Complete(OpState& op, Status s) {
    {
      std::lock_guard<std::mutex> lock(op.mu);
      op.status = std::move(s);
      op.done.store(true, std::memory_order_release);
    }
    op.cv.notify_all();
  }
};

namespace {

std::atomic<int> g_comm_counter{0};

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// This process's CPUs as a list ("0,1,5"), for rank 0's oversubscription
// check.
std::string CpuList() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
  }
  return out;
}

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

// AVG = sum over ranks, then divide once here.
Status DivideInPlace(const kernels::Reducer& reducer, void* buf, size_t count,
                     DataType dtype, int n) {
  switch (dtype) {
    case DataType::kFloat32: {
      auto* p = static_cast<float*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
      return Status::Ok();
    }
    case DataType::kFloat64: {
      auto* p = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      return Status::Ok();
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      auto* p = static_cast<uint16_t*>(buf);
      std::vector<float> tmp(std::min<size_t>(count, 4096));
      for (size_t at = 0; at < count; at += tmp.size()) {
        const size_t m = std::min(tmp.size(), count - at);
        if (dtype == DataType::kFloat16) {
          CIUIC_RETURN_IF_ERROR(reducer.ConvertF16ToF32(p + at, tmp.data(), m));
        } else {
          CIUIC_RETURN_IF_ERROR(reducer.ConvertBF16ToF32(p + at, tmp.data(), m));
        }
        for (size_t i = 0; i < m; ++i) tmp[i] /= static_cast<float>(n);
        if (dtype == DataType::kFloat16) {
          CIUIC_RETURN_IF_ERROR(reducer.ConvertF32ToF16(tmp.data(), p + at, m));
        } else {
          CIUIC_RETURN_IF_ERROR(reducer.ConvertF32ToBF16(tmp.data(), p + at, m));
        }
      }
      return Status::Ok();
    }
#define CIUIC_DIV_INT(T)                                      \
  {                                                           \
    auto* p = static_cast<T*>(buf);                           \
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n)); \
    return Status::Ok();                                      \
  }
    case DataType::kInt8: CIUIC_DIV_INT(int8_t)
    case DataType::kUint8: CIUIC_DIV_INT(uint8_t)
    case DataType::kInt32: CIUIC_DIV_INT(int32_t)
    case DataType::kUint32: CIUIC_DIV_INT(uint32_t)
    case DataType::kInt64: CIUIC_DIV_INT(int64_t)
    case DataType::kUint64: CIUIC_DIV_INT(uint64_t)
#undef CIUIC_DIV_INT
  }
  return InvalidArgumentError("unknown datatype");
}

}  // namespace

Status CommImpl::Init() {
  const auto timeout = std::chrono::milliseconds(config.timeout_ms);
  CIUIC_ASSIGN_OR_RETURN(selection.algo, AlgoKnob::Parse(config.algo));
  prefix = "ciuic/comm" + std::to_string(g_comm_counter.fetch_add(1));
  CIUIC_ASSIGN_OR_RETURN(link_options, transport::LinkOptions::FromConfig(config));
  CIUIC_ASSIGN_OR_RETURN(kernels::Reducer red, kernels::Reducer::Create(config, kernels::CacheSizes::FromSystem()));
  reducer.emplace(red);

  // The tuning file: every rank must load the same one (rank 0's hash goes
  // out with its transport decision), or ranks would pick different
  // algorithms for the same call.
  std::string tuning_id = "none";
  if (!config.tuning_file.empty()) {
    CIUIC_ASSIGN_OR_RETURN(Tuning t, LoadTuningFile(config.tuning_file));
    tuning_id = std::to_string(std::hash<std::string>()(FormatTuning(t)));
    tuning = std::move(t);
  }
  // Transport: rank 0 decides from every rank's host name, so all agree.
  // Each rank's host and CPUs: rank 0 also decides whether any host runs
  // more ranks than the CPUs they may use together (then waits yield at
  // once instead of spinning).
  // Before the host line: every rank has set both once any rank is past
  // init (rank 0 reads all host lines before it decides the transport).
  CIUIC_RETURN_IF_ERROR(store->Set(prefix + "/process/" + std::to_string(rank), transport::ProcessIdentity()));
  peer_processes.assign(size, PeerProcess());
  CIUIC_RETURN_IF_ERROR(store->Set(prefix + "/host/" + std::to_string(rank), HostName() + " " + CpuList()));
  std::string choice;
  bool oversubscribed = false;
  if (rank == 0) {
    bool one_host = true;
    std::map<std::string, std::pair<int, std::set<std::string>>> hosts;  // ranks, CPUs
    for (int r = 0; r < size; ++r) {
      CIUIC_ASSIGN_OR_RETURN(std::string v, store->Get(prefix + "/host/" + std::to_string(r), timeout));
      const size_t sp = v.find(' ');
      const std::string h = v.substr(0, sp);
      one_host &= h == HostName();
      auto& entry = hosts[h];
      ++entry.first;
      for (size_t at = sp == std::string::npos ? v.size() : sp + 1; at < v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        entry.second.insert(v.substr(at, comma - at));
        at = comma + 1;
      }
    }
    for (const auto& [h, e] : hosts) {
      if (!e.second.empty() && static_cast<int>(e.second.size()) < e.first) oversubscribed = true;
    }
    transport::BackendOptions probe;
    probe.config = config;
    probe.world_size = size;
    if (config.transport != "auto") {
      choice = config.transport;
    } else if (one_host) {
      choice = "shm";
    } else {
      std::string why;
      choice = transport::BackendAvailable(BackendKind::kVerbs, probe, &why) ? "verbs" : "tcp";
    }
    CIUIC_RETURN_IF_ERROR(store->Set(prefix + "/transport", choice + " " + RandomHex(8) + " " +
                                                                (oversubscribed ? "1" : "0") + " " + tuning_id));
  }
  // "<transport> <job id> <oversubscribed 0|1> <tuning file id>"
  CIUIC_ASSIGN_OR_RETURN(std::string decided, store->Get(prefix + "/transport", timeout));
  const size_t sp = decided.find(' ');
  const size_t sp_over = decided.find(' ', sp + 1);
  const size_t sp2 = decided.find(' ', sp_over + 1);
  choice = decided.substr(0, sp);
  if (sp_over == std::string::npos || sp2 == std::string::npos) {
    return DataLossError("rank " + std::to_string(rank) + ": malformed transport decision from rank 0: '" + decided + "'");
  }
  oversubscribed = decided.substr(sp_over + 1, sp2 - sp_over - 1) == "1";
  wait_spin = oversubscribed ? std::chrono::microseconds(0) : transport::kDefaultSpin;
  if (decided.substr(sp2 + 1) != tuning_id) {
    return InvalidArgumentError("rank " + std::to_string(rank) + ": CIUIC_TUNING_FILE (" +
                                (config.tuning_file.empty() ? std::string("unset") : "'" + config.tuning_file + "'") +
                                ") differs from rank 0's: every rank must use the same tuning file");
  }
  decided.resize(sp_over);
  CIUIC_ASSIGN_OR_RETURN(BackendKind kind, transport::ParseBackendKind(choice));
  transport::BackendOptions bo;
  bo.rank = rank;
  bo.world_size = size;
  bo.job_id = sp == std::string::npos ? prefix : decided.substr(sp + 1);
  bo.config = config;
  StatusOr<std::unique_ptr<Backend>> be = transport::OpenBackend(kind, bo);
  if (!be.ok()) {
    return Status(be.status().code(), "rank " + std::to_string(rank) + ": transport " + choice +
                                          " (CIUIC_TRANSPORT=" + config.transport +
                                          "): " + be.status().message());
  }
  backend = std::move(*be);
  CIUIC_RETURN_IF_ERROR(selection.algo.CheckTransport(kind));
  selection.backend = kind;
  selection.params = DefaultCostParams(kind);
  selection.params.chunk_bytes = link_options.slot_size;
  selection.params.nchannels = config.nchannels;
  selection.params.ranks_outnumber_cpus = oversubscribed;
  if (tuning.has_value()) {
    selection.tuning = &*tuning;
    ApplyTuning(*tuning, kind, &selection.params);
    CIUIC_LOG(kInfo, "tuning from %s (CIUIC_TUNING_FILE): %zu rules; %s alpha %.3g us, beta %.3g GB/s",
              config.tuning_file.c_str(), tuning->rules.size(), transport::BackendName(kind),
              selection.params.alpha_s * 1e6, 1e-9 / selection.params.beta_s_per_byte);
  }
  const ShmDirectOptions direct_options = DirectOptions();
  selection.limits.slot_bytes = direct_options.slot_bytes;
  selection.limits.one_shot_max_bytes = direct_options.one_shot_max_bytes;
  selection.limits.exchange_reduce_max_bytes = direct_options.exchange_reduce_max_bytes;
  selection.limits.exchange_move_max_bytes = direct_options.exchange_move_max_bytes;
  pool = std::make_unique<transport::BufferPool>(*backend, 16u << 20);
  CIUIC_RETURN_IF_ERROR(InitDevice());
  if (kind == BackendKind::kVerbs) reg_cache = std::make_unique<transport::RegistrationCache>(*backend);
  if (kind == BackendKind::kShm) {
    // The direct all-reduce's streaming stores (ShmDirect::AllReduce).
    Config nt = config;
    nt.kernel_nt_threshold = 1;
    CIUIC_ASSIGN_OR_RETURN(kernels::Reducer sred, kernels::Reducer::Create(nt, kernels::CacheSizes::FromSystem()));
    streaming_reducer.emplace(sred);
  }
  CIUIC_LOG(kInfo, "communicator rank %d/%d on %s%s", rank, size, backend->Describe().c_str(),
            wait_spin.count() == 0 ? " (ranks outnumber their CPUs: waits yield without spinning)" : "");
  if (config.progress == "thread") {
    thread = std::thread([this] { ProgressLoop(); });
  }
  return Status::Ok();
}

namespace {
// Calls at least this large send straight from the caller's buffers (tcp,
// verbs); below it, a registration costs more than the copy it saves.
constexpr size_t kZeroCopyMinBytes = 16u << 10;

bool IsPointToPoint(const OpDesc& d) { return d.coll == Collective::kSend || d.coll == Collective::kRecv; }

// Pipelining: a step (one block of a ring, a tree's share) is cut into at
// least kPipelineDepth chunks when that keeps chunks of kMinPipelineChunk or
// more, so receiving, reducing and sending overlap even when the block is
// no larger than a slot. With 512 KiB slots a 2-rank 1 MiB ring all-reduce
// otherwise moves each half as one chunk: exchange, reduce, exchange, in
// series (tcp here: 330-370 us; with 128 KiB chunks 255-310 us).
// A function of the operation's arguments only (the same on every rank).
constexpr size_t kPipelineDepth = 4;
constexpr size_t kMinPipelineChunk = 64u << 10;
size_t PipelineChunkBytes(const OpDesc& d, int nranks) {
  const size_t es = DataTypeSize(d.dtype);
  const size_t n = static_cast<size_t>(std::max(1, nranks));
  size_t block = 0;
  switch (d.coll) {
    case Collective::kAllReduce: block = d.count * es / n; break;
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: {
      size_t total = 0;
      for (size_t c : d.counts) total += c;
      block = total * es / n;
      break;
    }
    case Collective::kSend:
    case Collective::kRecv:
    case Collective::kBarrier:
      return 0;  // the slot size: a send and its receive may name different counts
    default: block = d.count * es; break;  // per-rank blocks, or the whole message
  }
  const size_t chunk = (block / kPipelineDepth + 4095) / 4096 * 4096;
  return std::max(chunk, kMinPipelineChunk);
}
}  // namespace

Status CommImpl::CheckPeer(int peer) {
  if (peer < 0 || peer >= size || peer == rank) return Status::Ok();
  PeerProcess& pp = peer_processes[peer];
  const Clock::time_point now = Clock::now();
  if (now - pp.checked < transport::kPeerCheckEvery) return Status::Ok();
  pp.checked = now;
  if (!pp.read) {
    StatusOr<std::string> v = store->Get(prefix + "/process/" + std::to_string(peer), std::chrono::milliseconds(0));
    if (!v.ok()) return Status::Ok();  // not there (yet): nothing to tell
    pp.identity = *v;
    pp.read = true;
  }
  if (pp.identity.empty() || !transport::ProcessGone(pp.identity)) return Status::Ok();
  const std::string& id = pp.identity;
  const size_t pid_at = id.find(' ', id.find(' ') + 1) + 1;
  return UnavailableError("rank " + std::to_string(peer) + " (pid " + id.substr(pid_at, id.find(' ', pid_at) - pid_at) +
                          " on this host) has exited; it will never connect");
}

StatusOr<transport::Link*> CommImpl::GetLink(int peer, int channel, bool wait) {
  auto key = std::make_pair(peer, channel);
  auto it = links.find(key);
  if (it != links.end()) return it->second.get();
  auto keep = [&](std::unique_ptr<transport::Link> l) {
    return links.emplace(key, std::move(l)).first->second.get();
  };
  auto b = building.find(key);
  if (wait && b == building.end()) {
    // Collectives: every rank asks for its links in ascending peer order
    // before the schedule starts, so waiting for the peer cannot deadlock.
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link> l,
                           transport::Link::Create(*backend, *pool, *store, prefix, rank, peer,
                                                   static_cast<uint32_t>(channel), link_options,
                                                   std::chrono::milliseconds(config.timeout_ms), peer_check));
    return keep(std::move(l));
  }
  // Point-to-point: built without waiting on the peer (Link::Builder). A
  // rank whose first operation is a send to its neighbour must not wait for
  // that neighbour to ask for the link, which it does only once its own
  // send (to its other neighbour) is under way. (A collective that finds a
  // link a send/recv began waits for it below.)
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.timeout_ms);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (b == building.end()) {
      CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link::Builder> builder,
                             transport::Link::Builder::Start(*backend, *pool, *store, prefix, rank, peer,
                                                             static_cast<uint32_t>(channel), link_options,
                                                             std::chrono::milliseconds(config.timeout_ms)));
      b = building.emplace(key, Building{std::move(builder), now}).first;
    }
    if (now >= b->second.next_poll) {
      // At most one look at the store per kLinkPoll and link (a tcp store
      // answers each over the network).
      b->second.next_poll = now + kLinkPoll;
      CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link> l, b->second.builder->Poll());
      if (l != nullptr) {
        building.erase(b);
        return keep(std::move(l));
      }
      if (wait) CIUIC_RETURN_IF_ERROR(CheckPeer(peer));
    }
    if (!wait) return nullptr;
    if (now >= until) {
      return DeadlineExceededError("connecting to rank " + std::to_string(peer) + ": no answer within " +
                                   std::to_string(config.timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(kLinkPoll);
  }
}

StatusOr<ExecJob> CommImpl::Prepare(const OpDesc& d, CallPlan* plan) {
  CIUIC_ASSIGN_OR_RETURN(*plan, PlanCall(d, rank, size, selection, &selections));
  last_algorithm = plan->why;
  last_algorithm_plan = nullptr;
  return JobFor(d, *plan);
}

StatusOr<const CallPlan*> CommImpl::PlanFor(const OpDesc& d) {
  PlanKey key{d.coll, d.send, d.recv, d.count, d.counts, d.dtype, d.op, d.root};
  if (last_key != nullptr && !(key < *last_key) && !(*last_key < key)) return last_plan;
  auto it = plans.find(key);
  if (it == plans.end()) {
    CIUIC_ASSIGN_OR_RETURN(CallPlan plan, PlanCall(d, rank, size, selection, &selections));
    // Said once per distinct call, not per call.
    CIUIC_LOG(kInfo, "%s count=%zu: %s", CollectiveName(d.coll), d.count, plan.why.c_str());
    if (plans.size() >= kMaxCachedPlans) {
      plans.clear();
      last_algorithm_plan = nullptr;
    }
    it = plans.emplace(std::move(key), std::move(plan)).first;
  }
  last_key = &it->first;
  last_plan = &it->second;
  return last_plan;
}

StatusOr<ExecJob> CommImpl::JobFor(const OpDesc& d, const CallPlan& plan_ref) {
  const CallPlan* plan = &plan_ref;
  if (LogEnabled(LogLevel::kTrace)) {
    // The schedule itself, step by step (CIUIC_DEBUG=TRACE).
    CIUIC_LOG(kTrace, "%s", plan->schedule.Dump().c_str());
  }
  const size_t es = DataTypeSize(d.dtype);
  ExecJob job;
  job.schedule = &plan->schedule;
  job.slot_bytes = link_options.slot_size;
  job.chunk_bytes = PipelineChunkBytes(d, size);
  job.dtype = d.dtype;
  job.op = d.op == ReduceOp::kAvg ? ReduceOp::kSum : d.op;  // AVG: sum, then scale once
  ExecBuffers& bufs = job.buffers;
  bufs.input = d.send;
  bufs.input_count = d.send == nullptr ? 0 : plan->layout.input_count;
  bufs.output = d.recv;
  bufs.output_count = d.recv == nullptr ? 0 : plan->layout.output_count;
  if (plan->schedule.scratch_count > 0) {
    if (scratch.size() < plan->schedule.scratch_count * es) scratch.resize(plan->schedule.scratch_count * es);
    bufs.scratch = scratch.data();
    bufs.scratch_count = plan->schedule.scratch_count;
  }
  if (plan->stage_input) {
    // An overlap of the caller's buffers that the schedule does not support:
    // run from a copy of the input (staging is reused between operations).
    if (staging.size() < bufs.input_count * es) staging.resize(bufs.input_count * es);
    if (bufs.input_count > 0) std::memcpy(staging.data(), d.send, bufs.input_count * es);
    bufs.input = staging.data();
  }
  const bool tcp = backend->kind() == BackendKind::kTcp;
  if ((tcp || reg_cache != nullptr) && d.count * es >= kZeroCopyMinBytes) {
    // Send straight from the caller's buffers. tcp: a registration is only
    // a bounds-checked pointer (nothing pinned), so one per call. verbs:
    // through the registration cache (pinned once, reused while the memory
    // stays mapped). Where registering fails (read-only memory for verbs),
    // the executor copies through a slot.
    auto reg = [&](const void* p, size_t count, const transport::MemoryRegion** out) {
      if (p == nullptr || count == 0) return;
      if (tcp) {
        auto r = backend->Register(const_cast<void*>(p), count * es);
        if (!r.ok()) return;
        std::shared_ptr<transport::MemoryRegion> region(std::move(*r));
        *out = region.get();
        job.keep.push_back(std::move(region));
        return;
      }
      auto h = reg_cache->Ref(p, count * es);
      if (!h.ok()) return;
      *out = h->region;
      transport::RegistrationCache* cache = reg_cache.get();
      job.keep.push_back(std::shared_ptr<const void>(h->region, [cache, handle = *h](const void*) {
        cache->Unref(handle);
      }));
    };
    reg(bufs.input, bufs.input_count, &bufs.input_region);
    if (bufs.output == bufs.input && bufs.output_count == bufs.input_count) {
      bufs.output_region = bufs.input_region;
    } else {
      reg(bufs.output, bufs.output_count, &bufs.output_region);
    }
    reg(bufs.scratch, bufs.scratch_count, &bufs.scratch_region);
  }
  return job;
}

Status CommImpl::Finish(const OpDesc& d) {
  if (d.op != ReduceOp::kAvg || d.recv == nullptr) return Status::Ok();
  size_t n = 0;
  switch (d.coll) {
    case Collective::kAllReduce: n = d.count; break;
    case Collective::kReduce: n = rank == d.root ? d.count : 0; break;
    case Collective::kReduceScatter: n = d.count; break;
    case Collective::kReduceScatterv: n = d.counts[rank]; break;
    default: break;
  }
  return n > 0 ? DivideInPlace(*reducer, d.recv, n, d.dtype, size) : Status::Ok();
}

ShmDirectOptions CommImpl::DirectOptions() const {
  ShmDirectOptions o;
  o.slot_bytes = link_options.slot_size;
  o.nslots = link_options.nslots;
  // The small ring takes at most CIUIC_BUFFER_SIZE too (64 slots of 16 KiB
  // by default; fewer when the buffer is smaller than 1 MiB).
  const size_t small_bytes = std::min(o.one_shot_max_bytes, o.slot_bytes);
  o.small_slots = std::min(o.small_slots, o.nslots * o.slot_bytes / small_bytes);
  // Where the kernels themselves turn to non-temporal stores (half the
  // last-level cache, at most 16 MiB; CIUIC_KERNEL_NT_THRESHOLD).
  o.stream_output_min_bytes = reducer->nt_threshold_bytes();
  if (wait_spin.count() == 0) o.spin = std::chrono::microseconds(0);
  return o;
}

Status CommImpl::RunDirect(const OpDesc& d, Clock::time_point deadline) {
  if (direct == nullptr) {
    CIUIC_ASSIGN_OR_RETURN(direct, ShmDirect::Create(*backend, *store, prefix, rank, size, DirectOptions(),
                                                     std::chrono::milliseconds(config.timeout_ms), peer_check));
  }
  const ReduceOp op = d.op == ReduceOp::kAvg ? ReduceOp::kSum : d.op;
  switch (d.coll) {
    case Collective::kBroadcast: return direct->Broadcast(d.recv, d.count, d.dtype, d.root, *reducer, deadline, &aborted);
    case Collective::kReduce:
      CIUIC_RETURN_IF_ERROR(direct->Reduce(d.send, d.recv, d.count, d.dtype, op, d.root, *reducer, deadline, &aborted));
      return Finish(d);
    case Collective::kAllGather: return direct->AllGather(d.send, d.recv, d.count, d.dtype, deadline, &aborted);
    case Collective::kReduceScatter:
      CIUIC_RETURN_IF_ERROR(direct->ReduceScatter(d.send, d.recv, d.count, d.dtype, op, *reducer, deadline, &aborted));
      return Finish(d);
    case Collective::kAllToAll: return direct->AllToAll(d.send, d.recv, d.count, d.dtype, deadline, &aborted);
    case Collective::kBarrier: return direct->Barrier(deadline, &aborted);
    default: break;
  }
  CIUIC_RETURN_IF_ERROR(direct->AllReduce(d.send, d.recv, d.count, d.dtype, op, *reducer,
                                           streaming_reducer.has_value() ? &*streaming_reducer : nullptr,
                                           deadline, &aborted));
  return Finish(d);
}

Status CommImpl::InitDevice() {
  if (config.gpu == "off") return Status::Ok();
  std::string why;
  devmem = DeviceMemoryForTesting();
  if (devmem == nullptr) devmem = OpenCudaDeviceMemory(&why);
  if (devmem == nullptr) {
    if (config.gpu == "nccl") {
      return FailedPreconditionError("rank " + std::to_string(rank) + ": CIUIC_GPU=nccl: " + why);
    }
    CIUIC_LOG(kInfo, "GPU buffers: not looked for: %s", why.c_str());
    return Status::Ok();
  }
  mirrors = std::make_unique<MirrorCache>(devmem);
  if (config.gpu == "host") gpu_route = GpuRoute::kHost;
  if (config.gpu == "nccl") {
    StatusOr<std::string> v = NcclComm::Load(config.nccl_lib);
    if (!v.ok()) return FailedPreconditionError("rank " + std::to_string(rank) + ": CIUIC_GPU=nccl: " + v.status().message());
  }
  CIUIC_LOG(kInfo, "GPU buffers: recognised (%s driver); CIUIC_GPU=%s", devmem->name().c_str(), config.gpu.c_str());
  return Status::Ok();
}

Status CommImpl::DecideGpuRoute(const OpDesc& d, Clock::time_point deadline) {
  // Every rank publishes whether NCCL loads, its host and its GPU; every
  // rank then decides the same from the same records.
  const int dev = d.send_device >= 0 ? d.send_device : d.recv_device;
  StatusOr<std::string> version = NcclComm::Load(config.nccl_lib);
  if (!version.ok()) CIUIC_LOG(kInfo, "GPU buffers: %s", version.status().message().c_str());
  const std::string mine = std::string(version.ok() ? "1" : "0") + " " + HostName() + "/" + devmem->Identity(dev);
  CIUIC_RETURN_IF_ERROR(store->Set(prefix + "/gpu/" + std::to_string(rank), mine));
  std::string why_not;
  std::map<std::string, int> holder;  // host/GPU -> first rank on it
  for (int r = 0; r < size; ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    StatusOr<std::string> v = store->Get(prefix + "/gpu/" + std::to_string(r), std::max(left, std::chrono::milliseconds(1)));
    if (!v.ok()) {
      return Status(v.status().code(), "rank " + std::to_string(r) +
                                            " has not reached this collective on GPU buffers (every rank must pass "
                                            "device memory to the same calls): " + v.status().message());
    }
    const std::string where = v->substr(2);
    if (why_not.empty() && (*v)[0] != '1') why_not = "rank " + std::to_string(r) + " cannot load NCCL";
    auto [it, fresh] = holder.emplace(where, r);
    if (why_not.empty() && !fresh) {
      why_not = "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " + where +
                " (NCCL takes one rank per GPU)";
    }
  }
  if (!why_not.empty()) {
    if (config.gpu == "nccl") return FailedPreconditionError("CIUIC_GPU=nccl: " + why_not);
    CIUIC_LOG(kInfo, "GPU buffers: through host copies: %s", why_not.c_str());
    gpu_route = GpuRoute::kHost;
    return Status::Ok();
  }
  CIUIC_ASSIGN_OR_RETURN(nccl, NcclComm::Create(*store, prefix + "/gpu/nccl-id", rank, size, dev, deadline));
  CIUIC_LOG(kInfo, "GPU buffers: NCCL %s on GPU %s", version->c_str(), mine.substr(2).c_str());
  gpu_route = GpuRoute::kNccl;
  return Status::Ok();
}

Status CommImpl::ExecuteOnDevice(const OpDesc& d, Clock::time_point deadline) {
  if (gpu_route == GpuRoute::kUndecided) CIUIC_RETURN_IF_ERROR(DecideGpuRoute(d, deadline));
  if (nccl != nullptr && nccl->Supports(d)) {
    last_algorithm_plan = nullptr;
    last_algorithm = std::string("nccl for ") + CollectiveName(d.coll) + ": GPU buffers, every rank on a GPU of its own";
    return nccl->Run(d, rank, size, deadline, &aborted);
  }
  const size_t bytes = d.count * DataTypeSize(d.dtype);
  if (d.coll == Collective::kAllReduce && d.send_device >= 0 && d.recv_device == d.send_device &&
      bytes >= kPipelinedStagingMinBytes) {
    return AllReduceStagedPipelined(d, deadline);
  }
  CIUIC_ASSIGN_OR_RETURN(Staged st, StageIn(*devmem, *mirrors, 0, d, rank, size));
  CIUIC_RETURN_IF_ERROR(ExecuteCollective(st.host, deadline));
  return CopyBack(*devmem, st);
}

Status CommImpl::AllReduceStagedPipelined(const OpDesc& d, Clock::time_point deadline) {
  const size_t es = DataTypeSize(d.dtype);
  const size_t bytes = d.count * es;
  const size_t chunk = StagingChunkBytes(bytes, es);
  const int dev = d.send_device;
  DeviceMemory& mem = *devmem;
  CIUIC_ASSIGN_OR_RETURN(char* m, mirrors->Get(0, bytes, dev));
  const char* src = static_cast<const char*>(d.send);
  char* dst = static_cast<char*>(d.recv);
  constexpr int kIn = 0, kOut = 1;  // copy lanes
  // Whatever happens, no copy may still run into or out of the mirror
  // when this returns.
  auto drain = [&](Status s) {
    Status a = mem.WaitLane(dev, kIn);
    Status b = mem.WaitLane(dev, kOut);
    if (s.ok()) s = !a.ok() ? a : b;
    return s;
  };
  Status s = mem.ToHostAsync(m, src, std::min(chunk, bytes), dev, kIn);
  for (size_t off = 0; s.ok() && off < bytes; off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    s = mem.WaitLane(dev, kIn);  // chunk `off` is on the host
    if (s.ok() && off + n < bytes) s = mem.ToHostAsync(m + off + n, src + off + n, std::min(chunk, bytes - off - n), dev, kIn);
    if (!s.ok()) break;
    OpDesc h = d;
    h.send_device = h.recv_device = -1;
    h.send = h.recv = m + off;
    h.count = n / es;
    s = ExecuteCollective(h, deadline);
    if (s.ok()) s = mem.ToDeviceAsync(dst + off, m + off, n, dev, kOut);
  }
  return drain(s);
}

Status CommImpl::ExecuteCollective(const OpDesc& d, Clock::time_point deadline) {
  // Nothing to move (count 0; the v-forms and barrier aside): done, as in
  // MPI, without a plan or a look at any link.
  if (d.count == 0 && d.coll != Collective::kBarrier && d.coll != Collective::kAllGatherv &&
      d.coll != Collective::kReduceScatterv) {
    return Status::Ok();
  }
  if (d.on_device()) return ExecuteOnDevice(d, deadline);  // comes back here with host buffers
  CIUIC_ASSIGN_OR_RETURN(const CallPlan* plan, PlanFor(d));
  if (plan != last_algorithm_plan) {
    last_algorithm = plan->why;
    last_algorithm_plan = plan;
  }
  // CIUIC_DEBUG=INFO: the model's prediction next to the measured time of
  // every call (not timed otherwise: this is the small-message path).
  const bool timed = LogEnabled(LogLevel::kInfo);
  const Clock::time_point t0 = timed ? Clock::now() : Clock::time_point();
  Status s;
  if (plan->algorithm->kind != AlgorithmKind::kSchedule) {
    s = RunDirect(d, deadline);
  } else {
    auto source = [this](int peer, int channel) { return GetLink(peer, channel, true); };
    Executor exec(*backend, *reducer, wait_spin);
    CIUIC_ASSIGN_OR_RETURN(ExecJob job, JobFor(d, *plan));
    s = exec.RunMany({job}, source, deadline, &aborted, nullptr);
    if (s.ok()) s = Finish(d);
  }
  if (timed && s.ok()) {
    const double measured = std::chrono::duration<double>(Clock::now() - t0).count();
    // The model's time for this very call (selection costed its size class).
    CostParams p = selection.params;
    if (tuning.has_value()) ApplyTuning(*tuning, backend->kind(), &p, d.dtype, d.op);
    StatusOr<double> predicted = PredictCall(*plan->algorithm, ShapeOf(d, size, backend->kind()), p, selection.limits);
    CIUIC_LOG(kInfo, "%s %zu B: %s predicted %.2f us, measured %.2f us", CollectiveName(d.coll),
              d.count * DataTypeSize(d.dtype), plan->algorithm->name(), predicted.ok() ? *predicted * 1e6 : -1.0,
              measured * 1e6);
  }
  return s;
}

Status CommImpl::ExecuteBatch(std::vector<std::shared_ptr<OpState>>* batch) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  const OpDesc& first = (*batch)[0]->desc;
  if (!IsPointToPoint(first)) return ExecuteCollective(first, deadline);
  auto source = [this](int peer, int channel) { return GetLink(peer, channel, false); };
  Executor exec(*backend, *reducer, wait_spin);
  // Point-to-point: this one and every send/recv queued behind it (also
  // those posted while it runs) progress together, so ISend + IRecv in
  // either order between two ranks cannot deadlock on full rings.
  std::deque<CallPlan> plans;
  std::vector<ExecJob> jobs;
  // GPU buffers: sends copied to host mirrors here, receives copied back
  // once the batch is done (mirror pair k for the k-th operation).
  std::deque<Staged> staged;
  auto prepare = [&](const OpDesc& d) -> StatusOr<ExecJob> {
    const OpDesc* h = &d;
    if (d.on_device()) {
      CIUIC_ASSIGN_OR_RETURN(Staged st, StageIn(*devmem, *mirrors, plans.size(), d, rank, size));
      staged.push_back(std::move(st));
      h = &staged.back().host;
    }
    plans.emplace_back();
    StatusOr<ExecJob> j = Prepare(*h, &plans.back());
    if (!j.ok()) {
      plans.pop_back();
      if (d.on_device()) staged.pop_back();
    }
    return j;
  };
  CIUIC_ASSIGN_OR_RETURN(ExecJob job, prepare(first));
  jobs.push_back(job);
  Status more_error;
  auto more = [&](std::vector<ExecJob>* out) {
    std::lock_guard<std::mutex> lock(mu);
    while (!queue.empty() && IsPointToPoint(queue.front()->desc)) {
      StatusOr<ExecJob> j = prepare(queue.front()->desc);
      if (!j.ok()) break;  // left in the queue: it fails on its own turn
      batch->push_back(queue.front());
      queue.pop_front();
      queued.store(queue.size(), std::memory_order_release);
      out->push_back(*j);
    }
  };
  CIUIC_RETURN_IF_ERROR(exec.RunMany(jobs, source, deadline, &aborted, more));
  for (const Staged& st : staged) CIUIC_RETURN_IF_ERROR(CopyBack(*devmem, st));
  return Status::Ok();
}

template <typename F>
Status CommImpl::Guarded(F&& body) {
  std::lock_guard<std::mutex> lock(exec_mu);
  if (aborted.load()) return AbortedError("communicator aborted");
  if (!error.ok()) return Status(error.code(), "communicator failed earlier: " + error.message());
  Status s = body();
  // Argument errors leave the communicator usable; everything else (a peer
  // failed, a timeout) poisons it: the ranks are out of step.
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) error = s;
  return s;
}

Status CommImpl::RunBatch(std::vector<std::shared_ptr<OpState>>* batch) {
  return Guarded([&] { return ExecuteBatch(batch); });
}

Status CommImpl::RunBlocking(OpDesc desc) {
  const bool empty = queued.load(std::memory_order_acquire) == 0;
  // Order is kept: the queue is empty and exec_mu waits for an operation
  // the progress thread may still be finishing.
  if (empty && !IsPointToPoint(desc)) {
    return Guarded([&] {
      return ExecuteCollective(desc, Clock::now() + std::chrono::milliseconds(config.timeout_ms));
    });
  }
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<OpState> op, SubmitOrRun(std::move(desc), true));
  return WaitFor(*op);
}

bool CommImpl::RunNext() {
  std::vector<std::shared_ptr<OpState>> batch;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (queue.empty()) return false;
    batch.push_back(queue.front());
    queue.pop_front();
    queued.store(queue.size(), std::memory_order_release);
  }
  Status s = RunBatch(&batch);
  for (auto& op : batch) Complete(*op, s);
  return true;
}

StatusOr<std::shared_ptr<OpState>> CommImpl::SubmitOrRun(OpDesc desc, bool run_inline) {
  if (run_inline) {
    // A blocking call with nothing queued runs on the calling thread: no
    // handoff to the progress thread (two futex wake-ups, ~7 us each here).
    // Order is kept: the queue is empty and exec_mu waits for an operation
    // the progress thread may still be finishing.
    if (queued.load(std::memory_order_acquire) == 0) {
      std::vector<std::shared_ptr<OpState>> batch{std::make_shared<OpState>()};
      batch[0]->desc = std::move(desc);
      Status s = RunBatch(&batch);
      for (auto& op : batch) Complete(*op, s);
      return batch[0];
    }
  }
  return Submit(std::move(desc));
}

void CommImpl::ProgressLoop() {
  if (config.progress_cpu >= 0) (void)topology::BindThisThreadToCpu(config.progress_cpu);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop requested and drained
    }
    RunNext();
  }
}

StatusOr<std::shared_ptr<OpState>> CommImpl::Submit(OpDesc desc) {
  auto op = std::make_shared<OpState>();
  op->desc = std::move(desc);
  {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(op);
    queued.store(queue.size(), std::memory_order_release);
  }
  cv.notify_one();
  return op;
}

Status CommImpl::WaitFor(OpState& op) {
  if (!thread.joinable()) {
    // Caller mode: run queued operations in order up to this one.
    while (!op.done.load(std::memory_order_acquire) && RunNext()) {
    }
  } else {
    // Spin briefly (the op may be about to finish), then sleep.
    const auto spin_until = Clock::now() + std::chrono::microseconds(50);
    while (!op.done.load(std::memory_order_acquire) && Clock::now() < spin_until) sched_yield();
    std::unique_lock<std::mutex> lock(op.mu);
    op.cv.wait(lock, [&] { return op.done.load(std::memory_order_acquire); });
  }
  std::lock_guard<std::mutex> lock(op.mu);
  return op.status;
}

}  // namespace collectives

// ---------------------------------------------------------------------------
// Public API.

using collectives::Collective;
using collectives::CommImpl;
using collectives::OpDesc;

Status Request::Wait() {
  if (state_ == nullptr) return InvalidArgumentError("Request::Wait on an empty request");
  return comm_->WaitFor(*state_);
}

StatusOr<bool> Request::Test() {
  if (state_ == nullptr) return InvalidArgumentError("Request::Test on an empty request");
  if (!comm_->thread.joinable() && !state_->done.load(std::memory_order_acquire)) {
    // Caller mode: Test makes progress by running the queue up to this op.
    CIUIC_RETURN_IF_ERROR(comm_->WaitFor(*state_));
  }
  if (!state_->done.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->status.ok()) return state_->status;
  return true;
}

Communicator::Communicator(std::shared_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateWithStore(
    int rank, int size, std::shared_ptr<transport::Store> store, const Config& config) {
  if (size < 1) return InvalidArgumentError("size must be >= 1 (got " + std::to_string(size) + ")");
  if (rank < 0 || rank >= size) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  if (store == nullptr) return InvalidArgumentError("store is null");
  auto impl = std::make_shared<CommImpl>();
  impl->rank = rank;
  impl->size = size;
  impl->config = config;
  impl->store = std::move(store);
  CIUIC_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

namespace {
StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgumentError("store address '" + addr + "': expected host:port");
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = addr.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535) {
    return InvalidArgumentError("store address '" + addr + "': port must be 1..65535");
  }
  return std::make_pair(host, static_cast<uint16_t>(p));
}
}  // namespace


StatusOr<std::unique_ptr<Communicator>> Communicator::Create(int rank, int size,
                                                             const std::string& store_addr,
                                                             const Config& config) {
  CIUIC_ASSIGN_OR_RETURN(auto hp, SplitHostPort(store_addr));
  return CreateTcp(rank, size, hp.first, hp.second, config.store_external, config.secret, config);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateTcp(int rank, int size, const std::string& host,
                                                                uint16_t port, bool external,
                                                                const std::string& secret,
                                                                const Config& config) {
  std::unique_ptr<transport::TcpStoreServer> server;
  if (rank == 0 && !external) {
    // Listen on every interface unless the address is loopback, so ranks on
    // other hosts reach it.
    const bool loop = host == "127.0.0.1" || host == "localhost" || host == "::1";
    StatusOr<std::unique_ptr<transport::TcpStoreServer>> started =
        transport::TcpStoreServer::Start(loop ? host : "", port, secret);
    if (!started.ok()) {
      return Status(started.status().code(), "rank 0 serving the store at " + host + ":" +
                                                 std::to_string(port) + " (CIUIC_STORE_ADDR): " +
                                                 started.status().message());
    }
    server = std::move(*started);
  }
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::TcpStoreClient> client,
                         transport::TcpStoreClient::Connect(host, port, secret,
                                                            std::chrono::milliseconds(config.timeout_ms)));
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         CreateWithStore(rank, size, std::shared_ptr<transport::Store>(std::move(client)), config));
  comm->impl_->server = std::move(server);
  return comm;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateFromEnv() {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  CIUIC_ASSIGN_OR_RETURN(transport::JobInfo job, transport::DiscoverJob(config));
  std::unique_ptr<transport::TcpStoreServer> pmix_server;  // rank 0's, when the PMIx rendezvous started it
  if (job.world_size > 1 && job.store_host.empty() && job.launcher == "pmix") {
    // No CIUIC_STORE_ADDR: rank 0's store address (and a fresh secret) come
    // through the launcher's PMIx server.
    CIUIC_ASSIGN_OR_RETURN(pmix_server, transport::pmix::Rendezvous(&job, config.socket_ifname));
  }
  if (job.world_size > 1 && job.store_host.empty()) {
    return InvalidArgumentError("CIUIC_STORE_ADDR is not set (host:port of the rendezvous store; rank 0 serves it)");
  }
  config.timeout_ms = job.timeout.count();
  if (job.world_size == 1 && job.store_host.empty()) {
    // A single rank needs no rendezvous: an in-process store.
    CIUIC_ASSIGN_OR_RETURN(auto server, transport::TcpStoreServer::Start("127.0.0.1", 0, ""));
    CIUIC_ASSIGN_OR_RETURN(auto client, transport::TcpStoreClient::Connect("127.0.0.1", server->port(), "",
                                                                          std::chrono::milliseconds(config.timeout_ms)));
    CIUIC_ASSIGN_OR_RETURN(auto comm, CreateWithStore(0, 1, std::shared_ptr<transport::Store>(std::move(client)), config));
    comm->impl_->server = std::move(server);
    return comm;
  }
  CIUIC_ASSIGN_OR_RETURN(auto comm, CreateTcp(job.rank, job.world_size, job.store_host, job.store_port,
                                              job.store_external || pmix_server != nullptr, job.secret, config));
  if (pmix_server != nullptr) comm->impl_->server = std::move(pmix_server);
  return comm;
}

namespace collectives {
DeviceMemory* DeviceMemoryOf(const Communicator& comm) { return comm.impl_->devmem.get(); }
}  // namespace collectives

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
std::string Communicator::transport_name() const { return transport::BackendName(impl_->backend->kind()); }
std::string Communicator::last_algorithm() const {
  std::lock_guard<std::mutex> lock(impl_->exec_mu);
  return impl_->last_algorithm;
}

void Communicator::Abort() {
  impl_->aborted.store(true);
}

namespace {
Status CheckBuf(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0) return InvalidArgumentError(std::string(name) + " is null");
  return Status::Ok();
}
Status CheckType(DataType dtype, ReduceOp op) {
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) > 9) return InvalidArgumentError("dtype: unknown datatype");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > 4) return InvalidArgumentError("op: unknown reduction");
  return Status::Ok();
}
}  // namespace

namespace {
// The blocking wrappers call the i-forms (which check the arguments and
// build the operation) with t_blocking set: the operation then runs through
// RunBlocking, its status lands in t_blocking_status and the i-form returns
// an empty Request.
thread_local bool t_blocking = false;
thread_local Status t_blocking_status;
}  // namespace

#define CIUIC_SUBMIT(desc)                                                   \
  do {                                                                       \
    impl_->Classify(&desc);                                                  \
    if (t_blocking) {                                                        \
      t_blocking = false;                                                    \
      t_blocking_status = impl_->RunBlocking(std::move(desc));               \
      return Request();                                                      \
    }                                                                        \
    CIUIC_ASSIGN_OR_RETURN(auto _op, impl_->Submit(std::move(desc)));        \
    Request _r;                                                              \
    _r.state_ = std::move(_op);                                              \
    _r.comm_ = impl_;                                                        \
    return _r;                                                               \
  } while (0)

namespace {
Status CheckAllReduce(const void* sendbuf, const void* recvbuf, size_t count, DataType dtype, ReduceOp op) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, op));
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, count, "sendbuf"));
  return CheckBuf(recvbuf, count, "recvbuf");
}
}  // namespace

StatusOr<Request> Communicator::IAllReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                           ReduceOp op) {
  CIUIC_RETURN_IF_ERROR(CheckAllReduce(sendbuf, recvbuf, count, dtype, op));
  OpDesc d{Collective::kAllReduce, sendbuf, recvbuf, count, {}, dtype, op, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IBroadcast(void* buf, size_t count, DataType dtype, int root) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(buf, count, "buf"));
  if (root < 0 || root >= size()) return InvalidArgumentError("root " + std::to_string(root) + " outside [0, " + std::to_string(size()) + ")");
  OpDesc d{Collective::kBroadcast, buf, buf, count, {}, dtype, ReduceOp::kSum, root};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                        ReduceOp op, int root) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, op));
  if (root < 0 || root >= size()) return InvalidArgumentError("root " + std::to_string(root) + " outside [0, " + std::to_string(size()) + ")");
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, count, "sendbuf"));
  if (rank() == root) CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, count, "recvbuf (at the root)"));
  OpDesc d{Collective::kReduce, sendbuf, recvbuf, count, {}, dtype, op, root};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, sendcount, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, sendcount, "recvbuf"));
  OpDesc d{Collective::kAllGather, sendbuf, recvbuf, sendcount, {}, dtype, ReduceOp::kSum, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IAllGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                            DataType dtype) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  if (recvcounts == nullptr) return InvalidArgumentError("recvcounts is null");
  std::vector<size_t> counts(recvcounts, recvcounts + size());
  size_t total = 0;
  for (size_t c : counts) total += c;
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, counts[rank()], "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, total, "recvbuf"));
  OpDesc d{Collective::kAllGatherv, sendbuf, recvbuf, counts[rank()], counts, dtype, ReduceOp::kSum, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                               DataType dtype, ReduceOp op) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, op));
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, recvcount, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, recvcount, "recvbuf"));
  OpDesc d{Collective::kReduceScatter, sendbuf, recvbuf, recvcount, {}, dtype, op, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IReduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                                DataType dtype, ReduceOp op) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, op));
  if (recvcounts == nullptr) return InvalidArgumentError("recvcounts is null");
  std::vector<size_t> counts(recvcounts, recvcounts + size());
  size_t total = 0;
  for (size_t c : counts) total += c;
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, total, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, counts[rank()], "recvbuf"));
  OpDesc d{Collective::kReduceScatterv, sendbuf, recvbuf, counts[rank()], counts, dtype, op, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IAllToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(sendbuf, count, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(recvbuf, count, "recvbuf"));
  if (sendbuf == recvbuf && count > 0 && size() > 1) return InvalidArgumentError("all-to-all cannot run in place");
  OpDesc d{Collective::kAllToAll, sendbuf, recvbuf, count, {}, dtype, ReduceOp::kSum, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IBarrier() {
  OpDesc d{Collective::kBarrier, nullptr, nullptr, 0, {}, DataType::kUint8, ReduceOp::kSum, 0};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::ISend(const void* buf, size_t count, DataType dtype, int peer) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(buf, count, "buf"));
  if (peer < 0 || peer >= size() || peer == rank()) return InvalidArgumentError("peer " + std::to_string(peer) + " is not another rank");
  OpDesc d{Collective::kSend, buf, nullptr, count, {}, dtype, ReduceOp::kSum, peer};
  CIUIC_SUBMIT(d);
}

StatusOr<Request> Communicator::IRecv(void* buf, size_t count, DataType dtype, int peer) {
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(buf, count, "buf"));
  if (peer < 0 || peer >= size() || peer == rank()) return InvalidArgumentError("peer " + std::to_string(peer) + " is not another rank");
  OpDesc d{Collective::kRecv, nullptr, buf, count, {}, dtype, ReduceOp::kSum, peer};
  CIUIC_SUBMIT(d);
}
#undef CIUIC_SUBMIT

#define CIUIC_BLOCKING(call)                                \
  do {                                                      \
    t_blocking = true;                                      \
    StatusOr<Request> _rr = call;                           \
    t_blocking = false;                                     \
    if (!_rr.ok()) return _rr.status();                     \
    if (!_rr->valid()) return std::move(t_blocking_status); \
    return _rr->Wait();                                     \
  } while (0)

// The small-message path: straight to RunBlocking (no Request, no
// thread-local hand-back of the status).
Status Communicator::AllReduce(const void* s, void* r, size_t n, DataType t, ReduceOp o) {
  CIUIC_RETURN_IF_ERROR(CheckAllReduce(s, r, n, t, o));
  OpDesc d{Collective::kAllReduce, s, r, n, {}, t, o, 0};
  impl_->Classify(&d);
  return impl_->RunBlocking(std::move(d));
}
Status Communicator::Broadcast(void* b, size_t n, DataType t, int root) { CIUIC_BLOCKING(IBroadcast(b, n, t, root)); }
Status Communicator::Reduce(const void* s, void* r, size_t n, DataType t, ReduceOp o, int root) { CIUIC_BLOCKING(IReduce(s, r, n, t, o, root)); }
Status Communicator::AllGather(const void* s, void* r, size_t n, DataType t) { CIUIC_BLOCKING(IAllGather(s, r, n, t)); }
Status Communicator::AllGatherV(const void* s, void* r, const size_t* c, DataType t) { CIUIC_BLOCKING(IAllGatherV(s, r, c, t)); }
Status Communicator::ReduceScatter(const void* s, void* r, size_t n, DataType t, ReduceOp o) { CIUIC_BLOCKING(IReduceScatter(s, r, n, t, o)); }
Status Communicator::ReduceScatterV(const void* s, void* r, const size_t* c, DataType t, ReduceOp o) { CIUIC_BLOCKING(IReduceScatterV(s, r, c, t, o)); }
Status Communicator::AllToAll(const void* s, void* r, size_t n, DataType t) { CIUIC_BLOCKING(IAllToAll(s, r, n, t)); }
Status Communicator::Barrier() { CIUIC_BLOCKING(IBarrier()); }
Status Communicator::Send(const void* b, size_t n, DataType t, int peer) { CIUIC_BLOCKING(ISend(b, n, t, peer)); }
Status Communicator::Recv(void* b, size_t n, DataType t, int peer) { CIUIC_BLOCKING(IRecv(b, n, t, peer)); }
#undef CIUIC_BLOCKING

}  // namespace ciuic

namespace ciuic {
StatusOr<std::vector<size_t>> PartitionByCost(const std::vector<double>& costs, int parts) {
  return collectives::PartitionMinMax(costs, parts);
}
}  // namespace ciuic
