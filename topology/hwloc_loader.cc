// Discovery with hwloc: the live machine (with I/O) or a saved XML topology,
// turned into the plain Topology value. Only this file sees hwloc types.
#include <fcntl.h>
#include <hwloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "ciuic/topology.h"
#include "common/log.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {
namespace {

struct HwlocDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocPtr = std::unique_ptr<hwloc_topology, HwlocDeleter>;

std::vector<int> BitmapToVector(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

std::string Info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v != nullptr ? v : "";
}

std::string BusId(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
  return buf;
}

// The translation of one loaded hwloc topology into a Topology.
class Builder {
 public:
  Builder(hwloc_topology_t t, Topology* out) : t_(t), out_(out) {}

  void Run() {
    hwloc_obj_t root = hwloc_get_root_obj(t_);
    out_->hostname = Info(root, "HostName");
    Packages();
    NumaNodes();
    Cores();
    Caches();
    Distances();
    Io(root);
  }

 private:
  void Packages() {
    const int n = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_PACKAGE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t p = hwloc_get_obj_by_type(t_, HWLOC_OBJ_PACKAGE, i);
      Package pkg;
      pkg.os_index = p->os_index == HWLOC_UNKNOWN_INDEX ? i : static_cast<int>(p->os_index);
      out_->packages.push_back(pkg);
    }
  }

