// The communicator's topology plan (topology_plan.h).
#include "collectives/topology_plan.h"

#include <map>
#include <memory>
#include <mutex>

#include "common/log.h"

namespace ciuic::collectives {

StatusOr<const topology::Topology*> MachineTopology(const Config& config) {
  // Once per process and file: the ranks of a job each read it.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<topology::Topology>> cache;
  std::lock_guard<std::mutex> lock(mu);
  const std::string& key = config.topo_file;
  auto it = cache.find(key);
  if (it == cache.end()) {
    StatusOr<topology::Topology> t = topology::DiscoverForPlans(config);
    if (!t.ok() && !config.topo_file.empty()) return t.status();  // names CIUIC_TOPO_FILE
    if (!t.ok()) CIUIC_LOG(kInfo, "topology: no plan (%s)", t.status().message().c_str());
    it = cache.emplace(key, t.ok() ? std::make_unique<topology::Topology>(std::move(*t)) : nullptr).first;
  }
  return it->second.get();
}

StatusOr<topology::RankPlan> ComputeRankPlan(const topology::Topology& topo, const Config& config,
                                             const LocalRanks& local, int rank, transport::BackendKind kind) {
  const int r = local.LocalRankOf(rank);
  if (r < 0) return InvalidArgumentError("rank " + std::to_string(rank) + " is not among this host's ranks");
  topology::LocalJob job;
  job.cpus = local.cpus;
  job.transport = transport::BackendName(kind);
  if (config.gpu != "off" && !topo.gpus.empty() && local.ranks.size() <= topo.gpus.size()) {
    for (size_t k = 0; k < local.ranks.size(); ++k) job.gpus.push_back(static_cast<int>(k));
  }
  return topology::PlanRank(topo, config, job, r);
}

}  // namespace ciuic::collectives
