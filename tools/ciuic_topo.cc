// ciuic-topo: what the library sees of this machine (or of a saved hwloc XML
// topology) and what it decides: a GPU/NIC matrix like `nvidia-smi topo -m`,
// the NICs, GPUs and NUMA nodes, the placement of the local ranks (NIC per
// rank, progress CPU, pool NUMA node) and the cache sizes the kernels use.
//
//   ciuic-topo [--xml FILE] [--ranks N] [--cpu-ranks] [--format table|json]
//
// Exit status: 0 ok, 1 the topology or a decision failed (the message names
// the file / knob), 2 bad usage.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/topology.h"

namespace {

using ciuic::Config;
using ciuic::Status;
using ciuic::StatusOr;
namespace topo = ciuic::topology;

std::string Bytes(uint64_t b) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t whole = b;
  while (u < 4 && whole >= 1024 && whole % 1024 == 0) {
    whole /= 1024;
    ++u;
  }
  if (u < 4 && whole >= 10240) {  // not a round number: one decimal
    double v = static_cast<double>(b);
    u = 0;
    while (u < 4 && v >= 1024) {
      v /= 1024;
      ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
    return buf;
  }
  return std::to_string(whole) + " " + kUnits[u];
}

std::string Json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonInts(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// Rows/columns of the matrix: GPUs, then NICs.
struct Item {
  std::string label;
  topo::Endpoint ep;
  int numa;
};

std::vector<Item> Items(const topo::Topology& t) {
  std::vector<Item> items;
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    items.push_back({"GPU" + std::to_string(i), {topo::Endpoint::kGpu, static_cast<int>(i)}, t.gpus[i].numa_node});
  }
  for (size_t i = 0; i < t.nics.size(); ++i) {
    items.push_back({"NIC" + std::to_string(i), {topo::Endpoint::kNic, static_cast<int>(i)}, t.nics[i].numa_node});
  }
  return items;
}

std::string NicList(const topo::Topology& t, const std::vector<int>& nics) {
  std::string out;
  for (int n : nics) out += (out.empty() ? "" : ",") + t.nics[n].name;
  return out.empty() ? "-" : out;
}

// The kernels' parameters for these cache sizes (what a communicator gets).
std::string KernelParams(const Config& config, const topo::CacheSizes& c, bool json) {
  ciuic::kernels::CacheSizes kc;
  kc.l1d = c.l1d;
  kc.l2 = c.l2;
  kc.llc = c.llc;
  StatusOr<ciuic::kernels::Reducer> r = ciuic::kernels::Reducer::Create(config, kc);
  std::ostringstream os;
  if (!r.ok()) {
    os << (json ? Json("error: " + r.status().ToString()) : "error: " + r.status().ToString());
    return os.str();
  }
  const size_t nt = r->nt_threshold_bytes();
  const std::string nt_text = nt == SIZE_MAX ? "never" : std::to_string(nt);
  if (json) {
    os << "{\"target\": " << Json(r->target_name()) << ", \"tile_bytes\": " << r->tile_bytes()
       << ", \"nt_threshold_bytes\": " << (nt == SIZE_MAX ? "null" : std::to_string(nt))
       << ", \"prefetch_bytes\": " << r->prefetch_bytes() << "}";
  } else {
    os << "target " << r->target_name() << ", tile " << Bytes(r->tile_bytes()) << ", non-temporal stores from "
       << (nt == SIZE_MAX ? "never" : Bytes(nt)) << ", prefetch " << Bytes(r->prefetch_bytes());
  }
  return os.str();
}

// One line per rank of what its communicator applies (topo::RankPlan).
void PrintRankPlans(const topo::Topology& t, const std::vector<topo::RankPlan>& ranks) {
  for (const topo::RankPlan& p : ranks) {
    const std::string nic = p.nic >= 0 ? t.nics[p.nic].name : "-";
    std::printf("  rank %d: gpu %-3s numa %-3s cpus %-14s nic %-10s pool numa %-3s progress cpu %s%s\n", p.local_rank,
                p.gpu >= 0 ? std::to_string(p.gpu).c_str() : "-",
                p.numa_node >= 0 ? std::to_string(t.numa_nodes[p.numa_node].os_index).c_str() : "?",
                topo::FormatCpuList(p.cpus).c_str(), nic.c_str(),
                p.pool_numa_os >= 0 ? std::to_string(p.pool_numa_os).c_str() : "-",
                p.progress_cpus.empty() ? "none" : topo::FormatCpuList(p.progress_cpus).c_str(),
                p.progress_shared ? " (with its rank: no free cpu)" : "");
  }
}

void PrintTable(const topo::Topology& t, const topo::Plan& plan, const topo::Topology& pt,
                const std::vector<topo::RankPlan>& ranks, const Config& config) {
  std::printf("# ciuic-topo: %s%s%s\n", t.source.c_str(), t.hostname.empty() ? "" : ", host ",
              t.hostname.c_str());
  std::printf("# %s\n", t.Summary().c_str());
  std::printf("# discovery: %s\n", topo::HaveHwloc() ? "hwloc" : "/sys (built with CIUIC_WITH_HWLOC=OFF)");

  const std::vector<Item> items = Items(t);
  if (!items.empty()) {
    std::printf("\n%-8s", "");
    for (const Item& c : items) std::printf("%-6s", c.label.c_str());
    std::printf("%-18s%s\n", "CPU Affinity", "NUMA Affinity");
    for (const Item& r : items) {
      std::printf("%-8s", r.label.c_str());
      for (const Item& c : items) {
        StatusOr<topo::Path> p = t.PathBetween(r.ep, c.ep);
        std::printf("%-6s", p.ok() ? topo::LinkName(p->link) : "err");
      }
      const std::string cpus = r.numa >= 0 ? topo::FormatCpuList(t.numa_nodes[r.numa].cpus) : "N/A";
      const std::string numa = r.numa >= 0 ? std::to_string(t.numa_nodes[r.numa].os_index) : "N/A";
      std::printf("%-18s%s\n", cpus.c_str(), numa.c_str());
    }
    std::printf(
        "\nLegend:\n"
        "  X    = Self\n"
        "  SYS  = Connection traversing the SMP interconnect between NUMA nodes\n"
        "  NODE = Connection within a NUMA node, across PCIe host bridges\n"
        "  PHB  = Connection traversing a PCIe host bridge\n"
        "  PXB  = Connection traversing multiple PCIe bridges (no host bridge)\n"
        "  PIX  = Connection traversing at most a single PCIe switch\n"
        "  ?    = Locality unknown\n");
  }

  std::printf("\nNICs:%s\n", t.nics.empty() ? " none" : "");
  for (size_t i = 0; i < t.nics.size(); ++i) {
    const topo::Nic& n = t.nics[i];
    std::printf("  NIC%zu: %-10s netdev %-12s pci %-13s numa %-3s ports %d%s\n", i, n.name.c_str(),
                n.netdev.empty() ? "-" : n.netdev.c_str(), n.bus_id.empty() ? "-" : n.bus_id.c_str(),
                n.numa_node >= 0 ? std::to_string(t.numa_nodes[n.numa_node].os_index).c_str() : "?", n.ports,
                n.rdma() ? "  rdma" : "  (no verbs: tcp only)");
  }
  std::printf("GPUs:%s\n", t.gpus.empty() ? " none" : "");
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    const topo::Gpu& g = t.gpus[i];
    std::printf("  GPU%zu: %-8s pci %-13s numa %s  [%04x:%04x]\n", i, g.name.empty() ? "-" : g.name.c_str(),
                g.bus_id.c_str(), g.numa_node >= 0 ? std::to_string(t.numa_nodes[g.numa_node].os_index).c_str() : "?",
                g.vendor_id, g.device_id);
  }
  std::printf("NUMA nodes:\n");
  for (size_t i = 0; i < t.numa_nodes.size(); ++i) {
    const topo::NumaNode& n = t.numa_nodes[i];
    std::string dist;
    for (size_t j = 0; j < t.numa_nodes.size(); ++j) {
      dist += (j ? " " : "") + std::to_string(t.NumaDistance(static_cast<int>(i), static_cast<int>(j)));
    }
    std::printf("  node%d: cpus %-14s memory %-10s 2M huge pages %llu, distances %s\n", n.os_index,
                n.cpus.empty() ? "-" : topo::FormatCpuList(n.cpus).c_str(),
                n.memory_bytes ? Bytes(n.memory_bytes).c_str() : "?",
                static_cast<unsigned long long>(n.huge_pages_2m), dist.c_str());
  }
  std::printf("Caches:");
  for (const topo::CacheLevel& l : t.cache_levels) {
    std::printf(" L%d%s %s x%d (%d CPU%s each);", l.level, l.type == 'd' ? "d" : l.type == 'i' ? "i" : "",
                Bytes(l.size).c_str(), l.instances, l.cpus_per_instance, l.cpus_per_instance == 1 ? "" : "s");
  }
  std::printf("%s\n", t.cache_levels.empty() ? " unknown" : "");

