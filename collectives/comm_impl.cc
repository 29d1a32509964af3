// CommImpl: planning and running the communicator's operations (comm_impl.h).
#include "collectives/comm_impl.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <new>
#include <system_error>
#include <thread>

#include "common/fp_env.h"
#include "common/log.h"

namespace ciuic::collectives {

using transport::BackendKind;

// Communicators of this process, each under its own store prefix.
std::string NextCommPrefix() {
  static std::atomic<int> counter{0};
  return "ciuic/comm" + std::to_string(counter.fetch_add(1));
}

namespace {

// Calls at least this large send straight from the caller's buffers (tcp,
// verbs); below it, a registration costs more than the copy it saves.
constexpr size_t kZeroCopyMinBytes = 16u << 10;

bool IsPointToPoint(const OpDesc& d) { return d.coll == Collective::kSend || d.coll == Collective::kRecv; }

size_t PipelineChunkBytes(const OpDesc& d, int nranks) {
  return collectives::PipelineChunkBytes(d.coll, d.count, d.counts, DataTypeSize(d.dtype), nranks);
}


// AVG = sum over ranks, then divide once here (the narrow floats through
// f32: one rounding).
Status DivideInPlace(const kernels::Reducer& reducer, void* buf, size_t count,
                     DataType dtype, int n) {
  if (IsNarrowFloat(dtype)) {
    const size_t es = DataTypeSize(dtype);
    auto* p = static_cast<char*>(buf);
    std::vector<float> tmp(std::min<size_t>(count, 4096));
    for (size_t at = 0; at < count; at += tmp.size()) {
      const size_t m = std::min(tmp.size(), count - at);
      CIUIC_RETURN_IF_ERROR(reducer.Convert(p + at * es, dtype, tmp.data(), DataType::kFloat32, m));
      for (size_t i = 0; i < m; ++i) tmp[i] /= static_cast<float>(n);
      CIUIC_RETURN_IF_ERROR(reducer.Convert(tmp.data(), DataType::kFloat32, p + at * es, dtype, m));
    }
    return Status::Ok();
  }
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
// T is a type: it cannot take parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CIUIC_DIV_INT(T)                                      \
  {                                                           \
    auto* p = static_cast<T*>(buf);                           \
    for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n)); \
    return Status::Ok();                                      \
  }
// NOLINTEND(bugprone-macro-parentheses)
    case DataType::kInt8: CIUIC_DIV_INT(int8_t)
    case DataType::kUint8: CIUIC_DIV_INT(uint8_t)
    case DataType::kInt16: CIUIC_DIV_INT(int16_t)
    case DataType::kUint16: CIUIC_DIV_INT(uint16_t)
    case DataType::kInt32: CIUIC_DIV_INT(int32_t)
    case DataType::kUint32: CIUIC_DIV_INT(uint32_t)
    case DataType::kInt64: CIUIC_DIV_INT(int64_t)
    case DataType::kUint64: CIUIC_DIV_INT(uint64_t)
#undef CIUIC_DIV_INT
    default: break;
  }
  return InvalidArgumentError(std::string("avg on dtype ") + DataTypeName(dtype));
}

bool IsReduction(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter ||
         c == Collective::kReduceScatterv;
}

}  // namespace

CommImpl::CommImpl(int rank, int size, const Config& config, std::shared_ptr<transport::Store> store,
                   std::string prefix)
    : rank_(rank),
      size_(size),
      config_(config),
      store_(std::move(store)),
      prefix_(std::move(prefix)),
      queue_(std::make_unique<OpQueue>([this](OpQueue::Batch* b) { return RunBatch(b); })) {}

// The queue first: its progress thread runs on everything else.
// The queue stays reachable while the progress thread finishes its batch
// (a send/recv batch asks it for more, and ends once the peers have taken
// its sends: what was sent is delivered, within the timeout).
CommImpl::~CommImpl() {
  if (queue_) queue_->Shutdown();
  queue_.reset();
}

