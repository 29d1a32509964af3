// Private: the topology plan a communicator applies (topology::RankPlan):
// the rank's NIC, the pools' NUMA node, the progress thread's CPU and the
// kernels' cache sizes, from the machine's topology (CIUIC_TOPO_FILE or
// discovery, once per process) and the CPUs of the ranks that share this
// host (rank 0 publishes them, bootstrap.h).
//
// Thread contract: pure functions, except that the topology is discovered
// once per process (thread-safe).
#ifndef CIUIC_COLLECTIVES_TOPOLOGY_PLAN_H_
#define CIUIC_COLLECTIVES_TOPOLOGY_PLAN_H_

#include <optional>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/topology.h"
#include "collectives/bootstrap_wire.h"
#include "transport/backend_kind.h"

namespace ciuic::collectives {

// This machine's topology (topology::DiscoverForPlans), once per process:
// CIUIC_TOPO_FILE when set (an error names it), else /sys (null when that
// fails: the communicator then decides as without a plan).
StatusOr<const topology::Topology*> MachineTopology(const Config& config);

// What rank `rank` applies, from `topo`: PlanRank for its position among
// `local`, with local rank k on GPU k when every local rank can have one
// (CIUIC_GPU not off). The dry run ciuic-topo's output is tested against.
// Errors: kInvalidArgument (rank not in `local`), PlanRank's.
StatusOr<topology::RankPlan> ComputeRankPlan(const topology::Topology& topo, const Config& config,
                                             const LocalRanks& local, int rank, transport::BackendKind kind);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_TOPOLOGY_PLAN_H_
