// Topology accessors, the PCI path between two endpoints, helpers shared by
// the loaders, and Discover().
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ciuic/topology.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {

const char* LinkName(Link link) {
  switch (link) {
    case Link::kSelf: return "X";
    case Link::kPix: return "PIX";
    case Link::kPxb: return "PXB";
    case Link::kPhb: return "PHB";
    case Link::kNode: return "NODE";
    case Link::kSys: return "SYS";
    case Link::kUnknown: return "?";
  }
  return "?";
}

std::string FormatCpuList(const std::vector<int>& cpus_in) {
  std::vector<int> cpus = cpus_in;
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> Topology::Cpus() const {
  std::vector<int> out;
  for (const Core& c : cores) out.insert(out.end(), c.cpus.begin(), c.cpus.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int Topology::CoreOfCpu(int cpu) const {
  for (size_t i = 0; i < cores.size(); ++i) {
    for (int c : cores[i].cpus) {
      if (c == cpu) return static_cast<int>(i);
    }
  }
  return -1;
}

int Topology::NumaOfCpu(int cpu) const {
  const int core = CoreOfCpu(cpu);
  return core < 0 ? -1 : cores[core].numa_node;
}

int Topology::NumaByOsIndex(int os_index) const {
  for (size_t i = 0; i < numa_nodes.size(); ++i) {
    if (numa_nodes[i].os_index == os_index) return static_cast<int>(i);
  }
  return -1;
}

int Topology::NumaDistance(int a, int b) const {
  const int n = static_cast<int>(numa_nodes.size());
  if (a < 0 || b < 0 || a >= n || b >= n) return 0;
  if (numa_distances.size() == static_cast<size_t>(n) * n) {
    return static_cast<int>(numa_distances[static_cast<size_t>(a) * n + b]);
  }
  return a == b ? 10 : 20;
}

int Topology::FindNic(const std::string& name) const {
  for (size_t i = 0; i < nics.size(); ++i) {
    const Nic& n = nics[i];
    if (name == n.name || (!n.verbs_name.empty() && name == n.verbs_name) ||
        (!n.netdev.empty() && name == n.netdev)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

namespace {

std::string LowerCase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int Topology::FindGpu(const std::string& key) const {
  const std::string k = LowerCase(key);
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string bus = LowerCase(gpus[i].bus_id);
    if (k == bus || (!gpus[i].name.empty() && key == gpus[i].name) ||
        (bus.size() > 5 && k == bus.substr(5))) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

int Topology::PciDepth(int i) const {
  int depth = 0;
  // Bounded by the number of nodes so that a corrupt parent chain ends.
  for (size_t guard = 0; i >= 0 && i < static_cast<int>(pci.size()) && guard <= pci.size();
       ++guard) {
    if (pci[i].parent < 0) return depth;
    i = pci[i].parent;
    ++depth;
  }
  return depth;
}

namespace {

struct Location {
  int pci = -1;
  int numa = -1;
};

}  // namespace

StatusOr<Path> Topology::PathBetween(Endpoint a, Endpoint b) const {
  auto locate = [this](Endpoint e, const char* which) -> StatusOr<Location> {
    Location l;
    switch (e.kind) {
      case Endpoint::kGpu:
        if (e.index < 0 || e.index >= static_cast<int>(gpus.size())) {
          return InvalidArgumentError(std::string(which) + ": no GPU " + std::to_string(e.index));
        }
        l.pci = gpus[e.index].pci;
        l.numa = gpus[e.index].numa_node;
        return l;
      case Endpoint::kNic:
        if (e.index < 0 || e.index >= static_cast<int>(nics.size())) {
          return InvalidArgumentError(std::string(which) + ": no NIC " + std::to_string(e.index));
        }
        l.pci = nics[e.index].pci;
        l.numa = nics[e.index].numa_node;
        return l;
      case Endpoint::kNuma:
        if (e.index < 0 || e.index >= static_cast<int>(numa_nodes.size())) {
          return InvalidArgumentError(std::string(which) + ": no NUMA node " +
                                      std::to_string(e.index));
        }
        l.numa = e.index;
        return l;
      case Endpoint::kCpu:
        if (CoreOfCpu(e.index) < 0) {
          return InvalidArgumentError(std::string(which) + ": no CPU " + std::to_string(e.index));
        }
        l.numa = NumaOfCpu(e.index);
        return l;
    }
    return InvalidArgumentError(std::string(which) + ": bad endpoint kind");
  };
  CIUIC_ASSIGN_OR_RETURN(const Location la, locate(a, "a"));
  CIUIC_ASSIGN_OR_RETURN(const Location lb, locate(b, "b"));

  Path p;
  p.numa_distance = NumaDistance(la.numa, lb.numa);
  if (a.kind == b.kind && a.index == b.index) {
    p.link = Link::kSelf;
    return p;
  }
  if (a.kind == Endpoint::kCpu && b.kind == Endpoint::kCpu && CoreOfCpu(a.index) == CoreOfCpu(b.index)) {
    p.link = Link::kSelf;  // hyperthreads of one core
    return p;
  }
  // The CPU side (a NUMA node) counts as one vertex above the PCI roots.
  const int da = la.pci >= 0 ? PciDepth(la.pci) + 1 : 0;
  const int db = lb.pci >= 0 ? PciDepth(lb.pci) + 1 : 0;
  if (la.pci >= 0 && lb.pci >= 0) {
    if (la.pci == lb.pci) {
      p.link = Link::kPix;
      return p;
    }
    // Lowest common ancestor in the PCI tree.
    std::vector<int> up_a;
    for (int i = la.pci; i >= 0; i = pci[i].parent) {
      up_a.push_back(i);
      if (up_a.size() > pci.size()) break;
    }
    int lca = -1;
    int steps_b = 0;
    for (int i = lb.pci; i >= 0 && steps_b <= static_cast<int>(pci.size()); i = pci[i].parent, ++steps_b) {
      if (std::find(up_a.begin(), up_a.end(), i) != up_a.end()) {
        lca = i;
        break;
      }
    }
    if (lca >= 0) {
      const int steps_a = static_cast<int>(std::find(up_a.begin(), up_a.end(), lca) - up_a.begin());
      p.hops = steps_a + steps_b;
      if (pci[lca].kind == PciKind::kHostBridge) {
        p.link = Link::kPhb;
      } else if (steps_a <= 2 && steps_b <= 2) {
        // device -> downstream port -> upstream port: one switch.
        p.link = Link::kPix;
      } else {
        p.link = Link::kPxb;
      }
      return p;
    }
  }
  // Different PCI trees, or one side is the CPU: decided by NUMA locality.
  p.hops = da + db;
  if (la.numa < 0 || lb.numa < 0) {
    p.link = Link::kUnknown;
  } else if (la.numa == lb.numa) {
    p.link = Link::kNode;
  } else {
    p.link = Link::kSys;
    p.hops += 1;
  }
  return p;
}

Status Topology::Validate() const {
  const int np = static_cast<int>(packages.size());
  const int nn = static_cast<int>(numa_nodes.size());
  const int nc = static_cast<int>(cores.size());
  const int nx = static_cast<int>(pci.size());
  auto bad = [](const std::string& what) { return InvalidArgumentError("topology: " + what); };
  for (int i = 0; i < np; ++i) {
    for (int n : packages[i].numa_nodes) {
      if (n < 0 || n >= nn) return bad("package " + std::to_string(i) + " lists NUMA node " + std::to_string(n));
    }
    for (int c : packages[i].cores) {
      if (c < 0 || c >= nc) return bad("package " + std::to_string(i) + " lists core " + std::to_string(c));
    }
  }
  for (int i = 0; i < nn; ++i) {
    if (numa_nodes[i].package >= np) return bad("NUMA node " + std::to_string(i) + " has package " + std::to_string(numa_nodes[i].package));
  }
  std::vector<int> seen;
  for (int i = 0; i < nc; ++i) {
    const Core& c = cores[i];
    if (c.package >= np || c.numa_node >= nn) return bad("core " + std::to_string(i) + " refers to a missing package or NUMA node");
    if (c.cpus.empty()) return bad("core " + std::to_string(i) + " has no CPU");
    for (int cpu : c.cpus) {
      if (cpu < 0) return bad("core " + std::to_string(i) + " has CPU " + std::to_string(cpu));
      seen.push_back(cpu);
    }
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) return bad("a CPU belongs to two cores");
  for (int i = 0; i < nx; ++i) {
    const PciNode& p = pci[i];
    if (p.parent >= nx || p.parent == i) return bad("PCI node " + std::to_string(i) + " has parent " + std::to_string(p.parent));
    if (p.numa_node >= nn) return bad("PCI node " + std::to_string(i) + " has NUMA node " + std::to_string(p.numa_node));
  }
  for (int i = 0; i < nx; ++i) {
    if (PciDepth(i) > nx) return bad("PCI tree has a cycle at node " + std::to_string(i));
  }
  for (size_t i = 0; i < nics.size(); ++i) {
    if (nics[i].pci >= nx || nics[i].numa_node >= nn) return bad("NIC " + nics[i].name + " refers to a missing PCI or NUMA node");
    if (nics[i].name.empty()) return bad("NIC " + std::to_string(i) + " has no name");
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (gpus[i].pci >= nx || gpus[i].numa_node >= nn) return bad("GPU " + gpus[i].bus_id + " refers to a missing PCI or NUMA node");
  }
  if (!numa_distances.empty() && numa_distances.size() != static_cast<size_t>(nn) * nn) {
    return bad("NUMA distance matrix is not " + std::to_string(nn) + "x" + std::to_string(nn));
  }
  return Status::Ok();
}

std::string Topology::Summary() const {
  auto plural = [](size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::ostringstream os;
  os << plural(packages.size(), "package", "packages") << ", "
     << plural(numa_nodes.size(), "NUMA node", "NUMA nodes") << ", "
     << plural(cores.size(), "core", "cores") << ", " << plural(Cpus().size(), "CPU", "CPUs") << ", "
     << plural(gpus.size(), "GPU", "GPUs") << ", " << plural(nics.size(), "NIC", "NICs");
  if (!has_pci()) os << " (no PCI information)";
  return os.str();
}

// ---- Shared loader helpers ----------------------------------------------------

namespace internal {

bool ParseCpuList(const std::string& text, std::vector<int>* out) {
  out->clear();
  std::string s;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  }
  if (s.empty()) return true;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) return false;
    const size_t dash = item.find('-');
    // Each number must end where its field does (the dash, the item's end):
    // not at a stray byte, nor at a NUL inside the text.
    const char* const begin = item.c_str();
    const char* const stop = begin + item.size();
    char* end = nullptr;
    const long lo = std::strtol(begin, &end, 10);
    if (end == begin || end != (dash == std::string::npos ? stop : begin + dash)) return false;
    long hi = lo;
    if (dash != std::string::npos) {
      const char* p = begin + dash + 1;
      hi = std::strtol(p, &end, 10);
      if (end == p || end != stop) return false;
    }
    // CPU numbers beyond 2^20 are no CPU list of a real machine (and near
    // LONG_MAX the loop below would overflow).
    if (lo < 0 || hi < lo || hi > 1 << 20) return false;
    // And 2^20 + 1 in all: a repeated range must not make gigabytes.
    if (out->size() + static_cast<size_t>(hi - lo + 1) > (size_t{1} << 20) + 1) return false;
    for (long v = lo; v <= hi; ++v) out->push_back(static_cast<int>(v));
  }
  return true;
}

bool ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  *out = ss.str();
  return true;
}

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

bool IsPciBusId(const std::string& t) {
  // dddd:bb:dd.f
  if (t.size() != 12 || t[4] != ':' || t[7] != ':' || t[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(t[i]))) return false;
  }
  return true;
}

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i]));
    const bool db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const unsigned long long va = std::stoull(a.substr(i, std::min<size_t>(ie - i, 18)));
      const unsigned long long vb = std::stoull(b.substr(j, std::min<size_t>(je - j, 18)));
      if (va != vb) return va < vb;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

Status Finish(Topology* t) {
  std::stable_sort(t->nics.begin(), t->nics.end(), [](const Nic& a, const Nic& b) {
    if (a.rdma() != b.rdma()) return a.rdma();
    return NaturalLess(a.name, b.name);
  });
  std::stable_sort(t->gpus.begin(), t->gpus.end(),
                   [](const Gpu& a, const Gpu& b) { return LowerCase(a.bus_id) < LowerCase(b.bus_id); });
  // Back references from packages, when a loader did not fill them.
  for (Package& p : t->packages) {
    p.numa_nodes.clear();
    p.cores.clear();
  }
  for (size_t i = 0; i < t->numa_nodes.size(); ++i) {
    const int p = t->numa_nodes[i].package;
    if (p >= 0 && p < static_cast<int>(t->packages.size())) t->packages[p].numa_nodes.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < t->cores.size(); ++i) {
    const int p = t->cores[i].package;
    if (p >= 0 && p < static_cast<int>(t->packages.size())) t->packages[p].cores.push_back(static_cast<int>(i));
  }
  // NIC and GPU locality follows their PCI root when the loader left it open.
  for (Nic& n : t->nics) {
    if (n.numa_node < 0 && n.pci >= 0 && n.pci < static_cast<int>(t->pci.size())) n.numa_node = t->pci[n.pci].numa_node;
  }
  for (Gpu& g : t->gpus) {
    if (g.numa_node < 0 && g.pci >= 0 && g.pci < static_cast<int>(t->pci.size())) g.numa_node = t->pci[g.pci].numa_node;
  }
  if (t->caches.l1d == 0) t->caches.l1d = CacheSizes().l1d;
  if (t->caches.l2 == 0) t->caches.l2 = CacheSizes().l2;
  if (t->caches.llc == 0) t->caches.llc = std::max(t->caches.l2, CacheSizes().llc);
  Status s = t->Validate();
  if (!s.ok()) return InternalError(t->source + ": " + s.message());
  return Status::Ok();
}

}  // namespace internal

StatusOr<Topology> Discover(const Config& config) {
  if (!config.topo_file.empty()) {
    StatusOr<Topology> t = LoadXmlFile(config.topo_file);
    if (!t.ok()) return t.status().WithContext("CIUIC_TOPO_FILE");
    return t;
  }
  return DiscoverLive();
}

StatusOr<Topology> DiscoverForPlans(const Config& config) {
  if (!config.topo_file.empty()) return Discover(config);
  return LoadSysfs("/");
}

}  // namespace topology
}  // namespace ciuic