Status CommImpl::Init() {
  // The tuning file's numbers (strtod rounds as the environment says) and
  // the parameters derived from them, alike on every rank.
  const DefaultFpEnv env;
  const auto timeout = std::chrono::milliseconds(config_.timeout_ms);
  CIUIC_ASSIGN_OR_RETURN(selection_.algo, AlgoKnob::Parse(config_.algo));
  CIUIC_ASSIGN_OR_RETURN(link_options_, transport::LinkOptions::FromConfig(config_));
  std::string tuning_text;
  if (!config_.tuning_file.empty()) {
    CIUIC_ASSIGN_OR_RETURN(Tuning t, LoadTuningFile(config_.tuning_file));
    tuning_text = FormatTuning(t);
    tuning_ = std::move(t);
  }
  LocalRanks local;
  CIUIC_ASSIGN_OR_RETURN(decision_, AgreeOnCommunicator(*store_, prefix_, rank_, size_, config_,
                                                        TuningId(tuning_.has_value() ? &tuning_text : nullptr), timeout,
                                                        &local));
  // Each pair's kind, alike on every rank; the plan and the network
  // backends follow the network kind when this rank has a peer elsewhere.
  std::vector<BackendKind> route(static_cast<size_t>(size_));
  BackendKind net = BackendKind::kShm;
  for (int p = 0; p < size_; ++p) {
    route[static_cast<size_t>(p)] = PairKind(decision_, rank_, p);
    if (p != rank_ && route[static_cast<size_t>(p)] != BackendKind::kShm) net = std::max(net, route[static_cast<size_t>(p)]);
  }
  if (size_ == 1) route[0] = decision_.transport;
  const BackendKind kind = decision_.CollectiveKind();
  // The topology plan: this rank's NIC, pool node, progress CPU, caches.
  CIUIC_ASSIGN_OR_RETURN(const topology::Topology* topo, MachineTopology(config_));
  if (topo != nullptr) {
    CIUIC_ASSIGN_OR_RETURN(plan_, ComputeRankPlan(*topo, config_, local, rank_, size_ == 1 ? decision_.transport : net));
    CIUIC_LOG(kInfo, "topology plan: %s", topology::FormatRankPlan(*topo, *plan_).c_str());
  }
  kernels::CacheSizes caches = kernels::CacheSizes::FromSystem();
  if (plan_.has_value()) caches = kernels::CacheSizes{plan_->caches.l1d, plan_->caches.l2, plan_->caches.llc};
  CIUIC_ASSIGN_OR_RETURN(kernels::Reducer red, kernels::Reducer::Create(config_, caches));
  reducer_.emplace(red);
  wait_spin_ = decision_.ranks_outnumber_cpus ? std::chrono::microseconds(0) : transport::kDefaultSpin;
  transport::BackendOptions bo;
  bo.rank = rank_;
  bo.world_size = size_;
  bo.job_id = decision_.job_id;
  bo.secret = config_.secret;
  bo.config = config_;
  if (plan_.has_value()) {
    bo.device = plan_->device;
    bo.netdev = plan_->netdev;
    if (plan_->nic >= 0) bo.pool_numa_node = plan_->pool_numa_os;
  }
  std::map<BackendKind, transport::BackendOptions> options;
  for (BackendKind k : {BackendKind::kShm, BackendKind::kTcp, BackendKind::kVerbs}) options[k] = bo;
  StatusOr<std::unique_ptr<transport::Transports>> ts = transport::Transports::Open(rank_, route, options, 16u << 20);
  if (!ts.ok()) {
    return Status(ts.status().code(), "rank " + std::to_string(rank_) + ": transport " + ts.status().message() +
                                          " (CIUIC_TRANSPORT=" + config_.transport + ")");
  }
  transports_ = std::move(*ts);
  CIUIC_RETURN_IF_ERROR(selection_.algo.CheckTransport(kind));
  selection_.backend = kind;
  if (decision_.nhosts() > 1) selection_.host_of = decision_.host_of;
  selection_.params = DefaultCostParams(kind);
  selection_.params.chunk_bytes = link_options_.slot_size;
  selection_.params.nchannels = config_.nchannels;
  selection_.params.radix = config_.knomial_radix;
  selection_.params.aggregation = config_.pat_aggregation;
  selection_.params.ranks_outnumber_cpus = decision_.ranks_outnumber_cpus;
  // One machine whose cores move the bytes (shm, loopback or namespace tcp):
  // the ranks' sending, receiving and reducing share its CPUs, as ciuic-sim
  // --cpu-cores costs them (the model perf/sim_validate checks). Not where
  // ranks outnumber the CPUs: there it rates a 4-rank tree over tcp below
  // recursive doubling at 32-128 KiB, which runs in 0.5-0.9 of its time.
  if (decision_.machine_cpus > 0 && !decision_.ranks_outnumber_cpus && kind != BackendKind::kVerbs) {
    selection_.params.cpu_cores = decision_.machine_cpus;
  }
  if (decision_.nhosts() > 1 && !decision_.forced) {
    // Two levels: shm inside hosts, the network kind between them (under
    // CIUIC_TRANSPORT every pair is that kind: one level).
    CostParams intra = DefaultCostParams(BackendKind::kShm);
    if (tuning_.has_value()) ApplyTuning(*tuning_, BackendKind::kShm, &intra);
    selection_.params.host_of = decision_.host_of;
    TakeIntraFrom(intra, &selection_.params);
  }
  if (tuning_.has_value()) {
    selection_.tuning = &*tuning_;
    // Several hosts: the network kind's figures between hosts (the file's
    // between_hosts line, else its plain line unless it was measured on one
    // machine, where tcp is loopback's).
    tuning_level_ = decision_.nhosts() > 1 ? TuningLevel::kBetweenHosts : TuningLevel::kOneMachine;
    ApplyTuning(*tuning_, selection_.backend, &selection_.params, DataType::kFloat32, ReduceOp::kSum, tuning_level_);
    const bool network_from_file =
        tuning_level_ == TuningLevel::kOneMachine || FindBackendLine(*tuning_, kind, tuning_level_) != nullptr;
    CIUIC_LOG(kInfo, "tuning from %s (CIUIC_TUNING_FILE): %zu rules; %s alpha %.3g us, beta %.3g GB/s%s",
              config_.tuning_file.c_str(), tuning_->rules.size(), transport::BackendName(kind),
              selection_.params.alpha_s * 1e6, 1e-9 / selection_.params.beta_s_per_byte,
              network_from_file ? (tuning_level_ == TuningLevel::kBetweenHosts ? " (between hosts)" : "")
                                : " (defaults between hosts: the file has no between_hosts line and was measured on "
                                  "one machine, its network line is loopback's; its rules for one host do not apply)");
  }
  const ShmDirectOptions direct_options = DirectOptions();
  selection_.limits.slot_bytes = direct_options.slot_bytes;
  selection_.limits.one_shot_max_bytes = direct_options.one_shot_max_bytes;
  selection_.limits.exchange_reduce_max_bytes = direct_options.exchange_reduce_max_bytes;
  selection_.limits.exchange_move_max_bytes = direct_options.exchange_move_max_bytes;
  links_ = std::make_unique<LinkTable>(*transports_, *store_, prefix_, rank_, size_, link_options_, timeout);
  CIUIC_ASSIGN_OR_RETURN(gpu_, GpuRoute::Open(config_, rank_, size_, *store_, prefix_));
  if (transport::Backend* verbs = transports_->Find(BackendKind::kVerbs)) {
    reg_cache_ = std::make_unique<transport::RegistrationCache>(*verbs);
  }
  if (kind == BackendKind::kShm) {
    // The direct all-reduce's streaming stores (ShmDirect::AllReduce).
    Config nt = config_;
    nt.kernel_nt_threshold = 1;
    CIUIC_ASSIGN_OR_RETURN(kernels::Reducer sred, kernels::Reducer::Create(nt, caches));
    streaming_reducer_.emplace(sred);
  }
  CIUIC_LOG(kInfo, "communicator rank %d/%d on %s%s", rank_, size_, transports_->Describe().c_str(),
            wait_spin_.count() == 0 ? " (ranks outnumber their CPUs: waits yield without spinning)" : "");
  if (config_.progress == "thread") {
    std::vector<int> cpus;
    if (plan_.has_value()) {
      cpus = plan_->progress_cpus;
    } else if (config_.progress_cpu >= 0) {
      cpus = {config_.progress_cpu};
    }
    const std::string not_pinned = queue_->StartProgressThread(cpus);
    if (!not_pinned.empty()) {
      CIUIC_LOG(kWarn, "progress thread not pinned to CPUs %s: %s", topology::FormatCpuList(cpus).c_str(),
                not_pinned.c_str());
    }
  }
  return Status::Ok();
}

