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
#include "transport/backend_kind.h"

namespace ciuic::collectives {

// The ranks of one host and their CPUs, in rank order:
// "<rank>:<cpus>;<rank>:<cpus>;..." (cpus as "0-3,8"; empty: unknown).
struct LocalRanks {
  std::vector<int> ranks;
  std::vector<std::vector<int>> cpus;

  std::string Encode() const;
  // Errors: kDataLoss naming what is malformed.
  static StatusOr<LocalRanks> Decode(const std::string& text);
  // The position of `rank` (its local rank), -1 when it is not here.
  int LocalRankOf(int rank) const;
};

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
