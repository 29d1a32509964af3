// The /sys reader: the fallback of builds without hwloc, and the source of
// verbs devices hwloc does not report (Soft-RoCE rxe, siw: no PCI device).
// Every path is under `root` so tests can point it at a fake tree.
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "ciuic/topology.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {
namespace internal {
namespace {

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), NaturalLess);
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

// "0x10de" / "0x030200" / "42" -> number; -1 when unreadable.
long ReadNumber(const std::string& path) {
  const std::string s = ReadLine(path);
  if (s.empty()) return -1;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 0);
  return end == s.c_str() ? -1 : v;
}

// "32K" -> 32768.
size_t ParseCacheSize(const std::string& s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return 0;
  switch (*end) {
    case 'K': return static_cast<size_t>(v) << 10;
    case 'M': return static_cast<size_t>(v) << 20;
    case 'G': return static_cast<size_t>(v) << 30;
    default: return static_cast<size_t>(v);
  }
}

std::string Root(const std::string& root) {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r;
}

int FindPciByBusId(const Topology& t, const std::string& bus_id) {
  for (size_t i = 0; i < t.pci.size(); ++i) {
    if (t.pci[i].bus_id == bus_id) return static_cast<int>(i);
  }
  return -1;
}

// Adds the chain of PCI nodes (root complex, bridges, device) that leads to
// the device whose sysfs directory is `dir` (any path inside it works: the
// deepest PCI bus id component is the device). Returns the device's PCI
// index or -1.
int AddPciChain(const std::string& root, const std::string& dir, Topology* t) {
  const std::string real = RealPath(dir);
  const std::string real_root = root.empty() ? "" : RealPath(root);
  if (real.empty() || real.compare(0, real_root.size(), real_root) != 0) return -1;
  std::vector<std::string> parts;
  std::stringstream ss(real.substr(real_root.size()));
  for (std::string p; std::getline(ss, p, '/');) {
    if (!p.empty()) parts.push_back(p);
  }
  // .../sys/devices/pciDDDD:BB/<bdf>/<bdf>/.../<bdf>/[virtioN/net/eth0]
  std::string host;
  std::string prefix = real_root;
  std::vector<std::pair<std::string, std::string>> chain;  // bus id, directory
  for (const std::string& p : parts) {
    prefix += "/" + p;
    if (p.size() == 10 && p.compare(0, 3, "pci") == 0 && p[7] == ':') host = p.substr(3);
    if (IsPciBusId(p)) chain.emplace_back(p, prefix);
  }
  if (chain.empty()) return -1;
  // Reuse what is there already (another device's chain, or hwloc's nodes).
  int parent = -1;
  size_t first_new = 0;
  for (size_t i = chain.size(); i-- > 0;) {
    const int found = FindPciByBusId(*t, chain[i].first);
    if (found >= 0) {
      parent = found;
      first_new = i + 1;
      break;
    }
  }
  if (first_new == chain.size()) return parent;
  long numa_os = ReadNumber(chain.back().second + "/numa_node");
  int numa = numa_os >= 0 ? t->NumaByOsIndex(static_cast<int>(numa_os)) : -1;
  if (numa < 0 && t->numa_nodes.size() == 1) numa = 0;
  if (parent < 0) {
    const std::string hb = host.empty() ? chain[0].first.substr(0, 7) : host;
    const std::string hb_id = hb.substr(0, 4) + ":[" + hb.substr(5) + "]";
    parent = FindPciByBusId(*t, hb_id);
    if (parent < 0) {
      PciNode n;
      n.kind = PciKind::kHostBridge;
      n.bus_id = hb_id;
      n.numa_node = numa;
      t->pci.push_back(n);
      parent = static_cast<int>(t->pci.size()) - 1;
    }
  }
  if (t->pci[parent].numa_node >= 0) numa = t->pci[parent].numa_node;
  for (size_t i = first_new; i < chain.size(); ++i) {
    PciNode n;
    n.kind = i + 1 == chain.size() ? PciKind::kDevice : PciKind::kBridge;
    n.parent = parent;
    n.bus_id = chain[i].first;
    const std::string& d = chain[i].second;
    n.vendor_id = static_cast<uint16_t>(std::max(0L, ReadNumber(d + "/vendor")));
    n.device_id = static_cast<uint16_t>(std::max(0L, ReadNumber(d + "/device")));
    n.class_id = static_cast<uint16_t>(std::max(0L, ReadNumber(d + "/class")) >> 8);
    n.numa_node = numa;
    t->pci.push_back(n);
    parent = static_cast<int>(t->pci.size()) - 1;
  }
  return parent;
}

}  // namespace

