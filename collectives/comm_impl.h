// Private: the communicator behind ciuic::Communicator, made of its parts:
//   bootstrap.h  what the ranks agreed (transport, job id, oversubscription)
//   links.h      this rank's links to its peers
//   gpu_route.h  where calls on GPU buffers run
//   op_queue.h   the operations in call order, and the progress thread
//   plan.h       each call's algorithm and schedule (cached per call)
//   executor.h / shm_direct.h  what runs a plan
// CommImpl ties them together: it takes an operation (blocking on the
// caller's thread, or queued), plans it, runs it under the sticky-error
// rules, and finishes it (AVG's division).
//
// Thread contract: the Communicator's methods from one thread at a time;
// operations run under exec_mu, one at a time, on the caller's thread
// (blocking calls with nothing queued, caller mode) or the progress
// thread; Wait/Test of a request from any thread; `aborted` from any.
#ifndef CIUIC_COLLECTIVES_COMM_IMPL_H_
#define CIUIC_COLLECTIVES_COMM_IMPL_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ciuic/collectives.h"
#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "collectives/bootstrap.h"
#include "collectives/executor.h"
#include "collectives/gpu_route.h"
#include "collectives/links.h"
#include "collectives/op_queue.h"
#include "collectives/plan.h"
#include "collectives/selection.h"
#include "collectives/shm_direct.h"
#include "collectives/topology_plan.h"
#include "collectives/tuning.h"
#include "transport/transport.h"

namespace ciuic::collectives {

// "ciuic/commN", N counting this process's communicators (the default
// store prefix of Communicator::CreateWithStore).
std::string NextCommPrefix();

class CommImpl {
 public:
  using Clock = std::chrono::steady_clock;

  // Keys under `prefix` in `store` (Communicator::CreateWithStore).
  CommImpl(int rank, int size, const Config& config, std::shared_ptr<transport::Store> store, std::string prefix);
  ~CommImpl();
  CommImpl(const CommImpl&) = delete;
  CommImpl& operator=(const CommImpl&) = delete;

  // Collective over all ranks: agrees on the communicator, opens the
  // backend and makes everything the calls need. Errors: the agreement's,
  // the backend's, CIUIC_ALGO's and CIUIC_TUNING_FILE's, CIUIC_GPU's.
  Status Init();

  // A blocking call: run here when nothing is queued, else queued behind
  // the rest and waited for.
  Status RunBlocking(OpDesc desc);
  // A blocking all-reduce with the arguments of the last one that ran the
  // direct path's small all-reduce (ShmDirect::FitsSmall): runs it without
  // the checks, plan lookup and dispatch those arguments already passed.
  // false: not that call (or CIUIC_DEBUG=INFO, something queued, a failed
  // communicator); the caller takes the general path.
  bool FastAllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, Status* out);
  // Calls FastAllReduce ran (tests).
  uint64_t fast_calls() const {
    std::lock_guard<std::mutex> lock(exec_mu_);
    return fast_calls_;
  }
  // An async call: queued.
  std::shared_ptr<OpState> Submit(OpDesc desc) { return queue_->Submit(std::move(desc)); }
  Status Wait(OpState& op) { return queue_->Wait(op); }
  Status Wait(OpState& op, std::chrono::milliseconds timeout) { return queue_->Wait(op, timeout); }
  bool Test(OpState& op) { return queue_->Test(op); }
  void Abort() { aborted_.store(true); }