  int PackageOf(hwloc_obj_t obj) {
    hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t_, HWLOC_OBJ_PACKAGE, obj);
    if (p == nullptr && obj->cpuset != nullptr && !hwloc_bitmap_iszero(obj->cpuset)) {
      // A NUMA node above the packages (one node for several packages) or
      // an object without ancestors of that type: the package that covers
      // its CPUs, if exactly one does.
      hwloc_obj_t cover = hwloc_get_obj_covering_cpuset(t_, obj->cpuset);
      p = cover != nullptr && cover->type == HWLOC_OBJ_PACKAGE ? cover : nullptr;
    }
    return p == nullptr ? -1 : static_cast<int>(p->logical_index);
  }

  void NumaNodes() {
    const int n = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t o = hwloc_get_obj_by_type(t_, HWLOC_OBJ_NUMANODE, i);
      NumaNode node;
      node.os_index = o->os_index == HWLOC_UNKNOWN_INDEX ? i : static_cast<int>(o->os_index);
      node.package = PackageOf(o);
      if (o->attr != nullptr) {
        node.memory_bytes = o->attr->numanode.local_memory;
        for (unsigned k = 0; k < o->attr->numanode.page_types_len; ++k) {
          if (o->attr->numanode.page_types[k].size == 2u * 1024 * 1024) {
            node.huge_pages_2m = o->attr->numanode.page_types[k].count;
          }
        }
      }
      node.cpus = BitmapToVector(o->cpuset);
      out_->numa_nodes.push_back(std::move(node));
    }
  }

  // The NUMA node of an object local to `set`: the only one, or the first
  // when all of them have the same CPUs (a DDR node with its HBM/CXL
  // companions); -1 when the set spans several localities.
  int NumaOfNodeset(hwloc_const_nodeset_t set) {
    if (set == nullptr || hwloc_bitmap_iszero(set)) return -1;
    const int first = out_->NumaByOsIndex(hwloc_bitmap_first(set));
    if (first < 0) return -1;
    for (int os = hwloc_bitmap_first(set); os >= 0; os = hwloc_bitmap_next(set, os)) {
      const int n = out_->NumaByOsIndex(os);
      if (n < 0 || out_->numa_nodes[n].cpus != out_->numa_nodes[first].cpus) return -1;
    }
    return first;
  }

  void Cores() {
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    int n = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_CORE);
    if (n <= 0) {  // some VMs and old XML files have PUs only
      type = HWLOC_OBJ_PU;
      n = hwloc_get_nbobjs_by_type(t_, HWLOC_OBJ_PU);
    }
    for (int i = 0; i < n; ++i) {
      hwloc_obj_t o = hwloc_get_obj_by_type(t_, type, i);
      Core c;
      c.os_index = o->os_index == HWLOC_UNKNOWN_INDEX ? i : static_cast<int>(o->os_index);
      c.package = PackageOf(o);
      c.numa_node = NumaOfNodeset(o->nodeset);
      c.cpus = BitmapToVector(o->cpuset);
      if (c.cpus.empty()) continue;
      out_->cores.push_back(std::move(c));
    }
  }

  void Caches() {
    static const hwloc_obj_type_t kTypes[] = {HWLOC_OBJ_L1CACHE,  HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2CACHE,
                                              HWLOC_OBJ_L2ICACHE, HWLOC_OBJ_L3CACHE,  HWLOC_OBJ_L3ICACHE,
                                              HWLOC_OBJ_L4CACHE,  HWLOC_OBJ_L5CACHE};
    for (hwloc_obj_type_t type : kTypes) {
      const int n = hwloc_get_nbobjs_by_type(t_, type);
      if (n <= 0) continue;
      hwloc_obj_t o = hwloc_get_obj_by_type(t_, type, 0);
      CacheLevel l;
      l.level = static_cast<int>(o->attr->cache.depth);
      l.type = o->attr->cache.type == HWLOC_OBJ_CACHE_DATA          ? 'd'
               : o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION ? 'i'
                                                                    : 'u';
      l.size = o->attr->cache.size;
      l.instances = n;
      l.cpus_per_instance = o->cpuset != nullptr ? hwloc_bitmap_weight(o->cpuset) : 0;
      out_->cache_levels.push_back(l);
    }
    // The caches above the first PU.
    hwloc_obj_t pu = hwloc_get_obj_by_type(t_, HWLOC_OBJ_PU, 0);
    CacheSizes& cs = out_->caches;
    bool any = false;
    for (hwloc_obj_t o = pu ? pu->parent : nullptr; o != nullptr; o = o->parent) {
      if (!hwloc_obj_type_is_dcache(o->type) || o->attr->cache.size == 0) continue;
      any = true;
      const int depth = static_cast<int>(o->attr->cache.depth);
      if (depth == 1) cs.l1d = o->attr->cache.size;
      if (depth == 2) cs.l2 = o->attr->cache.size;
      if (depth >= 2) {  // the outermost one wins
        cs.llc = o->attr->cache.size;
        cs.llc_level = depth;
        cs.llc_cpus = o->cpuset != nullptr ? hwloc_bitmap_weight(o->cpuset) : 0;
      }
    }
    cs.measured = any;
  }

  void Distances() {
    const size_t n = out_->numa_nodes.size();
    if (n < 2) return;
    unsigned nr = 1;
    hwloc_distances_s* d = nullptr;
    if (hwloc_distances_get_by_name(t_, "NUMALatency", &nr, &d, 0) != 0 || nr < 1) {
      nr = 1;
      if (hwloc_distances_get_by_type(t_, HWLOC_OBJ_NUMANODE, &nr, &d,
                                      HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 ||
          nr < 1) {
        return;
      }
    }
    std::vector<uint32_t> m(n * n, 0);
    size_t filled = 0;
    for (unsigned i = 0; i < d->nbobjs; ++i) {
      const int a = d->objs[i] ? out_->NumaByOsIndex(static_cast<int>(d->objs[i]->os_index)) : -1;
      for (unsigned j = 0; j < d->nbobjs; ++j) {
        const int b = d->objs[j] ? out_->NumaByOsIndex(static_cast<int>(d->objs[j]->os_index)) : -1;
        if (a < 0 || b < 0) continue;
        m[static_cast<size_t>(a) * n + b] = static_cast<uint32_t>(d->values[i * d->nbobjs + j]);
        ++filled;
      }
    }
    hwloc_distances_release(t_, d);
    if (filled == n * n) out_->numa_distances = std::move(m);
  }

  // Walks the tree; I/O objects become PCI nodes, NICs and GPUs.
  void Io(hwloc_obj_t obj) {
    for (hwloc_obj_t c = obj->first_child; c != nullptr; c = c->next_sibling) Io(c);
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) IoObject(c, -1);
  }

  void IoObject(hwloc_obj_t obj, int parent) {
    int me = parent;
    if (obj->type == HWLOC_OBJ_BRIDGE || obj->type == HWLOC_OBJ_PCI_DEVICE) {
      PciNode n;
      n.parent = parent;
      if (obj->type == HWLOC_OBJ_BRIDGE) {
        const auto& b = obj->attr->bridge;
        if (b.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
          n.kind = PciKind::kHostBridge;
          char buf[32];
          std::snprintf(buf, sizeof buf, "%04x:[%02x-%02x]", b.downstream.pci.domain,
                        b.downstream.pci.secondary_bus, b.downstream.pci.subordinate_bus);
          n.bus_id = buf;
        } else {
          n.kind = PciKind::kBridge;
          n.bus_id = BusId(b.upstream.pci);
          n.vendor_id = b.upstream.pci.vendor_id;
          n.device_id = b.upstream.pci.device_id;
          n.class_id = b.upstream.pci.class_id;
          n.link_gbps = b.upstream.pci.linkspeed * 8;
        }
      } else {
        const auto& p = obj->attr->pcidev;
        n.kind = PciKind::kDevice;
        n.bus_id = BusId(p);
        n.vendor_id = p.vendor_id;
        n.device_id = p.device_id;
        n.class_id = p.class_id;
        n.link_gbps = p.linkspeed * 8;
      }
      if (parent < 0) {
        hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(t_, obj);
        n.numa_node = cpu_side ? NumaOfNodeset(cpu_side->nodeset) : -1;
      } else {
        n.numa_node = out_->pci[parent].numa_node;
      }
      out_->pci.push_back(n);
      me = static_cast<int>(out_->pci.size()) - 1;
      if (obj->type == HWLOC_OBJ_PCI_DEVICE) Device(obj, me);
    }
    for (hwloc_obj_t c = obj->io_first_child; c != nullptr; c = c->next_sibling) IoObject(c, me);
  }

  // NICs and GPUs of one PCI device (`pci` is its node).
  void Device(hwloc_obj_t dev, int pci) {
    const PciNode& node = out_->pci[pci];
    std::vector<hwloc_obj_t> verbs, nets, coprocs, gpus;
    for (hwloc_obj_t c = dev->io_first_child; c != nullptr; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
      switch (c->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_OPENFABRICS: verbs.push_back(c); break;
        case HWLOC_OBJ_OSDEV_NETWORK: nets.push_back(c); break;
        case HWLOC_OBJ_OSDEV_COPROC: coprocs.push_back(c); break;
        case HWLOC_OBJ_OSDEV_GPU: gpus.push_back(c); break;
        default: break;
      }
    }
    for (size_t i = 0; i < verbs.size(); ++i) {
      Nic n;
      n.name = n.verbs_name = verbs[i]->name;
      if (i < nets.size()) n.netdev = nets[i]->name;
      n.bus_id = node.bus_id;
      n.pci = pci;
      n.numa_node = node.numa_node;
      for (int port = 1; port < 64; ++port) {
        const std::string key = "Port" + std::to_string(port) + "State";
        if (Info(verbs[i], key.c_str()).empty()) break;
        n.ports = port;
      }
      out_->nics.push_back(std::move(n));
    }
    for (size_t i = verbs.size(); i < nets.size(); ++i) {
      Nic n;
      n.name = n.netdev = nets[i]->name;
      n.bus_id = node.bus_id;
      n.pci = pci;
      n.numa_node = node.numa_node;
      out_->nics.push_back(std::move(n));
    }
    const int base = node.class_id >> 8;
    const bool gpu_class = node.class_id == 0x0302 || node.class_id == 0x0380 ||
                           (base == 0x03 && (node.vendor_id == 0x10de || node.vendor_id == 0x1002));
    if (gpu_class || !coprocs.empty()) {
      Gpu g;
      g.bus_id = node.bus_id;
      g.pci = pci;
      g.numa_node = node.numa_node;
      g.vendor_id = node.vendor_id;
      g.device_id = node.device_id;
      // The most useful name: CUDA/OpenCL/... index first, then NVML, DRM.
      if (!coprocs.empty()) {
        g.name = coprocs[0]->name;
      } else if (!gpus.empty()) {
        g.name = gpus[0]->name;
      }
      out_->gpus.push_back(std::move(g));
    }
  }

  hwloc_topology_t t_;
  Topology* out_;
};