void AddSysfsVerbsDevices(const std::string& root_in, Topology* t) {
  const std::string root = Root(root_in);
  const std::string ib = root + "/sys/class/infiniband";
  for (const std::string& name : ListDir(ib)) {
    if (t->FindNic(name) >= 0) continue;
    const std::string dir = ib + "/" + name;
    Nic n;
    n.name = n.verbs_name = name;
    n.ports = static_cast<int>(ListDir(dir + "/ports").size());
    if (Exists(dir + "/device")) {
      n.pci = AddPciChain(root, dir + "/device", t);
      const std::vector<std::string> nets = ListDir(dir + "/device/net");
      if (!nets.empty()) n.netdev = nets[0];
    } else {
      n.netdev = ReadLine(dir + "/parent");  // rxe/siw: the netdev it runs over
      if (!n.netdev.empty() && Exists(root + "/sys/class/net/" + n.netdev + "/device")) {
        n.pci = AddPciChain(root, root + "/sys/class/net/" + n.netdev + "/device", t);
      }
    }
    if (n.pci >= 0) {
      n.bus_id = t->pci[n.pci].bus_id;
      n.numa_node = t->pci[n.pci].numa_node;
    }
    // The netdev-only entry of that netdev now belongs to this device.
    if (!n.netdev.empty()) {
      for (size_t i = 0; i < t->nics.size(); ++i) {
        if (!t->nics[i].rdma() && t->nics[i].netdev == n.netdev) {
          if (n.pci < 0) {
            n.pci = t->nics[i].pci;
            n.bus_id = t->nics[i].bus_id;
            n.numa_node = t->nics[i].numa_node;
          }
          t->nics.erase(t->nics.begin() + static_cast<long>(i));
          break;
        }
      }
    }
    t->nics.push_back(std::move(n));
  }
}

}  // namespace internal

using internal::ParseCpuList;
using internal::ReadLine;