std::string CommImpl::transport_name() const { return transports_ ? transports_->Name() : "closed"; }

std::string CommImpl::job_transport_name() const {
  std::string out;
  for (transport::BackendKind k : decision_.KindsInUse()) out += (out.empty() ? "" : "+") + std::string(transport::BackendName(k));
  return out;
}

std::string CommImpl::last_algorithm() const {
  std::lock_guard<std::mutex> lock(exec_mu_);
  return last_algorithm_;
}

void CommImpl::Ran(const CallPlan& plan) {
  if (&plan == last_algorithm_plan_) return;  // said already
  last_algorithm_ = plan.why;
  last_algorithm_plan_ = &plan;
}

void CommImpl::Ran(const std::string& text) {
  last_algorithm_ = text;
  last_algorithm_plan_ = nullptr;
}

StatusOr<const CallPlan*> CommImpl::PlanFor(const OpDesc& d) {
  // The same call as the last one: no key built, no map searched.
  if (last_key_ != nullptr && last_key_->coll == d.coll && last_key_->send == d.send && last_key_->recv == d.recv &&
      last_key_->count == d.count && last_key_->dtype == d.dtype && last_key_->op == d.op &&
      last_key_->root == d.root && last_key_->counts == d.counts) {
    return last_plan_;
  }
  PlanKey key{d.coll, d.send, d.recv, d.count, d.counts, d.dtype, d.op, d.root};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    CIUIC_ASSIGN_OR_RETURN(CallPlan plan, PlanCall(d, rank_, size_, selection_, &selections_));
    // Said once per distinct call, not per call.
    CIUIC_LOG(kInfo, "%s count=%zu: %s", CollectiveName(d.coll), d.count, plan.why.c_str());
    if (plans_.size() >= kMaxCachedPlans) {
      plans_.clear();
      last_algorithm_plan_ = nullptr;
      fast_armed_.store(false, std::memory_order_relaxed);  // its plan is gone
    }
    it = plans_.emplace(std::move(key), std::move(plan)).first;
  }
  last_key_ = &it->first;
  last_plan_ = &it->second;
  return last_plan_;
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
  job.slot_bytes = link_options_.slot_size;
  job.chunk_bytes = PipelineChunkBytes(d, size_);
  job.dtype = d.dtype;
  job.op = d.op == ReduceOp::kAvg ? ReduceOp::kSum : d.op;  // AVG: sum, then scale once
  ExecBuffers& bufs = job.buffers;
  bufs.input = d.send;
  bufs.input_count = d.send == nullptr ? 0 : plan->layout.input_count;
  bufs.output = d.recv;
  bufs.output_count = d.recv == nullptr ? 0 : plan->layout.output_count;
  if (plan->schedule.scratch_count > 0) {
    const size_t want = plan->schedule.scratch_count * es;
    // A schedule that gathers every rank's vector (swinglat) needs n times
    // it, which a forced large call must not turn into an allocation that
    // takes the host down. Such an entry asks the same scratch on every
    // rank and CIUIC_SCRATCH_MAX is agreed at creation, so this refusal is
    // the same everywhere, before anything moves: an argument error, which
    // leaves the communicator usable (Guarded).
    const size_t call_bytes = std::max(plan->layout.input_count, plan->layout.output_count) * es;
    const size_t limit = ScratchLimitBytes(call_bytes, config_.scratch_max_bytes);
    if (plan->algorithm->gathers && want > limit) {
      return InvalidArgumentError(plan->schedule.algorithm + " needs " + std::to_string(want) +
                                  " B of scratch for this call, over the limit of " + std::to_string(limit) +
                                  " B (the larger of CIUIC_SCRATCH_MAX and twice the call's buffer): force "
                                  "another algorithm for vectors this large");
    }
    if (scratch_.size() < want) {
      try {
        scratch_.resize(want);
      } catch (const std::bad_alloc&) {
        // This rank only: it fails, its peers time out naming it.
        return ResourceExhaustedError(plan->schedule.algorithm + ": no memory for " + std::to_string(want) +
                                      " B of scratch");
      }
    }
    bufs.scratch = scratch_.data();
    bufs.scratch_count = plan->schedule.scratch_count;
  }
  if (plan->stage_input) {
    // An overlap of the caller's buffers that the schedule does not support:
    // run from a copy of the input (staging is reused between operations).
    if (staging_.size() < bufs.input_count * es) staging_.resize(bufs.input_count * es);
    if (bufs.input_count > 0) std::memcpy(staging_.data(), d.send, bufs.input_count * es);
    bufs.input = staging_.data();
  }
  // A verbs registration is a valid source for tcp links too (they read
  // its address); shm links never send from a registration.
  transport::Backend* tcp = reg_cache_ == nullptr ? transports_->Find(BackendKind::kTcp) : nullptr;
  if ((tcp != nullptr || reg_cache_ != nullptr) && d.count * es >= kZeroCopyMinBytes) {
    // Send straight from the caller's buffers. tcp: a registration is only
    // a bounds-checked pointer (nothing pinned), so one per call. verbs:
    // through the registration cache (pinned once, reused while the memory
    // stays mapped). Where registering fails (read-only memory for verbs),
    // the executor copies through a slot.
    auto reg = [&](const void* p, size_t count, const transport::MemoryRegion** out) {
      if (p == nullptr || count == 0) return;
      if (tcp != nullptr) {
        auto r = tcp->Register(const_cast<void*>(p), count * es);
        if (!r.ok()) return;
        std::shared_ptr<transport::MemoryRegion> region(std::move(*r));
        *out = region.get();
        job.keep.push_back(std::move(region));
        return;
      }
      auto h = reg_cache_->Ref(p, count * es);
      if (!h.ok()) return;
      *out = h->region;
      transport::RegistrationCache* cache = reg_cache_.get();
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
    case Collective::kReduce: n = rank_ == d.root ? d.count : 0; break;
    case Collective::kReduceScatter: n = d.count; break;
    case Collective::kReduceScatterv: n = d.counts[rank_]; break;
    default: break;
  }
  return n > 0 ? DivideInPlace(*reducer_, d.recv, n, d.dtype, size_) : Status::Ok();
}

