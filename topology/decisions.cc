// Placement decisions: pure functions of a Topology.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "ciuic/topology.h"
#include "common/log.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {
namespace {

std::string NicNames(const Topology& t) {
  std::string out;
  for (const Nic& n : t.nics) {
    if (!out.empty()) out += ", ";
    out += n.name;
    if (!n.netdev.empty() && n.netdev != n.name) out += " (" + n.netdev + ")";
  }
  return out.empty() ? "none" : out;
}

bool Matches(const Nic& n, const std::string& name, bool exact) {
  auto match = [&](const std::string& have) {
    if (have.empty()) return false;
    return exact ? have == name : have.compare(0, name.size(), name) == 0;
  };
  return match(n.name) || match(n.verbs_name) || match(n.netdev);
}

Status CheckCandidates(const Topology& t, const std::vector<int>& candidates) {
  if (candidates.empty()) return NotFoundError("no candidate NIC (NICs here: " + NicNames(t) + ")");
  for (int c : candidates) {
    if (c < 0 || c >= static_cast<int>(t.nics.size())) {
      return InvalidArgumentError("candidate NIC index " + std::to_string(c) + " out of range");
    }
  }
  return Status::Ok();
}

// The candidates with the smallest key, in candidate order.
template <typename Key>
std::vector<int> Smallest(const std::vector<int>& candidates, Key key) {
  std::vector<int> out;
  decltype(key(0)) best{};
  for (int c : candidates) {
    const auto k = key(c);
    if (out.empty() || k < best) {
      out.assign(1, c);
      best = k;
    } else if (!(best < k)) {
      out.push_back(c);
    }
  }
  return out;
}

constexpr int kUnknownDistance = INT_MAX / 2;

}  // namespace

