// From an operation to the schedule this rank runs: which collective, its
// buffers and counts, and the algorithm chosen for it (forced by
// CIUIC_ALGO or picked by the cost model).
#ifndef CIUIC_COLLECTIVES_PLAN_H_
#define CIUIC_COLLECTIVES_PLAN_H_

#include <map>
#include <string>
#include <vector>

#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "transport/transport.h"
#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "collectives/schedule.h"
#include "collectives/tuning.h"

namespace ciuic::collectives {

// One operation as submitted (pointers are the caller's).
struct OpDesc {
  Collective coll = Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;             // elements: per rank for all-gather/reduce-scatter/all-to-all
  std::vector<size_t> counts;   // the v-collectives, one per rank
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                 // broadcast/reduce root; send/recv peer
  // The device ordinal holding send / recv (GPU memory), -1 for host memory
  // (collectives/device.h).
  int send_device = -1;
  int recv_device = -1;
  bool on_device() const { return send_device >= 0 || recv_device >= 0; }
};

// The generators' arguments for `op` on `rank` of `nranks`.
CollectiveArgs ArgsFor(const OpDesc& op, int rank, int nranks, int nchannels);

struct Plan {
  Schedule schedule;
  BufferLayout layout;      // element counts of input/output and how they may alias
  bool stage_input = false; // the caller's buffers overlap in a way the schedule
                            // does not support: copy the input aside first
  std::string why;          // which algorithm and why (debug log)
};

// The schedule of `rank` of `nranks` for `op`. `algo` is "auto" or a name
// (one that does not implement this collective falls back to auto for it,
// so CIUIC_ALGO=ring still lets a barrier run).
// Errors: kInvalidArgument (an unknown algorithm, root out of range, an
// algorithm that does not implement this collective).
// Under "auto" the cost model (`params`) picks the algorithm; its choices
// are remembered in `cache` (keyed by collective and power-of-two size
// class), so the model runs once per size class, not per call.
// With a `tuning` (CIUIC_TUNING_FILE), "auto" first looks for a rule of the
// file for (op.coll, `backend`, nranks) covering the call's exact size in
// bytes (every rank has the same, so every rank picks the same): a rule
// wins over the model, and Plan::why says
// "tuned: <the rule> (<file>:<line>)" with the model's prediction for it. A
// rule naming `direct` (the communicator's own shared-memory all-reduce,
// not a schedule; the communicator handles it before calling MakePlan)
// leaves the choice to the model. The file's gamma for op's dtype and op,
// where it has one, replaces params' gamma for the model.
using SelectionCache = std::map<std::pair<int, int>, Selection>;
StatusOr<Plan> MakePlan(const OpDesc& op, int rank, int nranks, int nchannels,
                        const std::string& algo, const CostParams& params, SelectionCache* cache,
                        const Tuning* tuning = nullptr,
                        transport::BackendKind backend = transport::BackendKind::kShm);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_PLAN_H_