ShmDirectOptions CommImpl::DirectOptions() const {
  ShmDirectOptions o;
  o.slot_bytes = link_options_.slot_size;
  o.nslots = link_options_.nslots;
  // The small ring takes at most CIUIC_BUFFER_SIZE too (64 slots of 16 KiB
  // by default; fewer when the buffer is smaller than 1 MiB).
  const size_t small_bytes = std::min(o.one_shot_max_bytes, o.slot_bytes);
  o.small_slots = std::min(o.small_slots, o.nslots * o.slot_bytes / small_bytes);
  // Where the kernels themselves turn to non-temporal stores (half the
  // last-level cache, at most 16 MiB; CIUIC_KERNEL_NT_THRESHOLD).
  o.stream_output_min_bytes = reducer_->nt_threshold_bytes();
  if (wait_spin_.count() == 0) o.spin = std::chrono::microseconds(0);
  o.cma = config_.shm_cma == "off" ? 0 : config_.shm_cma == "on" ? 2 : 1;
  o.cma_min_bytes = config_.shm_cma_min;
  o.cma_max_bytes = config_.shm_cma_max;
  return o;
}

Status CommImpl::RunDirect(const OpDesc& d, Clock::time_point deadline) {
  if (direct_ == nullptr) {
    transport::Backend* shm = transports_->Find(BackendKind::kShm);
    if (shm == nullptr || !transports_->uniform()) {
      return InternalError("the direct shared-memory path needs every peer on shm; this rank uses " + transport_name());
    }
    CIUIC_ASSIGN_OR_RETURN(direct_, ShmDirect::Create(*shm, *store_, prefix_, rank_, size_, DirectOptions(),
                                                     std::chrono::milliseconds(config_.timeout_ms), links_->peer_check()));
    CIUIC_LOG(kInfo, "direct shm: %s", direct_->cma_note().c_str());
  }
  const ReduceOp op = d.op == ReduceOp::kAvg ? ReduceOp::kSum : d.op;
  switch (d.coll) {
    case Collective::kBroadcast: return direct_->Broadcast(d.recv, d.count, d.dtype, d.root, *reducer_, deadline, &aborted_);
    case Collective::kReduce:
      CIUIC_RETURN_IF_ERROR(direct_->Reduce(d.send, d.recv, d.count, d.dtype, op, d.root, *reducer_, deadline, &aborted_));
      return Finish(d);
    case Collective::kAllGather: return direct_->AllGather(d.send, d.recv, d.count, d.dtype, deadline, &aborted_);
    case Collective::kReduceScatter:
      CIUIC_RETURN_IF_ERROR(direct_->ReduceScatter(d.send, d.recv, d.count, d.dtype, op, *reducer_, deadline, &aborted_));
      return Finish(d);
    case Collective::kAllToAll: return direct_->AllToAll(d.send, d.recv, d.count, d.dtype, deadline, &aborted_);
    case Collective::kBarrier: return direct_->Barrier(deadline, &aborted_);
    default: break;
  }
  CIUIC_RETURN_IF_ERROR(direct_->AllReduce(d.send, d.recv, d.count, d.dtype, op, *reducer_,
                                           streaming_reducer_.has_value() ? &*streaming_reducer_ : nullptr,
                                           deadline, &aborted_));
  return Finish(d);
}

