// NCCL for collectives on GPU buffers (the mission's fallback for device
// memory), loaded at run time (CIUIC_NCCL_LIB), so the library builds and
// loads without it. Builds with CUDA and nccl.h only; elsewhere Load says
// why not.
//
// Used when every rank's buffers are on a GPU of its own (NCCL refuses two
// ranks on one GPU) and both buffers of a call are on that GPU; anything
// else runs through host copies (device.h). Calls are waited for on the
// communicator's stream with the communicator's deadline: a dead or silent
// peer aborts the NCCL communicator and fails the call, never hangs it.
#ifndef CIUIC_COLLECTIVES_NCCL_H_
#define CIUIC_COLLECTIVES_NCCL_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "ciuic/status.h"
#include "transport/transport.h"
#include "collectives/plan.h"

namespace ciuic::collectives {

class NcclComm {
 public:
  using Clock = std::chrono::steady_clock;
  // Loads `lib` once per process; its version ("2.28.9"). Errors:
  // kUnavailable naming the library and why.
  static StatusOr<std::string> Load(const std::string& lib);

  // The NCCL communicator of `rank` of `nranks` on `device`, rank 0's
  // unique id passed through `store` under `key`. Errors: kDeadlineExceeded
  // at `deadline` (a rank never joined), NCCL's.
  static StatusOr<std::unique_ptr<NcclComm>> Create(transport::Store& store, const std::string& key, int rank,
                                                     int nranks, int device, Clock::time_point deadline);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Whether NCCL runs `d` itself (both buffers on this communicator's
  // device; a collective NCCL has or that grouped calls make).
  bool Supports(const OpDesc& d) const;
  // Runs `d` and waits for it. Errors: kDeadlineExceeded, kAborted (via
  // `aborted`), kInternal with NCCL's message; after any, the NCCL
  // communicator is aborted.
  Status Run(const OpDesc& d, int rank, int nranks, Clock::time_point deadline, const std::atomic<bool>* aborted);
  int device() const { return device_; }

  struct Impl;

 private:
  NcclComm() = default;
  std::unique_ptr<Impl> impl_;
  int device_ = -1;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_NCCL_H_