// Creates, configures (I/O kept) and loads a topology; `setup` picks the
// source. Returns the hwloc error text on failure.
StatusOr<Topology> LoadWith(const std::string& source, int (*setup)(hwloc_topology_t, const void*),
                            const void* arg, StatusCode error_code, const std::string& what) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return UnavailableError("hwloc_topology_init failed");
  HwlocPtr t(raw);
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (setup != nullptr && setup(raw, arg) != 0) {
    return Status(error_code, what + ": " + std::strerror(errno));
  }
  if (hwloc_topology_load(raw) != 0) {
    return Status(error_code, what + ": hwloc could not load it (" + std::strerror(errno) + ")");
  }
  Topology out;
  out.source = source;
  Builder(raw, &out).Run();
  if (out.cores.empty()) return Status(error_code, what + ": no CPU in the topology");
  return out;
}

}  // namespace

bool HaveHwloc() { return true; }

StatusOr<Topology> DiscoverLive() {
  CIUIC_ASSIGN_OR_RETURN(Topology t,
                         LoadWith("hwloc", nullptr, nullptr, StatusCode::kUnavailable, "live discovery"));
  internal::AddSysfsVerbsDevices("/", &t);
  CIUIC_RETURN_IF_ERROR(internal::Finish(&t));
  CIUIC_LOG(kInfo, "topology: %s", t.Summary().c_str());
  return t;
}