StatusOr<bool> CommImpl::WidenFor(const OpDesc& d) {
  if (!IsNarrowFloat(d.dtype) || decision_.accumulate != "f32") return false;  // the cheap test first: every call asks
  if (d.op == ReduceOp::kMin || d.op == ReduceOp::kMax) return false;  // exact in any type
  // avg divides the rounded sum, premul_sum rounds each scaled input, and
  // beyond kMaxSources ranks the n-ary kernel is called more than once:
  // each is a second rounding.
  if (d.op == ReduceOp::kAvg || d.op == ReduceOp::kPremulSum || size_ > kernels::kMaxSources) return true;
  // Otherwise the shared-memory family reduces every rank's input in one
  // n-ary pass: it rounds once already. Decided on what every rank shares
  // (not this rank's buffer overlap), so that all send the same type; the
  // last call's answer is kept (the small-message path asks every call).
  WidenKey key{d.coll, d.count, d.dtype, d.op, d.root, d.counts};
  if (last_widen_.has_value() && last_widen_->first == key) return last_widen_->second;
  CallShape shape = ShapeOf(d, size_, selection_.backend);
  shape.partial_overlap = false;
  CIUIC_ASSIGN_OR_RETURN(const Selection sel, Select(shape, d.dtype, d.op, selection_, &selections_));
  const bool widen = sel.algorithm->kind == AlgorithmKind::kSchedule;
  last_widen_.emplace(std::move(key), widen);
  return widen;
}

Status CommImpl::RunWorking(const OpDesc& d, bool widen, Clock::time_point deadline) {
  const DataType wt = widen ? DataType::kFloat32 : d.dtype;
  const size_t es = DataTypeSize(d.dtype), wes = DataTypeSize(wt);
  const bool has_result = d.coll != Collective::kReduce || rank_ == d.root;
  size_t in_n = d.count, out_n = d.recv != nullptr && has_result ? d.count : 0;
  if (d.coll == Collective::kReduceScatter) in_n = d.count * static_cast<size_t>(size_);
  if (d.coll == Collective::kReduceScatterv) {
    in_n = 0;
    for (size_t c : d.counts) in_n += c;
  }
  // An output wholly inside the input (in place) keeps its place in the
  // copy; any other overlap gets an output of its own (the working copies
  // never overlap partly).
  const auto sb = reinterpret_cast<uintptr_t>(d.send), rb = reinterpret_cast<uintptr_t>(d.recv);
  const bool inside = out_n > 0 && rb >= sb && rb + out_n * es <= sb + in_n * es && (rb - sb) % es == 0;
  const size_t need = (in_n + (inside ? 0 : out_n)) * wes;
  if (working_.size() < need) working_.resize(need);
  char* win = working_.data();
  char* wout = inside ? win + (rb - sb) / es * wes : win + in_n * wes;
  const void* first[1] = {d.send};
  if (widen) {
    CIUIC_RETURN_IF_ERROR(reducer_->Convert(d.send, d.dtype, win, wt, in_n));
    first[0] = win;
  }
  if (d.op == ReduceOp::kPremulSum) {
    CIUIC_RETURN_IF_ERROR(reducer_->Reduce(win, first, 1, in_n, wt, ReduceOp::kPremulSum, d.factor));
  }
  OpDesc w = d;
  w.send = win;
  w.recv = out_n > 0 ? wout : nullptr;
  w.dtype = wt;
  w.op = d.op == ReduceOp::kPremulSum ? ReduceOp::kSum : d.op;
  w.factor = 1.0;
  CIUIC_RETURN_IF_ERROR(ExecuteCollective(w, deadline));
  if (out_n == 0) return Status::Ok();
  if (widen) return reducer_->Convert(wout, wt, d.recv, d.dtype, out_n);
  reducer_->Copy(d.recv, wout, out_n * es);
  return Status::Ok();
}