  std::printf("\nDecisions for %zu local rank%s (CIUIC_IB_HCA=%s, CIUIC_NUMA_POLICY=%s):\n", plan.ranks.size(),
              plan.ranks.size() == 1 ? "" : "s", config.ib_hca.empty() ? "<all>" : config.ib_hca.c_str(),
              topo::NumaPolicyName(plan.numa_policy));
  std::printf("  allowed NICs: %s; transport %s\n", NicList(t, plan.allowed_nics).c_str(),
              ranks.empty() ? "?" : ranks[0].transport.c_str());
  if (pt.source != t.source) std::printf("  (the ranks' plans from %s, as a communicator reads it)\n", pt.source.c_str());
  PrintRankPlans(pt, ranks);
  const topo::CacheSizes& c = plan.caches;
  std::printf("\nKernel cache sizes: l1d %s, l2 %s, llc %s (L%d, shared by %d CPUs)%s\n", Bytes(c.l1d).c_str(),
              Bytes(c.l2).c_str(), Bytes(c.llc).c_str(), c.llc_level, c.llc_cpus,
              c.measured ? "" : " [defaults: nothing discovered]");
  if (c.measured && c.llc_cpus > 0 && t.Cpus().size() <= static_cast<size_t>(c.llc_cpus) &&
      c.llc / static_cast<size_t>(c.llc_cpus) >= (8u << 20)) {
    std::printf("  note: %s of LLC per CPU is more than hardware has; in a VM this is often the host's L3\n",
                Bytes(c.llc / static_cast<size_t>(c.llc_cpus)).c_str());
  }
  std::printf("Kernels with these sizes: %s\n", KernelParams(config, c, false).c_str());
}