  // Marks where the buffers of `d` live (nothing without GPU support).
  void Classify(OpDesc* d) const {
    if (gpu_ != nullptr) gpu_->Classify(d, rank_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The kind collectives are costed and tuned for (CommDecision::CollectiveKind).
  transport::BackendKind transport() const { return selection_.backend; }
  // The kinds this rank's pairs use: "shm", "tcp", "shm+tcp", ...
  std::string transport_name() const;
  std::string job_transport_name() const;
  const std::vector<int>& host_of() const { return decision_.host_of; }
  // CIUIC_TRANSPORT named one transport for every pair (shm inside hosts
  // included).
  bool transport_forced() const { return decision_.forced; }
  // How long waits spin before yielding: 0 where ranks outnumber their CPUs.
  std::chrono::microseconds wait_spin() const { return wait_spin_; }
  // The cores selection costs the ranks' work on (CostParams::cpu_cores).
  double selection_cpu_cores() const { return selection_.params.cpu_cores; }
  // The job id every rank of this communicator agreed on.
  const std::string& job_id() const { return decision_.job_id; }
  std::string last_algorithm() const;
  DeviceMemory* device_memory() const { return gpu_ == nullptr ? nullptr : gpu_->memory(); }
  // The topology plan it applies (none when the topology was not found).
  const std::optional<topology::RankPlan>& topology_plan() const { return plan_; }
  // Keeps the store's server (rank 0 serving it, or the process that made a
  // unique id) as long as the communicator; communicators split off it
  // share it.
  void KeepServer(std::shared_ptr<transport::TcpStoreServer> server) { server_ = std::move(server); }
  const std::shared_ptr<transport::TcpStoreServer>& server() const { return server_; }
  // What a communicator split off this one inherits.
  const Config& config() const { return config_; }
  const std::shared_ptr<transport::Store>& store() const { return store_; }
  const std::string& prefix() const { return prefix_; }
  // A communicator split off another names its culprits in the first
  // communicator of the line too (`ranks[i]`: rank i's rank there).
  void SetOrigin(std::string prefix, std::vector<int> ranks) {
    origin_prefix_ = std::move(prefix);
    origin_ranks_ = std::move(ranks);
  }
  const std::string& origin_prefix() const { return origin_prefix_.empty() ? prefix_ : origin_prefix_; }
  int origin_rank(int r) const { return origin_ranks_.empty() ? r : origin_ranks_[static_cast<size_t>(r)]; }

  // The implementation of a Communicator (tests and bucket.cc reach GPU
  // support through it).
  static CommImpl& Of(const Communicator& comm) { return *comm.impl_; }

 private:
  // Runs a batch (the queue's RunBatch) under the sticky-error rules.
  Status RunBatch(OpQueue::Batch* batch);
  // `body` under exec_mu: after an error other than a bad argument the
  // communicator is failed and says so to every later call.
  template <typename F>
  Status Guarded(F&& body);
  Status ExecuteBatch(OpQueue::Batch* batch);
  // One collective (not send/recv).
  Status ExecuteCollective(const OpDesc& d, Clock::time_point deadline);
  // Point-to-point: this one and every send/recv queued behind it progress
  // together.
  Status ExecutePointToPoint(OpQueue::Batch* batch, Clock::time_point deadline);
  // Runs `d` on the shared-memory family (plan kinds kShmDirect, kExchange).
  Status RunDirect(const OpDesc& d, Clock::time_point deadline);
  ShmDirectOptions DirectOptions() const;  // from the link options and the decision
  // The plan of a collective, cached per call (collective, counts, type,
  // op, root and buffers): a schedule is built once, not per call. Valid
  // until the next PlanFor (exec_mu held).
  StatusOr<const CallPlan*> PlanFor(const OpDesc& d);
  StatusOr<ExecJob> JobFor(const OpDesc& d, const CallPlan& plan);
  // AVG: the sum was computed; divide once.
  Status Finish(const OpDesc& d);
  // Whether a reduction of a narrow float runs on an f32 working copy
  // (CIUIC_ACCUMULATE=f32 and a network algorithm, which rounds per hop).
  StatusOr<bool> WidenFor(const OpDesc& d);
  // A reduction on a working copy of the input: widened to f32 (`widen`:
  // partial sums stay f32 across hops, rounded once at the end) and/or
  // scaled by premul_sum's factor, then summed; the result converted or
  // copied back.
  Status RunWorking(const OpDesc& d, bool widen, Clock::time_point deadline);
  // Says what ran (last_algorithm()): a cached plan's why, set once per
  // plan, or the text of a call planned afresh.
  void Ran(const CallPlan& plan);
  void Ran(const std::string& text);
  // The first failure of this communicator, with the job's first fault
  // appended when the peer it names failed in turn (the fault records in
  // the store, see comm_impl.cc): a survivor names the rank that stopped or
  // died, not only the neighbour it waited on.
  Status NameFirstFault(const Status& s);
  // The culprit's rank in the first communicator of the line (SetOrigin).
  Status NameInOrigin(const Status& s) const;

  const int rank_, size_;
  const Config config_;
  std::shared_ptr<transport::Store> store_;
  std::shared_ptr<transport::TcpStoreServer> server_;  // when this process serves the store
  const std::string prefix_;
  std::string origin_prefix_;     // empty: not split off another
  std::vector<int> origin_ranks_;
  CommDecision decision_;
  std::optional<topology::RankPlan> plan_;  // topology_plan.h
  std::chrono::microseconds wait_spin_ = transport::kDefaultSpin;  // 0 when ranks outnumber their CPUs

  // Transport.
  // One backend and pool per kind this rank's peers use (shm inside its
  // host, tcp or verbs between hosts).
  std::unique_ptr<transport::Transports> transports_;
  transport::LinkOptions link_options_;
  std::unique_ptr<LinkTable> links_;
  // verbs: caller buffers registered once and reused for zero-copy sends.
  std::unique_ptr<transport::RegistrationCache> reg_cache_;

  // Kernels.
  std::optional<kernels::Reducer> reducer_;
  std::optional<kernels::Reducer> streaming_reducer_;  // the same with non-temporal stores (shm)

  // Selection and plans.
  std::optional<Tuning> tuning_;  // CIUIC_TUNING_FILE
  // Which of the file's lines give the network kind's figures (between
  // hosts when the communicator spans several).
  TuningLevel tuning_level_ = TuningLevel::kOneMachine;
  SelectionContext selection_;
  SelectionCache selections_;
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
  std::map<PlanKey, CallPlan> plans_;
  // The last call's key and plan, checked before the map: a loop of the
  // same call pays one key comparison.
  const PlanKey* last_key_ = nullptr;
  const CallPlan* last_plan_ = nullptr;
  // FastAllReduce's call (exec_mu_; armed read without it first).
  struct FastCall {
    const void* send = nullptr;
    void* recv = nullptr;
    size_t count = 0;
    DataType dtype = DataType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    const CallPlan* plan = nullptr;
  };
  FastCall fast_;
  std::atomic<bool> fast_armed_{false};
  uint64_t fast_calls_ = 0;  // (exec_mu_)
  // Arms FastAllReduce after blocking call `d` ran fine, when it qualifies.
  void ArmFast(const OpDesc& d);

  // What runs plans.
  std::unique_ptr<ShmDirect> direct_;  // the shared-memory family, made on first use
  std::unique_ptr<GpuRoute> gpu_;      // null: buffers are not looked at
  std::vector<char> scratch_;          // schedules' scratch, reused
  std::vector<char> staging_;          // input copy for unsupported overlaps
  std::vector<char> working_;          // RunWorking's copies, reused
  // WidenFor's last call and answer.
  struct WidenKey {
    Collective coll;
    size_t count;
    DataType dtype;
    ReduceOp op;
    int root;
    std::vector<size_t> counts;
    bool operator==(const WidenKey& o) const {
      return coll == o.coll && count == o.count && dtype == o.dtype && op == o.op && root == o.root &&
             counts == o.counts;
    }
  };
  std::optional<std::pair<WidenKey, bool>> last_widen_;

  // Execution state.
  mutable std::mutex exec_mu_;  // one operation runs at a time
  std::atomic<bool> aborted_{false};
  std::atomic<bool> p2p_batch_{false};  // a send/recv batch holds the executor (see RunBlocking)
  Status error_;                // first failure; sticky (exec_mu_)
  std::string last_algorithm_;  // (exec_mu_)
  const CallPlan* last_algorithm_plan_ = nullptr;  // the plan last_algorithm_ describes

  std::unique_ptr<OpQueue> queue_;  // last: its thread runs on everything above
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_COMM_IMPL_H_
