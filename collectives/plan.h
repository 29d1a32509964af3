// From an operation to how this rank runs it: which collective, its
// buffers and counts, the algorithm Select chose for it and, for a
// schedule, the schedule itself.
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
#include "collectives/registry.h"
#include "collectives/schedule.h"
#include "collectives/selection.h"
#include "collectives/tuning.h"

namespace ciuic::collectives {

// One operation as submitted (pointers are the caller's).
struct OpDesc {
  Collective coll = Collective::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;             // elements: per rank for all-gather/reduce-scatter/all-to-all
  std::vector<size_t> counts;   // the v-collectives, one per rank (all-to-all-v: 4 per rank, CollectiveArgs)
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                 // broadcast/reduce/gather/scatter root; send/recv peer
  int tag = 0;                  // send/recv
  // The device ordinal holding send / recv (GPU memory), -1 for host memory
  // (collectives/device.h).
  int send_device = -1;
  int recv_device = -1;
  double factor = 1.0;  // kPremulSum: each input times this before the sum
  bool on_device() const { return send_device >= 0 || recv_device >= 0; }
};

// The generators' arguments for `op` on `rank` of `nranks`.
CollectiveArgs ArgsFor(const OpDesc& op, int rank, int nranks, int nchannels);

// The selection's view of `op` on `nranks` ranks over `backend`.
CallShape ShapeOf(const OpDesc& op, int nranks, transport::BackendKind backend);

// How one call runs: the algorithm Select chose and, for a schedule, this
// rank's schedule with its buffer layout.
struct CallPlan {
  Selection selection;
  const AlgorithmInfo* algorithm = nullptr;  // selection.algorithm
  Schedule schedule;        // kSchedule only
  BufferLayout layout;      // element counts of input/output and how they may alias
  bool stage_input = false; // the caller's buffers overlap in a way the schedule
                            // does not support: copy the input aside first
  // For logs and last_algorithm(): the algorithm's name first, e.g.
  // "ring (ring for allreduce 4096 B on 4 ranks: predicted 12 us, ...)" or
  // "direct (one-shot) for allreduce 8 B on 2 ranks: forced by CIUIC_ALGO".
  std::string why;
};

// Selects the algorithm for `op` on `rank` of `nranks` (selection.h) and
// builds its schedule. In place: a schedule runs directly when the
// caller's overlap is the one it supports (LayoutFor, the NCCL
// conventions); any other overlap copies the input aside first, so results
// are never silently wrong. Errors: those of Select and MakeSchedule.
StatusOr<CallPlan> PlanCall(const OpDesc& op, int rank, int nranks, const SelectionContext& ctx,
                            SelectionCache* cache);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_PLAN_H_