Status CommImpl::ExecuteCollective(const OpDesc& d, Clock::time_point deadline) {
  // Nothing to move (count 0; the v-forms and barrier aside): done, as in
  // MPI, without a plan or a look at any link.
  if (d.count == 0 && d.coll != Collective::kBarrier && d.coll != Collective::kAllGatherv &&
      d.coll != Collective::kReduceScatterv && d.coll != Collective::kAllToAllv) {
    return Status::Ok();
  }
  if (d.on_device()) {
    // Comes back here with host buffers.
    std::string ran;
    Status s = gpu_->Execute(d, deadline, &aborted_,
                             [this](const OpDesc& h, Clock::time_point dl) { return ExecuteCollective(h, dl); }, &ran);
    if (!ran.empty()) Ran(ran);
    return s;
  }
  if (IsReduction(d.coll)) {
    CIUIC_ASSIGN_OR_RETURN(const bool widen, WidenFor(d));
    if (widen || d.op == ReduceOp::kPremulSum) return RunWorking(d, widen, deadline);
  }
  CIUIC_ASSIGN_OR_RETURN(const CallPlan* plan, PlanFor(d));
  Ran(*plan);
  // CIUIC_DEBUG=INFO: the model's prediction next to the measured time of
  // every call (not timed otherwise: this is the small-message path).
  const bool timed = LogEnabled(LogLevel::kInfo);
  const Clock::time_point t0 = timed ? Clock::now() : Clock::time_point();
  Status s;
  if (plan->algorithm->kind != AlgorithmKind::kSchedule) {
    s = RunDirect(d, deadline);
  } else {
    auto source = [this](int peer, int channel) { return links_->Get(peer, channel, true); };
    Executor exec(*transports_, *reducer_, wait_spin_);
    CIUIC_ASSIGN_OR_RETURN(ExecJob job, JobFor(d, *plan));
    s = exec.RunMany({job}, source, deadline, &aborted_, nullptr);
    if (s.ok()) s = Finish(d);
  }
  if (timed && s.ok()) {
    const double measured = std::chrono::duration<double>(Clock::now() - t0).count();
    // The model's time for this very call (selection costed its size class).
    CostParams p = selection_.params;
    if (tuning_.has_value()) ApplyTuning(*tuning_, selection_.backend, &p, d.dtype, d.op, tuning_level_);
    StatusOr<double> predicted = PredictCall(*plan->algorithm, ShapeOf(d, size_, selection_.backend), p, selection_.limits);
    CIUIC_LOG(kInfo, "%s %zu B: %s predicted %.2f us, measured %.2f us", CollectiveName(d.coll),
              d.count * DataTypeSize(d.dtype), plan->algorithm->name(), predicted.ok() ? *predicted * 1e6 : -1.0,
              measured * 1e6);
  }
  return s;
}

Status CommImpl::ExecutePointToPoint(OpQueue::Batch* batch, Clock::time_point deadline) {
  auto source = [this](int peer, int channel) { return links_->Get(peer, channel, false); };
  Executor exec(*transports_, *reducer_, wait_spin_);
  // This one and every send/recv queued behind it (also those posted while
  // it runs) progress together, so ISend + IRecv in either order between
  // two ranks cannot deadlock on full rings.
  std::deque<CallPlan> plans;
  std::vector<ExecJob> jobs;
  // GPU buffers: sends copied to host mirrors here, receives copied back
  // once the batch is done (mirror pair k for the k-th operation).
  std::deque<Staged> staged;
  std::vector<int> staged_at;  // per operation: its entry in `staged`, or -1
  auto prepare = [&](const OpDesc& d) -> StatusOr<ExecJob> {
    const OpDesc* h = &d;
    if (d.on_device()) {
      CIUIC_ASSIGN_OR_RETURN(Staged st, gpu_->StageIn(plans.size(), d));
      staged.push_back(std::move(st));
      h = &staged.back().host;
    }
    StatusOr<CallPlan> plan = PlanCall(*h, rank_, size_, selection_, &selections_);
    if (!plan.ok()) {
      if (d.on_device()) staged.pop_back();
      return plan.status();
    }
    staged_at.push_back(d.on_device() ? static_cast<int>(staged.size()) - 1 : -1);
    plans.push_back(std::move(*plan));
    Ran(plans.back().why);
    return JobFor(*h, plans.back());
  };
  CIUIC_ASSIGN_OR_RETURN(ExecJob job, prepare((*batch)[0]->desc));
  jobs.push_back(job);
  auto more = [&](std::vector<ExecJob>* out) {
    queue_->TakeFront(
        [&](const OpDesc& d) {
          if (!IsPointToPoint(d)) return false;
          StatusOr<ExecJob> j = prepare(d);
          if (!j.ok()) return false;  // left in the queue: it fails on its own turn
          out->push_back(*j);
          return true;
        },
        batch);
  };
  // Each operation completes as soon as its own job is done, while the
  // batch goes on: a receive that has arrived must not wait for a send to a
  // rank that asks for that link only after this receive returns.
  auto done = [&](size_t k) {
    Status s = staged_at[k] >= 0 ? gpu_->CopyBack(staged[static_cast<size_t>(staged_at[k])]) : Status::Ok();
    Complete(*(*batch)[k], std::move(s));
  };
  p2p_batch_.store(true, std::memory_order_release);
  Status s = exec.RunMany(jobs, source, deadline, &aborted_, more, done);
  p2p_batch_.store(false, std::memory_order_release);
  return s;
}