StatusOr<Topology> LoadXmlString(const std::string& xml, const std::string& name) {
  if (xml.find("<topology") == std::string::npos) {
    return DataLossError(name + ": not an hwloc XML topology (no <topology> element)");
  }
  CIUIC_ASSIGN_OR_RETURN(
      Topology t, LoadWith("hwloc-xml:" + name,
                           [](hwloc_topology_t t, const void* arg) {
                             const std::string* s = static_cast<const std::string*>(arg);
                             // The length counts the terminating NUL.
                             return hwloc_topology_set_xmlbuffer(t, s->c_str(),
                                                                 static_cast<int>(s->size() + 1));
                           },
                           &xml, StatusCode::kDataLoss, name + ": not a valid hwloc XML topology"));
  // hwloc accepts some inconsistent files (it warns of an out-of-order
  // load and keeps a CPU in two cores): the file is at fault, not a loader.
  if (Status s = internal::Finish(&t); !s.ok()) {
    return DataLossError(name + ": an inconsistent hwloc XML topology: " + s.message());
  }
  return t;
}

namespace {

// The child's exit codes; anything else (a signal, a sanitizer's report) is
// a crash.
constexpr int kTrialLoaded = 0;
constexpr int kTrialRefused = 3;
constexpr int kTrialSeconds = 10;

// hwloc's XML importers are not hardened against malformed files: fuzzing
// found hwloc 2.9's built-in one dying of SIGSEGV on some. A file a user
// names is parsed first in a child process, so that a crash or a hang there
// is an error naming the file, not the end of the job. (A fork of a threaded
// process: the child only parses; hwloc's own lock could at worst make a
// valid file a timeout, and topology is read before any transport exists.)
Status TrialParseInChild(const std::string& xml, const std::string& path) {
  const pid_t pid = fork();
  if (pid < 0) {
    CIUIC_LOG(kWarn, "topology file %s: fork for a trial parse failed (%s); parsing it in this process",
              path.c_str(), std::strerror(errno));
    return Status::Ok();
  }
  if (pid == 0) {
    // The host's crash handlers (Python's faulthandler, torch's) would
    // report the expected crash as its own; hwloc's warnings come again
    // from the real parse.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, SIG_DFL);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, STDERR_FILENO);
    _exit(LoadXmlString(xml, path).ok() ? kTrialLoaded : kTrialRefused);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kTrialSeconds);
  timespec nap{0, 1000000};
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      // ECHILD: the host reaps children itself (SIGCHLD ignored, or a
      // handler waiting for any child took the status). The guard lapses:
      // the file is parsed in this process as without it.
      CIUIC_LOG(kWarn, "topology file %s: the trial parse's outcome is unknown (%s); parsing it in this process",
                path.c_str(), std::strerror(errno));
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return DeadlineExceededError("topology file " + path + ": hwloc did not finish parsing it within " +
                                   std::to_string(kTrialSeconds) + " s");
    }
    nanosleep(&nap, nullptr);
    nap.tv_nsec = std::min<long>(nap.tv_nsec * 2, 20000000);
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == kTrialLoaded || WEXITSTATUS(status) == kTrialRefused)) {
    return Status::Ok();
  }
  const std::string how = WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) + " (" +
                                                    strsignal(WTERMSIG(status)) + ")"
                                              : "exit status " + std::to_string(WEXITSTATUS(status));
  return DataLossError("topology file " + path + ": hwloc crashed parsing it (" + how +
                       " in a trial parse in a child process): the file is malformed");
}

}  // namespace

StatusOr<Topology> LoadXmlFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFoundError("topology file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("topology file " + path + ": not a regular file");
  std::string xml;
  if (!internal::ReadFileToString(path, &xml)) {
    return UnavailableError("topology file " + path + ": cannot read it");
  }
  if (xml.size() > (static_cast<size_t>(1) << 30)) return InvalidArgumentError("topology file " + path + ": larger than 1 GiB");
  // (Text without <topology is refused by LoadXmlString before hwloc sees it.)
  if (xml.find("<topology") != std::string::npos) CIUIC_RETURN_IF_ERROR(TrialParseInChild(xml, path));
  return LoadXmlString(xml, path);
}

}  // namespace topology
}  // namespace ciuic
