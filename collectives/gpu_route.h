// Private: where a call on GPU buffers runs. At the first collective on
// device memory the ranks compare notes (does NCCL load, which host and GPU
// each rank is on): NCCL when every rank has a GPU of its own, else host
// copies of the buffers around the host collectives (device.h); CIUIC_GPU
// can demand either (nccl, host) or turn the lookup off.
//
// Thread contract: one thread at a time (the communicator's exec lock),
// except Classify, which any thread may call.
#ifndef CIUIC_COLLECTIVES_GPU_ROUTE_H_
#define CIUIC_COLLECTIVES_GPU_ROUTE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/store.h"
#include "collectives/device.h"
#include "collectives/nccl.h"
#include "collectives/plan.h"

namespace ciuic::collectives {

class GpuRoute {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs a collective on host buffers (the communicator's host path).
  using HostCollective = std::function<Status(const OpDesc& host, Clock::time_point deadline)>;

  // The route of `rank` of `size`, deciding through `store` under `prefix`;
  // null when buffers are not looked at (CIUIC_GPU=off, or no CUDA driver
  // and nothing demanded). Errors: kFailedPrecondition when CIUIC_GPU=nccl
  // cannot be met (no driver, NCCL does not load), naming why.
  static StatusOr<std::unique_ptr<GpuRoute>> Open(const Config& config, int rank, int size, transport::Store& store,
                                                  const std::string& prefix);

  // Marks where the buffers of `d` live.
  void Classify(OpDesc* d, int rank) const;
  // A collective with a device buffer: NCCL, or host mirrors around `host`.
  // `*ran` says what ran when it was NCCL (left alone otherwise). Errors:
  // the route decision's (a rank that never reached this call is named),
  // NCCL's, the copies', `host`'s.
  Status Execute(const OpDesc& d, Clock::time_point deadline, const std::atomic<bool>* aborted,
                 const HostCollective& host, std::string* ran);
  // Send/recv on device buffers: the k-th operation of a batch on mirror
  // pair k, copied in here and back after the batch.
  StatusOr<Staged> StageIn(size_t index, const OpDesc& d) { return ::ciuic::collectives::StageIn(*mem_, mirrors_, index, d, rank_, size_); }
  Status CopyBack(const Staged& s) { return ::ciuic::collectives::CopyBack(*mem_, s); }
  DeviceMemory* memory() const { return mem_.get(); }

 private:
  GpuRoute(const Config& config, int rank, int size, transport::Store& store, std::string prefix,
           std::shared_ptr<DeviceMemory> mem);
  Status Decide(const OpDesc& d, Clock::time_point deadline);
  // A large all-reduce on one device's buffers through host copies, in
  // chunks whose copies overlap the host all-reduce (device.h).
  Status AllReduceStagedPipelined(const OpDesc& d, Clock::time_point deadline, const HostCollective& host);

  const Config config_;
  const int rank_, size_;
  transport::Store& store_;
  const std::string prefix_;
  std::shared_ptr<DeviceMemory> mem_;
  MirrorCache mirrors_;
  enum class Route { kUndecided, kNccl, kHost } route_ = Route::kUndecided;
  std::unique_ptr<NcclComm> nccl_;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_GPU_ROUTE_H_