Status CommImpl::ExecuteBatch(OpQueue::Batch* batch) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  const OpDesc& first = (*batch)[0]->desc;
  if (!IsPointToPoint(first)) return ExecuteCollective(first, deadline);
  return ExecutePointToPoint(batch, deadline);
}

namespace {

// Follows the fault records from `blamed`: each failed rank records in the
// store whom its error names; the chain ends at a rank that records nothing
// in time (stopped or dead: the job's first fault). `blamed`'s record is
// waited for `first_wait`; the rest within `then_wait` more (0: within the
// same deadline). Returns the chain, this rank first.
std::vector<int> FollowFaultRecords(transport::Store& store, const std::string& key, int self, int size,
                                    int blamed, std::chrono::milliseconds first_wait,
                                    std::chrono::milliseconds then_wait) {
  std::vector<int> chain{self, blamed};
  auto deadline = std::chrono::steady_clock::now() + first_wait;
  for (int at = blamed; static_cast<int>(chain.size()) <= size;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    StatusOr<std::string> rec = store.Get(key + std::to_string(at), std::max(left, std::chrono::milliseconds(1)));
    // Only a record that did not come in time ends the chain; a store that
    // failed or a malformed record says nothing about the rank.
    if (!rec.ok()) {
      if (rec.status().code() == StatusCode::kDeadlineExceeded) break;
      return {self, blamed};
    }
    char* end = nullptr;
    const long next = std::strtol(rec->c_str(), &end, 10);
    if (end == rec->c_str() || *end != '\0' || next < 0 || next >= size) return {self, blamed};
    if (std::find(chain.begin(), chain.end(), static_cast<int>(next)) != chain.end()) {
      return {self, blamed};  // ranks waiting on each other: no first fault to name
    }
    chain.push_back(static_cast<int>(next));
    at = static_cast<int>(next);
    if (chain.size() == 3 && then_wait.count() > 0) deadline = std::chrono::steady_clock::now() + then_wait;
  }
  return chain;
}

}  // namespace

Status CommImpl::NameFirstFault(const Status& s) {
  // Only a peer that went silent or away is a fault of another rank; local
  // errors (descriptors, memory, a secret mismatch) record nothing.
  if ((s.code() != StatusCode::kDeadlineExceeded && s.code() != StatusCode::kUnavailable) || size_ < 3) return s;
  const int blamed = RankNamedLast(s.message(), rank_);
  if (blamed < 0 || blamed >= size_) return s;
  // A peer seen gone (dead, exited, aborted) wrote its record, if any,
  // before it went: that is read at once, nothing is waited for. It may
  // have left after failing on another rank (a survivor that exited after
  // its own error), so its record is followed; none means it is the first
  // fault itself.
  const std::string& m = s.message();
  const bool gone = m.find("died") != std::string::npos || m.find("exited") != std::string::npos ||
                    m.find("killed") != std::string::npos || m.find("ABORTED") != std::string::npos ||
                    m.find("aborted") != std::string::npos;
  // The store may be gone or stopped with the faulty rank (rank 0 serves
  // it): the lookup runs on a thread of its own that may outlive this call
  // (it holds only the store), and its answer counts only within the grace.
  const auto grace = std::chrono::milliseconds(std::clamp<int64_t>(config_.timeout_ms / 4, 100, 2000));
  const auto first_wait = gone ? std::chrono::milliseconds(50) : grace;
  const auto then_wait = gone ? grace : std::chrono::milliseconds(0);
  auto answer = std::make_shared<std::promise<std::vector<int>>>();
  std::future<std::vector<int>> got = answer->get_future();
  std::thread lookup;
  try {
    lookup = std::thread([store = store_, key = prefix_ + "/fault/", self = rank_, size = size_, blamed,
                          first_wait, then_wait, answer] {
      std::vector<int> chain{self, blamed};
      if (store->Set(key + std::to_string(self), std::to_string(blamed)).ok()) {
        chain = FollowFaultRecords(*store, key, self, size, blamed, first_wait, then_wait);
      }
      answer->set_value(std::move(chain));
    });
  } catch (const std::system_error&) {
    return s;  // no thread to spare: the local view stands
  }
  // An abort from another thread cuts the wait short: the caller asked for
  // the call back now, not for a better name.
  const auto give_up = std::chrono::steady_clock::now() + first_wait + then_wait + std::chrono::milliseconds(200);
  while (got.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
    if (aborted_.load() || std::chrono::steady_clock::now() >= give_up) {
      lookup.detach();  // stuck on the store: it ends with the store's own timeout
      return s;
    }
  }
  lookup.join();  // done: joined so that nothing of it outlives the call
  const std::vector<int> chain = got.get();
  if (chain.size() <= 2) return s;
  // "; behind it: rank 1 failed waiting on rank 2, rank 2 on rank 3, and
  // rank 3 reported nothing ...": the first fault is the last rank named.
  std::string behind = "; behind it: rank " + std::to_string(chain[1]) + " failed waiting on rank " +
                       std::to_string(chain[2]);
  for (size_t i = 2; i + 1 < chain.size(); ++i) {
    behind += ", rank " + std::to_string(chain[i]) + " on rank " + std::to_string(chain[i + 1]);
  }
  behind += ", and rank " + std::to_string(chain.back()) +
            " recorded no failure in time (stopped, dead or far behind): the job's first fault is rank " +
            std::to_string(chain.back());
  return Status(s.code(), s.message() + behind);
}