StatusOr<Topology> LoadSysfs(const std::string& root_in) {
  const std::string root = internal::Root(root_in);
  const std::string sys = root + "/sys/devices/system";
  Topology t;
  t.source = root.empty() ? "sysfs" : "sysfs:" + root;
  t.hostname = ReadLine(root + "/proc/sys/kernel/hostname");

  std::vector<int> cpus;
  if (!ParseCpuList(ReadLine(sys + "/cpu/online"), &cpus) || cpus.empty()) {
    cpus.clear();
    for (const std::string& n : internal::ListDir(sys + "/cpu")) {
      std::vector<int> one;  // "cpu<N>" exactly, N a number in range
      if (n.size() > 3 && n.compare(0, 3, "cpu") == 0 && std::isdigit(static_cast<unsigned char>(n[3])) &&
          ParseCpuList(n.substr(3), &one) && one.size() == 1) {
        cpus.push_back(one[0]);
      }
    }
    std::sort(cpus.begin(), cpus.end());
  }
  if (cpus.empty()) return UnavailableError("sysfs under '" + root_in + "': no CPU found");

  // NUMA nodes.
  std::vector<int> nodes;
  if (!ParseCpuList(ReadLine(sys + "/node/online"), &nodes)) nodes.clear();
  for (int os : nodes) {
    const std::string d = sys + "/node/node" + std::to_string(os);
    if (!internal::Exists(d)) continue;
    NumaNode n;
    n.os_index = os;
    ParseCpuList(ReadLine(d + "/cpulist"), &n.cpus);
    std::string meminfo;
    if (internal::ReadFileToString(d + "/meminfo", &meminfo)) {
      const size_t p = meminfo.find("MemTotal:");
      if (p != std::string::npos) n.memory_bytes = std::strtoull(meminfo.c_str() + p + 9, nullptr, 10) * 1024;
    }
    const long huge = internal::ReadNumber(d + "/hugepages/hugepages-2048kB/nr_hugepages");
    n.huge_pages_2m = huge > 0 ? static_cast<uint64_t>(huge) : 0;
    t.numa_nodes.push_back(std::move(n));
  }
  if (t.numa_nodes.empty()) {
    NumaNode n;
    n.os_index = 0;
    n.cpus = cpus;
    std::string meminfo;
    if (internal::ReadFileToString(root + "/proc/meminfo", &meminfo)) {
      const size_t p = meminfo.find("MemTotal:");
      if (p != std::string::npos) n.memory_bytes = std::strtoull(meminfo.c_str() + p + 9, nullptr, 10) * 1024;
    }
    t.numa_nodes.push_back(std::move(n));
  }
  auto numa_of = [&t](int cpu) {
    for (size_t i = 0; i < t.numa_nodes.size(); ++i) {
      const auto& c = t.numa_nodes[i].cpus;
      if (std::find(c.begin(), c.end(), cpu) != c.end()) return static_cast<int>(i);
    }
    return t.numa_nodes.size() == 1 ? 0 : -1;
  };

  // Packages and cores.
  std::map<long, int> package_index;
  std::map<std::pair<long, long>, int> core_index;
  // (package, core) of each CPU, read once from sysfs.
  std::vector<std::pair<long, long>> cpu_core(cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) {
    const std::string d = sys + "/cpu/cpu" + std::to_string(cpus[i]) + "/topology";
    long pkg = internal::ReadNumber(d + "/physical_package_id");
    if (pkg < 0) pkg = 0;
    long core_id = internal::ReadNumber(d + "/core_id");
    if (core_id < 0) core_id = cpus[i];
    cpu_core[i] = {pkg, core_id};
    package_index.emplace(pkg, 0);
    core_index.emplace(cpu_core[i], -1);
  }
  int pi = 0;
  for (auto& [os, idx] : package_index) {
    idx = pi++;
    Package p;
    p.os_index = static_cast<int>(os);
    t.packages.push_back(p);
  }
  for (size_t i = 0; i < cpus.size(); ++i) {
    const int cpu = cpus[i];
    const auto [pkg, core_id] = cpu_core[i];
    int& ci = core_index[cpu_core[i]];
    if (ci < 0) {
      Core c;
      c.os_index = static_cast<int>(core_id);
      c.package = package_index[pkg];
      c.numa_node = numa_of(cpu);
      t.cores.push_back(c);
      ci = static_cast<int>(t.cores.size()) - 1;
    }
    t.cores[ci].cpus.push_back(cpu);
  }
  std::stable_sort(t.cores.begin(), t.cores.end(),
                   [](const Core& a, const Core& b) { return a.cpus.front() < b.cpus.front(); });
  for (NumaNode& n : t.numa_nodes) {
    std::set<int> pkgs;
    for (int cpu : n.cpus) {
      const int c = t.CoreOfCpu(cpu);
      if (c >= 0) pkgs.insert(t.cores[c].package);
    }
    n.package = pkgs.size() == 1 ? *pkgs.begin() : -1;
  }

  // NUMA distances (one row per node, OS order of the online nodes).
  if (t.numa_nodes.size() > 1) {
    const size_t n = t.numa_nodes.size();
    std::vector<uint32_t> m(n * n, 0);
    bool ok = true;
    for (size_t i = 0; i < n && ok; ++i) {
      std::stringstream row(ReadLine(sys + "/node/node" + std::to_string(t.numa_nodes[i].os_index) + "/distance"));
      std::vector<uint32_t> v;
      for (uint32_t x; row >> x;) v.push_back(x);
      // The row has one entry per online node in OS order, as numa_nodes.
      if (v.size() != n) ok = false;
      for (size_t j = 0; ok && j < n; ++j) m[i * n + j] = v[j];
    }
    if (ok) t.numa_distances = std::move(m);
  }

  // Caches above the first CPU; instances counted over all CPUs.
  const std::string cache0 = sys + "/cpu/cpu" + std::to_string(cpus[0]) + "/cache";
  bool any_cache = false;
  int llc_level = 0;
  for (const std::string& idx : internal::ListDir(cache0)) {
    if (idx.compare(0, 5, "index") != 0) continue;
    const std::string d = cache0 + "/" + idx;
    CacheLevel l;
    l.level = static_cast<int>(internal::ReadNumber(d + "/level"));
    const std::string type = ReadLine(d + "/type");
    l.type = type == "Data" ? 'd' : type == "Instruction" ? 'i' : 'u';
    l.size = internal::ParseCacheSize(ReadLine(d + "/size"));
    std::vector<int> shared;
    ParseCpuList(ReadLine(d + "/shared_cpu_list"), &shared);
    l.cpus_per_instance = static_cast<int>(shared.size());
    std::set<std::string> instances;
    for (int cpu : cpus) {
      instances.insert(ReadLine(sys + "/cpu/cpu" + std::to_string(cpu) + "/cache/" + idx + "/shared_cpu_list"));
    }
    l.instances = static_cast<int>(instances.size());
    if (l.level <= 0 || l.size == 0) continue;
    t.cache_levels.push_back(l);
    if (l.type == 'i') continue;
    any_cache = true;
    if (l.level == 1) t.caches.l1d = l.size;
    if (l.level == 2) t.caches.l2 = l.size;
    if (l.level >= 2 && l.level > llc_level) {
      llc_level = l.level;
      t.caches.llc = l.size;
      t.caches.llc_level = l.level;
      t.caches.llc_cpus = l.cpus_per_instance;
    }
  }
  t.caches.measured = any_cache;

  // Network devices on PCI (netdevs without a device link are virtual:
  // lo, veth, bridges), then verbs devices, then GPUs.
  const std::string net = root + "/sys/class/net";
  for (const std::string& name : internal::ListDir(net)) {
    if (!internal::Exists(net + "/" + name + "/device")) continue;
    Nic n;
    n.name = n.netdev = name;
    n.pci = internal::AddPciChain(root, net + "/" + name + "/device", &t);
    if (n.pci >= 0) {
      n.bus_id = t.pci[n.pci].bus_id;
      n.numa_node = t.pci[n.pci].numa_node;
    }
    t.nics.push_back(std::move(n));
  }
  internal::AddSysfsVerbsDevices(root_in, &t);
  const std::string pcidevs = root + "/sys/bus/pci/devices";
  for (const std::string& bdf : internal::ListDir(pcidevs)) {
    const long cls = internal::ReadNumber(pcidevs + "/" + bdf + "/class");
    const long vendor = internal::ReadNumber(pcidevs + "/" + bdf + "/vendor");
    if (cls < 0) continue;
    const long c16 = cls >> 8;
    const bool gpu = c16 == 0x0302 || c16 == 0x0380 || ((c16 >> 8) == 0x03 && (vendor == 0x10de || vendor == 0x1002));
    if (!gpu) continue;
    Gpu g;
    g.bus_id = bdf;
    g.pci = internal::AddPciChain(root, pcidevs + "/" + bdf, &t);
    g.vendor_id = static_cast<uint16_t>(std::max(0L, vendor));
    g.device_id = static_cast<uint16_t>(std::max(0L, internal::ReadNumber(pcidevs + "/" + bdf + "/device")));
    for (const std::string& drm : internal::ListDir(pcidevs + "/" + bdf + "/drm")) {
      if (drm.compare(0, 4, "card") == 0) g.name = drm;
    }
    if (g.pci >= 0) g.numa_node = t.pci[g.pci].numa_node;
    t.gpus.push_back(std::move(g));
  }
  CIUIC_RETURN_IF_ERROR(internal::Finish(&t));
  return t;
}

}  // namespace topology
}  // namespace ciuic