void PrintJson(const topo::Topology& t, const topo::Plan& plan, const topo::Topology& pt,
               const std::vector<topo::RankPlan>& ranks, const Config& config) {
  std::ostringstream o;
  o << "{\n  \"source\": " << Json(t.source) << ",\n  \"hostname\": " << Json(t.hostname)
    << ",\n  \"hwloc\": " << (topo::HaveHwloc() ? "true" : "false") << ",\n  \"packages\": " << t.packages.size()
    << ",\n  \"cores\": " << t.cores.size() << ",\n  \"cpus\": " << JsonInts(t.Cpus()) << ",\n  \"numa_nodes\": [";
  for (size_t i = 0; i < t.numa_nodes.size(); ++i) {
    const topo::NumaNode& n = t.numa_nodes[i];
    std::vector<int> d;
    for (size_t j = 0; j < t.numa_nodes.size(); ++j) {
      d.push_back(t.NumaDistance(static_cast<int>(i), static_cast<int>(j)));
    }
    o << (i ? "," : "") << "\n    {\"os_index\": " << n.os_index << ", \"cpus\": " << JsonInts(n.cpus)
      << ", \"memory_bytes\": " << n.memory_bytes << ", \"huge_pages_2m\": " << n.huge_pages_2m
      << ", \"distances\": " << JsonInts(d) << "}";
  }
  auto os_numa = [&t](int idx) { return idx >= 0 ? std::to_string(t.numa_nodes[idx].os_index) : "null"; };
  o << "\n  ],\n  \"nics\": [";
  for (size_t i = 0; i < t.nics.size(); ++i) {
    const topo::Nic& n = t.nics[i];
    o << (i ? "," : "") << "\n    {\"name\": " << Json(n.name) << ", \"verbs\": " << Json(n.verbs_name)
      << ", \"netdev\": " << Json(n.netdev) << ", \"pci\": " << Json(n.bus_id) << ", \"numa\": " << os_numa(n.numa_node)
      << ", \"ports\": " << n.ports << "}";
  }
  o << "\n  ],\n  \"gpus\": [";
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    const topo::Gpu& g = t.gpus[i];
    o << (i ? "," : "") << "\n    {\"name\": " << Json(g.name) << ", \"pci\": " << Json(g.bus_id)
      << ", \"numa\": " << os_numa(g.numa_node) << "}";
  }
  o << "\n  ],\n  \"matrix\": {";
  const std::vector<Item> items = Items(t);
  for (size_t i = 0; i < items.size(); ++i) {
    o << (i ? "," : "") << "\n    " << Json(items[i].label) << ": {";
    for (size_t j = 0; j < items.size(); ++j) {
      StatusOr<topo::Path> p = t.PathBetween(items[i].ep, items[j].ep);
      o << (j ? ", " : "") << Json(items[j].label) << ": " << Json(p.ok() ? topo::LinkName(p->link) : "err");
    }
    o << "}";
  }
  o << "\n  },\n  \"caches\": {\"l1d\": " << plan.caches.l1d << ", \"l2\": " << plan.caches.l2
    << ", \"llc\": " << plan.caches.llc << ", \"llc_level\": " << plan.caches.llc_level
    << ", \"llc_cpus\": " << plan.caches.llc_cpus << ", \"measured\": " << (plan.caches.measured ? "true" : "false")
    << "},\n  \"kernels\": " << KernelParams(config, plan.caches, true) << ",\n  \"numa_policy\": "
    << Json(topo::NumaPolicyName(plan.numa_policy)) << ",\n  \"allowed_nics\": [";
  for (size_t i = 0; i < plan.allowed_nics.size(); ++i) {
    o << (i ? ", " : "") << Json(t.nics[plan.allowed_nics[i]].name);
  }
  o << "],\n  \"ranks\": [";
  for (size_t r = 0; r < ranks.size(); ++r) o << (r ? "," : "") << "\n    " << topo::FormatRankPlan(pt, ranks[r]);
  o << "\n  ],\n  \"pools\": [";
  for (size_t i = 0; i < plan.nics.size(); ++i) {
    o << (i ? ", " : "") << "{\"nic\": " << Json(t.nics[plan.nics[i].nic].name)
      << ", \"numa\": " << os_numa(plan.nics[i].pool_numa_node) << "}";
  }
  o << "]\n}\n";
  std::fputs(o.str().c_str(), stdout);
}