Status CommImpl::NameInOrigin(const Status& s) const {
  if (origin_ranks_.empty()) return s;
  const int named = RankNamedLast(s.message(), rank_);
  if (named < 0 || named >= size_) return s;
  // The rank here stays the last one named (RankNamedLast's callers).
  return Status(s.code(), s.message() + " [split from " + origin_prefix_ + ", where it is rank " +
                              std::to_string(origin_rank(named)) + "; rank " + std::to_string(named) + " here]");
}

template <typename F>
Status CommImpl::Guarded(F&& body) {
  // Every operation in the default floating-point environment
  // (common/fp_env.h): AVG's division, the widening decision and the cost
  // model's choices too, not only the kernels; a rank rounding otherwise
  // could compute other bytes, or break a near tie the other way and pick
  // another algorithm than its peers.
  const DefaultFpEnv env;
  std::lock_guard<std::mutex> lock(exec_mu_);
  if (aborted_.load()) return AbortedError("communicator aborted");
  if (!error_.ok()) return Status(error_.code(), "communicator failed earlier: " + error_.message());
  Status s = body();
  // Argument errors leave the communicator usable; everything else (a peer
  // failed, a timeout) poisons it: the ranks are out of step.
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) {
    // An abort requested while the call ran wins over what the call saw
    // meanwhile (often a peer's own abort): the caller gets the abort back.
    if (aborted_.load() && s.code() != StatusCode::kAborted) {
      s = AbortedError("communicator aborted while the call ran; it had seen: " + s.message());
    }
    s = NameInOrigin(NameFirstFault(s));
    error_ = s;
  }
  return s;
}

Status CommImpl::RunBatch(OpQueue::Batch* batch) {
  return Guarded([&] { return ExecuteBatch(batch); });
}

Status CommImpl::RunBlocking(OpDesc desc) {
  // Order is kept: nothing is queued, and exec_mu waits for an operation
  // the progress thread may still be finishing. No request object and no
  // hand-off to the progress thread (two futex wake-ups, ~7 us each).
  // A send/recv while a batch of them runs joins that batch (the batch
  // holds the executor; waiting for it could wait for this very message).
  if (queue_->Empty() && !(IsPointToPoint(desc) && p2p_batch_.load(std::memory_order_acquire))) {
    if (!IsPointToPoint(desc)) {
      return Guarded([&] {
        Status s = ExecuteCollective(desc, Clock::now() + std::chrono::milliseconds(config_.timeout_ms));
        if (s.ok()) ArmFast(desc);
        return s;
      });
    }
    std::shared_ptr<OpState> op = queue_->RunHere(std::move(desc));
    return op->status;
  }
  std::shared_ptr<OpState> op = queue_->Submit(std::move(desc));
  return queue_->Wait(*op);
}

void CommImpl::ArmFast(const OpDesc& d) {
  if (d.coll != Collective::kAllReduce || d.count == 0 || gpu_ != nullptr || direct_ == nullptr) return;
  // premul_sum's factor belongs to an op id that may be destroyed and reused.
  if (d.op == ReduceOp::kPremulSum) return;
  // The plan that ran must be this very call's: a widened call (f32
  // accumulation) planned its working copy instead.
  if (last_key_ == nullptr || last_key_->coll != d.coll || last_key_->send != d.send || last_key_->recv != d.recv ||
      last_key_->count != d.count || last_key_->dtype != d.dtype || last_key_->op != d.op || !last_key_->counts.empty()) {
    return;
  }
  if (last_plan_->algorithm->kind == AlgorithmKind::kSchedule) return;
  if (!direct_->FitsSmall(d.count * DataTypeSize(d.dtype))) return;
  fast_ = FastCall{d.send, d.recv, d.count, d.dtype, d.op, last_plan_};
  fast_armed_.store(true, std::memory_order_relaxed);
}

bool CommImpl::FastAllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, Status* out) {
  if (!fast_armed_.load(std::memory_order_relaxed) || !queue_->Empty()) return false;
  bool hit = false;
  Status s = Guarded([&] {
    // Under exec_mu_: the progress thread may have disarmed or re-armed it.
    if (!fast_armed_.load(std::memory_order_relaxed) || fast_.send != send || fast_.recv != recv ||
        fast_.count != count || fast_.dtype != dtype || fast_.op != op || LogEnabled(LogLevel::kInfo)) {
      return Status::Ok();
    }
    hit = true;
    ++fast_calls_;
    Ran(*fast_.plan);
    const bool avg = op == ReduceOp::kAvg;
    CIUIC_RETURN_IF_ERROR(direct_->AllReduceSmall(send, recv, count, dtype, avg ? ReduceOp::kSum : op, *reducer_,
                                                  std::chrono::milliseconds(config_.timeout_ms), &aborted_));
    return avg ? DivideInPlace(*reducer_, recv, count, dtype, size_) : Status::Ok();
  });
  // Not run (or refused by Guarded: aborted, failed earlier, which the
  // general path says again): the general path.
  if (!hit) return false;
  if (!s.ok()) fast_armed_.store(false, std::memory_order_relaxed);
  *out = std::move(s);
  return true;
}

}  // namespace ciuic::collectives