StatusOr<std::vector<int>> SelectNics(const Topology& t, const std::string& spec) {
  std::vector<int> defaults;
  for (size_t i = 0; i < t.nics.size(); ++i) {
    if (t.nics[i].rdma()) defaults.push_back(static_cast<int>(i));
  }
  if (defaults.empty()) {
    for (size_t i = 0; i < t.nics.size(); ++i) defaults.push_back(static_cast<int>(i));
  }
  if (spec.empty()) return defaults;

  size_t pos = 0;
  const bool exclude = spec[pos] == '^';
  if (exclude) ++pos;
  const bool exact = pos < spec.size() && spec[pos] == '=';
  if (exact) ++pos;
  std::vector<bool> hit(t.nics.size(), false);
  const std::string list = spec.substr(pos);
  if (list.empty()) return InvalidArgumentError("CIUIC_IB_HCA='" + spec + "': empty device list");
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    start = end + 1;
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (name.empty()) return InvalidArgumentError("CIUIC_IB_HCA='" + spec + "': empty device name");
    int port = 0;
    if (colon != std::string::npos) {
      const std::string p = item.substr(colon + 1);
      char* e = nullptr;
      const long v = std::strtol(p.c_str(), &e, 10);
      if (p.empty() || *e != '\0' || v < 1 || v > 255) {
        return InvalidArgumentError("CIUIC_IB_HCA='" + spec + "': bad port in '" + item + "'");
      }
      port = static_cast<int>(v);
    }
    bool any = false;
    for (size_t i = 0; i < t.nics.size(); ++i) {
      if (!Matches(t.nics[i], name, exact)) continue;
      if (port > 0 && t.nics[i].ports > 0 && port > t.nics[i].ports) {
        return NotFoundError("CIUIC_IB_HCA: " + t.nics[i].name + " has no port " + std::to_string(port) +
                             " (it has " + std::to_string(t.nics[i].ports) + ")");
      }
      hit[i] = true;
      any = true;
    }
    if (!any) {
      return NotFoundError("CIUIC_IB_HCA: no NIC named '" + name + "'" + (exact ? "" : " (prefix)") +
                           " in " + t.source + " (NICs here: " + NicNames(t) + ")");
    }
  }
  std::vector<int> out;
  if (exclude) {
    for (int i : defaults) {
      if (!hit[i]) out.push_back(i);
    }
  } else {
    for (size_t i = 0; i < t.nics.size(); ++i) {
      if (hit[i]) out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

StatusOr<std::vector<int>> NearestNicsToGpu(const Topology& t, int gpu, const std::vector<int>& candidates) {
  if (gpu < 0 || gpu >= static_cast<int>(t.gpus.size())) {
    return InvalidArgumentError("no GPU " + std::to_string(gpu) + " (" + std::to_string(t.gpus.size()) +
                                " GPUs in " + t.source + ")");
  }
  CIUIC_RETURN_IF_ERROR(CheckCandidates(t, candidates));
  return Smallest(candidates, [&](int nic) {
    StatusOr<Path> p = t.PathBetween({Endpoint::kGpu, gpu}, {Endpoint::kNic, nic});
    if (!p.ok()) return std::make_tuple(static_cast<int>(Link::kUnknown), INT_MAX, INT_MAX);
    return std::make_tuple(static_cast<int>(p->link), p->link == Link::kUnknown ? 0 : p->hops,
                           p->numa_distance > 0 ? p->numa_distance : kUnknownDistance);
  });
}

StatusOr<std::vector<int>> NearestNicsToNuma(const Topology& t, int numa, const std::vector<int>& candidates) {
  if (numa < 0 || numa >= static_cast<int>(t.numa_nodes.size())) {
    return InvalidArgumentError("no NUMA node " + std::to_string(numa) + " (" +
                                std::to_string(t.numa_nodes.size()) + " in " + t.source + ")");
  }
  CIUIC_RETURN_IF_ERROR(CheckCandidates(t, candidates));
  return Smallest(candidates, [&](int nic) {
    const int d = t.NumaDistance(numa, t.nics[nic].numa_node);
    return d > 0 ? d : kUnknownDistance;
  });
}

StatusOr<std::vector<int>> NearestNicsToCpu(const Topology& t, int cpu, const std::vector<int>& candidates) {
  if (t.CoreOfCpu(cpu) < 0) {
    return InvalidArgumentError("no CPU " + std::to_string(cpu) + " in " + t.source + " (CPUs " +
                                FormatCpuList(t.Cpus()) + ")");
  }
  const int numa = t.NumaOfCpu(cpu);
  if (numa < 0) {
    CIUIC_RETURN_IF_ERROR(CheckCandidates(t, candidates));
    return candidates;  // locality unknown: all tie
  }
  return NearestNicsToNuma(t, numa, candidates);
}

StatusOr<int> PoolNumaNode(const Topology& t, int nic) {
  if (nic < 0 || nic >= static_cast<int>(t.nics.size())) {
    return InvalidArgumentError("no NIC " + std::to_string(nic) + " in " + t.source);
  }
  const int home = t.nics[nic].numa_node;
  if (home < 0) return t.numa_nodes.size() == 1 ? 0 : -1;
  bool any_memory = false;
  for (const NumaNode& n : t.numa_nodes) any_memory |= n.memory_bytes > 0;
  if (!any_memory || t.numa_nodes[home].memory_bytes > 0) return home;
  // A memory-less node (CPU-less accelerators, odd BIOS settings): the
  // nearest node that has memory.
  int best = -1;
  for (size_t i = 0; i < t.numa_nodes.size(); ++i) {
    if (t.numa_nodes[i].memory_bytes == 0) continue;
    if (best < 0 || t.NumaDistance(home, static_cast<int>(i)) < t.NumaDistance(home, best)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

namespace {

StatusOr<ProgressChoice> ProgressCpuNear(const Topology& t, int home, const std::vector<int>& rank_cpus) {
  if (t.cores.empty()) return InvalidArgumentError("topology has no CPU");
  std::map<int, int> use;  // cpu -> ranks on it
  for (int c : rank_cpus) ++use[c];
  struct Option {
    int distance, partly_used, core, cpu;
  };
  std::vector<Option> free_cpus, all_cpus;
  for (size_t ci = 0; ci < t.cores.size(); ++ci) {
    const Core& core = t.cores[ci];
    int d = 0;
    if (home >= 0 && core.numa_node >= 0) d = t.NumaDistance(home, core.numa_node);
    if (home >= 0 && core.numa_node < 0) d = kUnknownDistance;
    bool core_used = false;
    for (int c : core.cpus) core_used |= use.count(c) > 0;
    for (int c : core.cpus) {
      const Option o{d, core_used ? 1 : 0, static_cast<int>(ci), c};
      all_cpus.push_back(o);
      if (use.count(c) == 0) free_cpus.push_back(o);
    }
  }
  ProgressChoice out;
  if (!free_cpus.empty()) {
    // Nearest node; a whole free core before a free hyperthread; the
    // highest core (ranks fill from the lowest); its first PU.
    const Option best = *std::min_element(free_cpus.begin(), free_cpus.end(), [](const Option& a, const Option& b) {
      return std::make_tuple(a.distance, a.partly_used, -a.core, a.cpu) <
             std::make_tuple(b.distance, b.partly_used, -b.core, b.cpu);
    });
    out.cpu = best.cpu;
    return out;
  }
  const Option best = *std::min_element(all_cpus.begin(), all_cpus.end(), [&](const Option& a, const Option& b) {
    return std::make_tuple(a.distance, use[a.cpu], -a.core, a.cpu) <
           std::make_tuple(b.distance, use[b.cpu], -b.core, b.cpu);
  });
  out.cpu = best.cpu;
  out.shared = true;
  return out;
}

}  // namespace

StatusOr<ProgressChoice> ProgressCpu(const Topology& t, int nic, const std::vector<int>& rank_cpus) {
  if (nic >= static_cast<int>(t.nics.size()) || nic < -1) {
    return InvalidArgumentError("no NIC " + std::to_string(nic) + " in " + t.source);
  }
  return ProgressCpuNear(t, nic >= 0 ? t.nics[nic].numa_node : -1, rank_cpus);
}

StatusOr<std::vector<RankPlacement>> PlaceRanks(const Topology& t, int nranks, const std::vector<int>& allowed,
                                                bool use_gpus) {
  if (nranks < 1) return InvalidArgumentError("nranks must be at least 1, not " + std::to_string(nranks));
  if (t.cores.empty()) return InvalidArgumentError("topology " + t.source + " has no CPU");
  for (int a : allowed) {
    if (a < 0 || a >= static_cast<int>(t.nics.size())) {
      return InvalidArgumentError("allowed NIC index " + std::to_string(a) + " out of range");
    }
  }
  std::vector<RankPlacement> out(nranks);
  const bool gpu_mode = use_gpus && !t.gpus.empty() && nranks <= static_cast<int>(t.gpus.size());

  // Cores per NUMA node (index -1 collects cores of unknown locality).
  std::map<int, std::vector<int>> node_cores;
  for (size_t i = 0; i < t.cores.size(); ++i) node_cores[t.cores[i].numa_node].push_back(static_cast<int>(i));

  // 1. The node of each rank: its GPU's, when every GPU's node is known
  // and has cores; else spread over the nodes.
  bool gpu_nodes = gpu_mode;
  for (int r = 0; r < nranks && gpu_mode; ++r) {
    out[r].gpu = r;
    out[r].numa_node = t.gpus[r].numa_node;
    gpu_nodes &= out[r].numa_node >= 0 && node_cores.count(out[r].numa_node) > 0;
  }
  if (!gpu_nodes) {
    const size_t total = t.cores.size();  // each core is in one node; not 0 (checked above)
    size_t before = 0;
    for (const auto& [node, cores] : node_cores) {
      // Rounded up, so that the first nodes fill first (1 rank: node 0).
      const size_t lo = (before * nranks + total - 1) / total;
      before += cores.size();
      const size_t hi = (before * nranks + total - 1) / total;
      for (size_t r = lo; r < hi; ++r) out[r].numa_node = node;
    }
  }
  for (int r = 0; r < nranks; ++r) out[r].rank = r;

  // 2. NICs: nearest allowed ones, rotated among the ranks that share them.
  std::map<std::vector<int>, int> sharing;
  for (int r = 0; r < nranks && !allowed.empty(); ++r) {
    StatusOr<std::vector<int>> nics = gpu_mode ? NearestNicsToGpu(t, r, allowed)
                                      : out[r].numa_node >= 0 ? NearestNicsToNuma(t, out[r].numa_node, allowed)
                                                              : StatusOr<std::vector<int>>(allowed);
    if (!nics.ok()) return nics.status();
    std::vector<int> v = *nics;
    const int k = sharing[v]++;
    std::rotate(v.begin(), v.begin() + (k % static_cast<int>(v.size())), v.end());
    out[r].nics = std::move(v);
  }

  // 3. Cores: each node's cores split into equal blocks among its ranks.
  // On a node that hosts an allowed NIC, the highest cores stay free for
  // the progress threads: one per rank when there are at least twice as
  // many cores as ranks, else one when there are more cores than ranks.
  std::map<int, std::vector<int>> node_ranks;
  for (int r = 0; r < nranks; ++r) node_ranks[out[r].numa_node].push_back(r);
  for (const auto& [node, ranks] : node_ranks) {
    std::vector<int> cores = node_cores[node];
    const size_t m = ranks.size();
    bool nic_here = false;
    for (int a : allowed) nic_here |= node >= 0 && t.nics[a].numa_node == node;
    if (nic_here) {
      const size_t reserve = cores.size() >= 2 * m ? m : cores.size() > m ? 1 : 0;
      cores.resize(cores.size() - reserve);
    }
    const size_t c = cores.size();
    for (size_t i = 0; i < m; ++i) {
      RankPlacement& p = out[ranks[i]];
      if (m <= c) {
        for (size_t j = i * (c / m); j < (i + 1) * (c / m); ++j) {
          const auto& pus = t.cores[cores[j]].cpus;
          p.cpus.insert(p.cpus.end(), pus.begin(), pus.end());
        }
      } else {
        const auto& pus = t.cores[cores[i % c]].cpus;
        p.cpus.assign(pus.begin(), pus.end());
        p.oversubscribed = true;
      }
      std::sort(p.cpus.begin(), p.cpus.end());
    }
  }
  return out;
}

CacheSizes KernelCacheSizes(const Topology& t) {
  CacheSizes c = t.caches;
  const CacheSizes d;
  if (c.l1d == 0) c.l1d = d.l1d;
  if (c.l2 == 0) c.l2 = d.l2;
  if (c.llc == 0) c.llc = std::max(c.l2, d.llc);
  return c;
}

namespace {

// The NUMA node (index) holding most of `cpus` (ties: the lowest), or -1.
int MajorityNode(const Topology& t, const std::vector<int>& cpus) {
  std::map<int, int> count;
  for (int c : cpus) {
    const int n = t.NumaOfCpu(c);
    if (n >= 0) ++count[n];
  }
  int best = -1, most = 0;
  for (const auto& [n, k] : count) {
    if (k > most) best = n, most = k;
  }
  return best;
}

// Local rank j's CPUs within the topology (all of them when unknown).
std::vector<int> RankCpus(const Topology& t, const LocalJob& job, int j) {
  std::vector<int> all = t.Cpus();
  std::vector<int> out;
  if (j < static_cast<int>(job.cpus.size())) {
    for (int c : job.cpus[j]) {
      if (std::binary_search(all.begin(), all.end(), c)) out.push_back(c);
    }
  }
  if (out.empty()) return all;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The NICs a transport may use under `config`: verbs the RDMA NICs
// CIUIC_IB_HCA allows, tcp the netdevs (none when CIUIC_SOCKET_IFNAME
// decides), shm none.
StatusOr<std::vector<int>> Candidates(const Topology& t, const Config& config, const std::string& transport) {
  std::vector<int> out;
  if (transport == "shm") return out;
  if (transport == "verbs") {
    CIUIC_ASSIGN_OR_RETURN(std::vector<int> allowed, SelectNics(t, config.ib_hca));
    for (int n : allowed) {
      if (t.nics[n].rdma()) out.push_back(n);
    }
    return out;
  }
  if (transport != "tcp") return InvalidArgumentError("unknown transport '" + transport + "' (shm, tcp or verbs)");
  if (!config.socket_ifname.empty()) return out;
  for (size_t n = 0; n < t.nics.size(); ++n) {
    if (!t.nics[n].netdev.empty()) out.push_back(static_cast<int>(n));
  }
  return out;
}

}  // namespace

StatusOr<RankPlan> PlanRank(const Topology& t, const Config& config, const LocalJob& job, int r) {
  const int n = std::max<int>(1, static_cast<int>(job.cpus.size()));
  if (r < 0 || r >= n) return InvalidArgumentError("local rank " + std::to_string(r) + " not in [0, " + std::to_string(n) + ")");
  if (t.cores.empty()) return InvalidArgumentError("topology " + t.source + " has no CPU");
  if (config.progress_cpu >= 0 && t.CoreOfCpu(config.progress_cpu) < 0) {
    return InvalidArgumentError("CIUIC_PROGRESS_CPU=" + std::to_string(config.progress_cpu) + ": no such CPU in " +
                                t.source + " (CPUs " + FormatCpuList(t.Cpus()) + ")");
  }
  CIUIC_ASSIGN_OR_RETURN(const std::vector<int> candidates, Candidates(t, config, job.transport));
  // Every local rank's CPUs: what progress threads must stay off.
  std::vector<int> used;
  for (int j = 0; j < n; ++j) {
    const std::vector<int> c = RankCpus(t, job, j);
    used.insert(used.end(), c.begin(), c.end());
  }
  // Lower local ranks decide first (their NIC rotation, their progress
  // CPUs), so every rank of the machine computes the same for each.
  std::map<std::vector<int>, int> sharing;
  RankPlan plan;
  for (int j = 0; j <= r; ++j) {
    RankPlan p;
    p.local_rank = j;
    p.local_size = n;
    p.transport = job.transport;
    p.cpus = RankCpus(t, job, j);
    p.numa_node = MajorityNode(t, p.cpus);
    // A GPU decides the rank's NIC (shm has none).
    p.gpu = j < static_cast<int>(job.gpus.size()) && job.transport != "shm" ? job.gpus[j] : -1;
    if (p.gpu >= static_cast<int>(t.gpus.size())) p.gpu = -1;
    std::string why;
    if (!candidates.empty()) {
      StatusOr<std::vector<int>> nics = p.gpu >= 0         ? NearestNicsToGpu(t, p.gpu, candidates)
                                        : p.numa_node >= 0 ? NearestNicsToNuma(t, p.numa_node, candidates)
                                                           : StatusOr<std::vector<int>>(candidates);
      if (!nics.ok()) return nics.status();
      std::vector<int> v = *nics;
      const int k = sharing[v]++;
      std::rotate(v.begin(), v.begin() + (k % static_cast<int>(v.size())), v.end());
      p.nic = v[0];
      const Nic& nic = t.nics[p.nic];
      if (job.transport == "verbs") p.device = nic.verbs_name;
      if (job.transport == "tcp") p.netdev = nic.netdev;
      why = "nic " + nic.name + (p.gpu >= 0 ? " nearest its GPU" : p.numa_node >= 0 ? " nearest its node" : "") +
            (v.size() > 1 ? " (of " + std::to_string(v.size()) + " tied, rotated)" : "");
      CIUIC_ASSIGN_OR_RETURN(const int pool, PoolNumaNode(t, p.nic));
      p.pool_numa_os = pool >= 0 ? t.numa_nodes[pool].os_index : -1;
    } else {
      why = job.transport == "shm" ? "no nic (shm)"
            : job.transport == "tcp" && !config.socket_ifname.empty() ? "nic by CIUIC_SOCKET_IFNAME"
                                                                      : "no nic allowed";
      if (job.transport != "shm" && p.numa_node >= 0) p.pool_numa_os = t.numa_nodes[p.numa_node].os_index;
    }
    if (config.progress_cpu >= 0) {
      p.progress_cpus = {config.progress_cpu};
      p.progress_shared = std::count(used.begin(), used.end(), config.progress_cpu) > 0;
      why += "; progress on CIUIC_PROGRESS_CPU";
    } else if (config.progress_cpu == Config::kProgressCpuAuto) {
      const int home = p.nic >= 0 && t.nics[p.nic].numa_node >= 0 ? t.nics[p.nic].numa_node : p.numa_node;
      CIUIC_ASSIGN_OR_RETURN(ProgressChoice pc, ProgressCpuNear(t, home, used));
      if (!pc.shared) {
        p.progress_cpus = {pc.cpu};
        used.push_back(pc.cpu);  // two progress threads share a CPU only when none is free
        why += "; progress on a free cpu";
      } else {
        p.progress_cpus = p.cpus;
        p.progress_shared = true;
        why += "; progress with its rank (no free cpu)";
      }
    } else {
      why += "; progress unpinned (CIUIC_PROGRESS_CPU=none)";
    }
    p.caches = KernelCacheSizes(t);
    p.why = why;
    if (j == r) plan = std::move(p);
  }
  return plan;
}

StatusOr<LocalJob> PlacedJob(const Topology& t, const Config& config, int nranks, bool use_gpus,
                             const std::string& transport) {
  LocalJob job;
  job.transport = transport;
  CIUIC_ASSIGN_OR_RETURN(const std::vector<int> candidates, Candidates(t, config, transport));
  CIUIC_ASSIGN_OR_RETURN(const std::vector<RankPlacement> placed, PlaceRanks(t, nranks, candidates, use_gpus));
  for (const RankPlacement& p : placed) {
    job.cpus.push_back(p.cpus);
    job.gpus.push_back(p.gpu);
  }
  return job;
}

std::string FormatRankPlan(const Topology& t, const RankPlan& p) {
  auto str = [](const std::string& s) { return "\"" + s + "\""; };
  auto ints = [](const std::vector<int>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + std::to_string(v[i]);
    return o + "]";
  };
  const std::string numa = p.numa_node >= 0 ? std::to_string(t.numa_nodes[p.numa_node].os_index) : "null";
  const std::string gpu = p.gpu >= 0 ? str(t.gpus[p.gpu].bus_id) : "null";
  const std::string nic = p.nic >= 0 ? str(t.nics[p.nic].name) : "null";
  return "{\"local_rank\": " + std::to_string(p.local_rank) + ", \"local_size\": " + std::to_string(p.local_size) +
         ", \"transport\": " + str(p.transport) + ", \"cpus\": " + ints(p.cpus) + ", \"numa\": " + numa +
         ", \"gpu\": " + gpu + ", \"nic\": " + nic + ", \"device\": " + str(p.device) + ", \"netdev\": " +
         str(p.netdev) + ", \"pool_numa\": " + (p.pool_numa_os >= 0 ? std::to_string(p.pool_numa_os) : "null") +
         ", \"progress_cpus\": " + ints(p.progress_cpus) + ", \"progress_shared\": " +
         (p.progress_shared ? "true" : "false") + ", \"caches\": [" + std::to_string(p.caches.l1d) + "," +
         std::to_string(p.caches.l2) + "," + std::to_string(p.caches.llc) + "], \"why\": " + str(p.why) + "}";
}

StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  std::vector<int> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    at = comma + 1;
    const size_t dash = item.find('-');
    // Each number must end where its field does (the dash, the item's end):
    // not at a stray byte, nor at a NUL inside the text.
    const char* const begin = item.c_str();
    char* end = nullptr;
    const long lo = std::strtol(begin, &end, 10);
    const bool lo_ok = !item.empty() && end != begin &&
                       end == (dash == std::string::npos ? begin + item.size() : begin + dash);
    long hi = lo;
    bool hi_ok = true;
    if (dash != std::string::npos) {
      const std::string h = item.substr(dash + 1);
      hi = std::strtol(h.c_str(), &end, 10);
      hi_ok = !h.empty() && end == h.c_str() + h.size();
    }
    if (!lo_ok || !hi_ok || lo < 0 || hi < lo || hi > 1 << 20) {
      return InvalidArgumentError("CPU list '" + LogSafe(text) + "': bad item '" + LogSafe(item) + "'");
    }
    // Each item is bounded; so is the list, or "0-1048576," repeated would
    // make gigabytes from a short text.
    if (out.size() + static_cast<size_t>(hi - lo + 1) > (size_t{1} << 20) + 1) {
      return InvalidArgumentError("CPU list '" + LogSafe(text) + "': more than 2^20 CPUs");
    }
    for (long c = lo; c <= hi; ++c) out.push_back(static_cast<int>(c));
  }
  return out;
}

// The whole machine's plan: the job ciuic-topo assumes (GPU ranks when
// there are GPUs), each rank's PlanRank.
StatusOr<Plan> MakePlan(const Topology& t, const Config& config, int nranks) {
  Plan plan;
  StatusOr<NumaPolicy> policy = ParseNumaPolicy(config.numa_policy);
  if (!policy.ok()) return policy.status().WithContext("CIUIC_NUMA_POLICY");
  plan.numa_policy = *policy;
  CIUIC_ASSIGN_OR_RETURN(plan.allowed_nics, SelectNics(t, config.ib_hca));
  CIUIC_ASSIGN_OR_RETURN(plan.ranks, PlaceRanks(t, nranks, plan.allowed_nics));
  plan.caches = KernelCacheSizes(t);
  bool rdma = false;
  for (int a : plan.allowed_nics) rdma |= t.nics[a].rdma();
  LocalJob job;
  job.transport = rdma ? "verbs" : "tcp";
  for (const RankPlacement& p : plan.ranks) {
    job.cpus.push_back(p.cpus);
    job.gpus.push_back(p.gpu);
  }
  std::set<int> nics;
  for (int r = 0; r < nranks; ++r) {
    CIUIC_ASSIGN_OR_RETURN(RankPlan rp, PlanRank(t, config, job, r));
    ProgressChoice pc;
    pc.shared = rp.progress_shared;
    pc.cpu = rp.progress_cpus.size() == 1 ? rp.progress_cpus[0] : -1;
    plan.progress.push_back(pc);
    nics.insert(plan.ranks[r].nics.begin(), plan.ranks[r].nics.end());
  }
  for (int n : nics) {
    NicChoice c;
    c.nic = n;
    CIUIC_ASSIGN_OR_RETURN(c.pool_numa_node, PoolNumaNode(t, n));
    plan.nics.push_back(c);
  }
  return plan;
}

}  // namespace topology
}  // namespace ciuic