int Usage(const char* msg) {
  if (msg != nullptr) std::fprintf(stderr, "ciuic-topo: %s\n", msg);
  std::fprintf(stderr,
               "usage: ciuic-topo [--xml FILE] [--ranks N] [--cpu-ranks] [--transport shm|tcp|verbs]\n"
               "                  [--cpus LIST;LIST;...] [--format table|json]\n"
               "  --xml FILE     read a saved hwloc XML topology (lstopo --of xml) instead of\n"
               "                 this machine (same as CIUIC_TOPO_FILE=FILE)\n"
               "  --ranks N      local ranks to place (default: the GPUs, else the NUMA nodes)\n"
               "  --cpu-ranks    place ranks on CPUs only, ignoring GPUs\n"
               "  --transport T  the communicator's transport (default: verbs when an RDMA NIC\n"
               "                 is allowed, else tcp)\n"
               "  --cpus L;L;..  the ranks' CPUs as a launcher bound them (\"0-3;4-7\"), instead\n"
               "                 of the placement ciuic-topo proposes; sets --ranks\n"
               "  --format F     table (default) or json\n"
               "Knobs read from the environment: CIUIC_TOPO_FILE, CIUIC_IB_HCA,\n"
               "CIUIC_PROGRESS_CPU, CIUIC_NUMA_POLICY, CIUIC_SOCKET_IFNAME. Each rank's line is the\n"
               "plan its communicator applies (NIC, pool node, progress CPU, caches).\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string xml, format = "table";
  int nranks = 0;
  bool cpu_ranks = false;
  std::string transport, cpus_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--xml" || a == "-i") {
      const char* v = value();
      if (v == nullptr) return Usage("--xml needs a file");
      xml = v;
    } else if (a == "--ranks" || a == "-n") {
      const char* v = value();
      char* end = nullptr;
      const long n = v ? std::strtol(v, &end, 10) : 0;
      if (v == nullptr || *end != '\0' || n < 1 || n > 4096) return Usage("--ranks needs a number from 1 to 4096");
      nranks = static_cast<int>(n);
    } else if (a == "--format") {
      const char* v = value();
      if (v == nullptr || (std::strcmp(v, "table") != 0 && std::strcmp(v, "json") != 0)) {
        return Usage("--format is table or json");
      }
      format = v;
    } else if (a == "--transport") {
      const char* v = value();
      if (v == nullptr || (std::strcmp(v, "shm") != 0 && std::strcmp(v, "tcp") != 0 && std::strcmp(v, "verbs") != 0)) {
        return Usage("--transport is shm, tcp or verbs");
      }
      transport = v;
    } else if (a == "--cpus") {
      const char* v = value();
      if (v == nullptr) return Usage("--cpus needs CPU lists separated by ';'");
      cpus_arg = v;
    } else if (a == "--cpu-ranks") {
      cpu_ranks = true;
    } else if (a == "--help" || a == "-h") {
      Usage(nullptr);
      return 0;
    } else {
      return Usage(("unknown argument '" + a + "'").c_str());
    }
  }

  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) {
    std::fprintf(stderr, "ciuic-topo: error: %s\n", config.status().ToString().c_str());
    return 1;
  }
  if (!xml.empty()) {
    Status s = config->Set("CIUIC_TOPO_FILE", xml);
    if (!s.ok()) {
      std::fprintf(stderr, "ciuic-topo: error: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  StatusOr<topo::Topology> t = topo::Discover(*config);
  if (!t.ok()) {
    std::fprintf(stderr, "ciuic-topo: error: %s\n", t.status().ToString().c_str());
    return 1;
  }
  if (nranks == 0) {
    nranks = static_cast<int>(!cpu_ranks && !t->gpus.empty() ? t->gpus.size() : std::max<size_t>(1, t->numa_nodes.size()));
  }
  // --cpu-ranks: the plan of a CPU-only job (the matrix still shows GPUs).
  topo::Topology for_plan = *t;
  if (cpu_ranks) for_plan.gpus.clear();
  StatusOr<topo::Plan> plan = topo::MakePlan(for_plan, *config, nranks);
  if (!plan.ok()) {
    std::fprintf(stderr, "ciuic-topo: error: %s\n", plan.status().ToString().c_str());
    return 1;
  }
  // The ranks' plans: what their communicators apply, from what they read
  // (the file, else /sys).
  StatusOr<topo::Topology> pt = config->topo_file.empty() ? topo::DiscoverForPlans(*config) : StatusOr<topo::Topology>(*t);
  if (!pt.ok()) {
    std::fprintf(stderr, "ciuic-topo: error: %s\n", pt.status().ToString().c_str());
    return 1;
  }
  if (transport.empty()) {
    bool rdma = false;
    for (const topo::Nic& n : pt->nics) rdma |= n.rdma();
    transport = rdma ? "verbs" : "tcp";
  }
  // CPU ranks (no GPU each), as a communicator with CIUIC_GPU=off plans.
  StatusOr<topo::LocalJob> job = topo::PlacedJob(*pt, *config, nranks, !cpu_ranks && config->gpu != "off", transport);
  if (!job.ok()) {
    std::fprintf(stderr, "ciuic-topo: error: %s\n", job.status().ToString().c_str());
    return 1;
  }
  if (!cpus_arg.empty()) {
    job->cpus.clear();
    job->gpus.clear();
    for (size_t at = 0; at <= cpus_arg.size();) {
      const size_t semi = std::min(cpus_arg.find(';', at), cpus_arg.size());
      StatusOr<std::vector<int>> c = topo::ParseCpuList(cpus_arg.substr(at, semi - at));
      if (!c.ok()) return Usage(("--cpus: " + c.status().message()).c_str());
      job->cpus.push_back(*c);
      at = semi + 1;
    }
  }
  std::vector<topo::RankPlan> ranks;
  for (int r = 0; r < static_cast<int>(std::max<size_t>(1, job->cpus.size())); ++r) {
    StatusOr<topo::RankPlan> rp = topo::PlanRank(*pt, *config, *job, r);
    if (!rp.ok()) {
      std::fprintf(stderr, "ciuic-topo: error: %s\n", rp.status().ToString().c_str());
      return 1;
    }
    ranks.push_back(*rp);
  }
  if (format == "json") {
    PrintJson(*t, *plan, *pt, ranks, *config);
  } else {
    PrintTable(*t, *plan, *pt, ranks, *config);
  }
  return 0;
}
