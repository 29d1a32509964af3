// ciuic::topology: what the machine looks like (packages, NUMA nodes, cores,
// caches, PCI devices: NICs and GPUs) and the placement decisions that follow
// from it (nearest NIC, pool NUMA node, progress-thread core, rank placement,
// cache sizes for the kernels), plus NUMA-bound pinned memory.
//
// A Topology is a plain value: discovered with hwloc (the live machine or a
// saved hwloc XML file, CIUIC_TOPO_FILE) or, when ciuic is built without hwloc
// (CIUIC_WITH_HWLOC=OFF), read from /sys. Tests may also build one by hand.
// Every decision is a pure function of a Topology (and its arguments), so the
// placement logic is tested on XML fixtures of machines we do not have.
// No hwloc types appear here.
//
// Indices: objects refer to each other by their position in the Topology's
// vectors ("index"); `os_index` is what the OS calls them (the number in
// /sys/devices/system/node/nodeN, the CPU number sched_setaffinity takes).
// CPUs are always named by OS index.
//
// Thread contract: Topology, Plan and the structs are values; the free
// functions are thread-safe. A NumaBuffer is owned by one thread at a time.
#ifndef CIUIC_TOPOLOGY_H_
#define CIUIC_TOPOLOGY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"

namespace ciuic {
namespace topology {

// Bytes of the caches one core sees. `llc` is what hwloc (or /sys) reports
// for the last-level cache above the first core: in a VM this is often the
// host's whole L3, not one core's share (see llc_cpus). The kernels take
// these through kernels::CacheSizes (converted in tools/ and collectives/).
struct CacheSizes {
  size_t l1d = 32 * 1024;
  size_t l2 = 1024 * 1024;
  size_t llc = 32 * 1024 * 1024;
  int llc_level = 3;     // 2 when the L2 is the last level
  int llc_cpus = 0;      // PUs sharing that LLC instance (0 = unknown)
  bool measured = false; // false: defaults, nothing was discovered
};

// One cache level as discovered (for printing).
struct CacheLevel {
  int level = 0;         // 1, 2, 3, 4
  char type = 'u';       // 'd' data, 'i' instruction, 'u' unified
  size_t size = 0;       // bytes of one instance
  int instances = 0;
  int cpus_per_instance = 0;
};

struct Package {
  int os_index = -1;
  std::vector<int> numa_nodes;  // indices
  std::vector<int> cores;       // indices
};

struct NumaNode {
  int os_index = -1;
  int package = -1;             // index; -1 when it spans packages/unknown
  uint64_t memory_bytes = 0;    // local memory (0 = unknown)
  uint64_t huge_pages_2m = 0;   // preallocated 2 MiB pages (hugetlbfs)
  std::vector<int> cpus;        // OS indices of its PUs (may be empty)
};

struct Core {
  int os_index = -1;
  int package = -1;             // index
  int numa_node = -1;           // index
  std::vector<int> cpus;        // OS indices of its PUs (hyperthreads)
};

enum class PciKind { kHostBridge, kBridge, kDevice };

// One node of the PCI tree. Host bridges are the roots; their attachment to
// the CPU side is `numa_node`.
struct PciNode {
  PciKind kind = PciKind::kDevice;
  int parent = -1;              // index in Topology::pci; -1 for a root
  std::string bus_id;           // "0000:17:00.0"; roots: "0000:[17-1f]"
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint16_t class_id = 0;        // 0x0207 InfiniBand, 0x0302 3D controller, ...
  int numa_node = -1;           // index; -1 unknown or several
  float link_gbps = 0;          // 0 = unknown
};

// A network device: an RDMA (verbs) device, with its netdev when it has one,
// or a plain netdev (TCP) when the machine has no RDMA device there.
struct Nic {
  std::string name;             // verbs name ("mlx5_0", "rxe0"), else netdev
  std::string verbs_name;       // "" for a netdev without verbs
  std::string netdev;           // "ib0", "ens1f0np0", "eth0"; "" unknown
  std::string bus_id;           // PCI bus id; "" for virtual (rxe, siw)
  int pci = -1;                 // index in Topology::pci; -1 not on PCI
  int numa_node = -1;           // index; -1 unknown
  int ports = 0;                // verbs ports seen (0 = unknown)
  bool rdma() const { return !verbs_name.empty(); }
};

struct Gpu {
  std::string name;             // "cuda0", "nvml0", "card1"; may be ""
  std::string bus_id;           // PCI bus id, "0000:1b:00.0"
  int pci = -1;                 // index in Topology::pci
  int numa_node = -1;           // index; -1 unknown
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
};

// How two things are connected, nearest first (the nvidia-smi topo -m and
// NCCL vocabulary):
//   X     the same object
//   PIX   through at most one PCIe switch (bridges below one common bridge)
//   PXB   through several PCIe bridges, not through a host bridge
//   PHB   through a host bridge (PCIe root complex)
//   NODE  within one NUMA node, across host bridges
//   SYS   across NUMA nodes (the inter-socket / SMP interconnect)
//   ?     unknown (no PCI locality information)
enum class Link { kSelf = 0, kPix, kPxb, kPhb, kNode, kSys, kUnknown };
const char* LinkName(Link link);

// The path between two endpoints: the relation, the number of edges through
// the PCI tree / CPU side, and the NUMA distance between their nodes (10 =
// local, as in the ACPI SLIT; 0 = unknown).
struct Path {
  Link link = Link::kUnknown;
  int hops = 0;
  int numa_distance = 0;
};

struct Endpoint {
  enum Kind { kGpu, kNic, kNuma, kCpu } kind;
  int index;  // Gpu/Nic/NUMA index; for kCpu the OS CPU number
};

class Topology {
 public:
  // Where this came from: "hwloc", "hwloc-xml:<path>", "sysfs", "manual".
  std::string source = "manual";
  std::string hostname;
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;
  std::vector<Core> cores;
  std::vector<PciNode> pci;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  CacheSizes caches;
  std::vector<CacheLevel> cache_levels;
  // Row-major numa_nodes.size()^2 distances (ACPI SLIT style; 10 = local).
  // Empty = unknown: NumaDistance() then says 10 same node, 20 otherwise.
  std::vector<uint32_t> numa_distances;

  // Every PU's OS index, ascending.
  std::vector<int> Cpus() const;
  // True when PCI locality was discovered (at least one PCI node).
  bool has_pci() const { return !pci.empty(); }
  // Index of the core holding OS CPU `cpu`, or -1.
  int CoreOfCpu(int cpu) const;
  // NUMA index of OS CPU `cpu`, or -1.
  int NumaOfCpu(int cpu) const;
  // NUMA index whose os_index is `os_index`, or -1.
  int NumaByOsIndex(int os_index) const;
  // Distance between NUMA indices a and b (see numa_distances); 0 when
  // either is -1 (unknown).
  int NumaDistance(int a, int b) const;
  // Index of the NIC whose name, verbs name or netdev is `name`, or -1.
  int FindNic(const std::string& name) const;
  // Index of the GPU with this PCI bus id (case-insensitive; a missing
  // "0000:" domain is accepted) or name ("cuda0"), or -1.
  int FindGpu(const std::string& bus_id_or_name) const;
  // Number of edges from PCI node `i` up to its root (a root is 0).
  int PciDepth(int i) const;

  // The path between two endpoints. Errors: kInvalidArgument for an index
  // out of range (named).
  StatusOr<Path> PathBetween(Endpoint a, Endpoint b) const;

  // Checks that the indices refer to existing objects (what loaders
  // guarantee; useful for hand-built topologies). Errors: kInvalidArgument.
  Status Validate() const;
  // One-paragraph human summary ("2 packages, 2 NUMA nodes, 112 cores...").
  std::string Summary() const;
};

// ---- Discovery --------------------------------------------------------------

// True when this build discovers with hwloc (CIUIC_WITH_HWLOC).
bool HaveHwloc();

// The live machine: hwloc with I/O discovery, or /sys without hwloc (and, in
// both cases, verbs devices without PCI, e.g. Soft-RoCE rxe0, from /sys).
// Errors: kUnavailable when discovery fails.
StatusOr<Topology> DiscoverLive();

// A saved hwloc XML topology (`lstopo --of xml`, hwloc v1 or v2 format).
// Errors: kNotFound (no such file, named), kDataLoss (not a valid hwloc XML,
// named; or hwloc crashed on it), kDeadlineExceeded (hwloc took over 10 s),
// kUnimplemented (built without hwloc). hwloc's XML importers are not
// hardened against malformed files, so the file is parsed first in a
// forked child: a crash there is this error, not the caller's. (Where the
// process reaps its children itself, SIGCHLD ignored, the guard lapses.)
StatusOr<Topology> LoadXmlFile(const std::string& path);
// The same from XML text; `name` is used in messages.
StatusOr<Topology> LoadXmlString(const std::string& xml, const std::string& name = "<string>");

// Reads /sys under `root` ("/" normally; tests point it at a fake tree):
// CPUs, cores, packages, NUMA nodes (with distances), caches, PCI devices of
// NICs and GPUs with their bridge chain. The /sys fallback of builds without
// hwloc; always compiled. Errors: kUnavailable when no CPU is found.
StatusOr<Topology> LoadSysfs(const std::string& root = "/");

// CIUIC_TOPO_FILE when set (errors name the variable), else DiscoverLive().
StatusOr<Topology> Discover(const Config& config);
// What a communicator plans from (and ciuic-topo's rank plans): the
// CIUIC_TOPO_FILE when set (errors name the variable), else /sys
// (LoadSysfs: NICs and GPUs with their PCI chain in about a millisecond,
// where hwloc's I/O discovery takes tens).
StatusOr<Topology> DiscoverForPlans(const Config& config);

// ---- Decisions --------------------------------------------------------------

// The NICs CIUIC_IB_HCA allows, as indices into topo.nics, in topology order.
// Syntax (as NCCL_IB_HCA): comma-separated `name[:port]`; names match as
// prefixes unless the list starts with "="; a leading "^" excludes the listed
// NICs instead. Empty spec: every RDMA NIC, or, when the machine has none,
// every netdev NIC (TCP candidates).
// Errors: kInvalidArgument for bad syntax; kNotFound for an included name
// that matches no NIC (the message names it and lists the NICs there are).
StatusOr<std::vector<int>> SelectNics(const Topology& topo, const std::string& hca_spec);

// The candidate NICs nearest to a GPU (by Link, then hops), a NUMA node or a
// CPU (by NUMA distance). Several NICs are returned when they tie (stripe
// across them), in topology order. Errors: kInvalidArgument (bad index,
// named), kNotFound (no candidates).
StatusOr<std::vector<int>> NearestNicsToGpu(const Topology& topo, int gpu,
                                            const std::vector<int>& candidates);
StatusOr<std::vector<int>> NearestNicsToNuma(const Topology& topo, int numa,
                                             const std::vector<int>& candidates);
StatusOr<std::vector<int>> NearestNicsToCpu(const Topology& topo, int cpu,
                                            const std::vector<int>& candidates);

// The NUMA node (index) on which to allocate NIC `nic`'s buffer pool: its
// own node when that node has memory, else the nearest node with memory; -1
// when the NIC's locality is unknown and there are several nodes (then
// allocate with first touch on the progress thread).
// Errors: kInvalidArgument (bad index).
StatusOr<int> PoolNumaNode(const Topology& topo, int nic);

// The CPU (OS index) on which to pin the progress thread serving NIC `nic`
// (-1: no NIC, any node): a CPU on the NIC's NUMA node that no rank uses
// (`rank_cpus`), preferring a core none of whose PUs a rank uses and the
// highest-numbered such core (ranks fill from the lowest); then the nearest
// other node's free CPU; when every CPU is taken, the NIC-local CPU whose
// core is least shared, with `shared` set.
struct ProgressChoice {
  int cpu = -1;
  bool shared = false;  // every CPU is used by a rank
};
StatusOr<ProgressChoice> ProgressCpu(const Topology& topo, int nic,
                                     const std::vector<int>& rank_cpus);

// Where local rank `rank` of `nranks` runs.
struct RankPlacement {
  int rank = 0;
  int numa_node = -1;        // index
  std::vector<int> cpus;     // OS indices to bind to (whole cores)
  int gpu = -1;              // index; -1 for a CPU rank
  std::vector<int> nics;     // nearest allowed NICs, this rank's first
  bool oversubscribed = false;  // shares its cores with another rank
};

// Places `nranks` local ranks. With GPUs (`use_gpus` and nranks <= GPUs):
// rank k drives GPU k, runs on that GPU's NUMA node (when every such node
// is known and has cores) and uses its nearest NICs. Otherwise ranks are
// spread over NUMA nodes in proportion to their cores, consecutive ranks on
// one node, the first nodes filled first. Each rank gets an equal,
// disjoint block of whole cores (shared round-robin when there are more ranks
// than cores); on a node with an allowed NIC the highest cores are left free
// for progress threads (one per rank when the node has at least twice as
// many cores as ranks, else one when it has more cores than ranks).
// Tied NICs are rotated so that ranks sharing them start on different ones.
// Errors: kInvalidArgument (nranks < 1, no CPUs), kNotFound (no NICs allowed
// is not an error: `nics` is then empty).
StatusOr<std::vector<RankPlacement>> PlaceRanks(const Topology& topo, int nranks,
                                                const std::vector<int>& allowed_nics,
                                                bool use_gpus = true);

// The cache sizes kernels/ tiles with (topo.caches; defaults when unknown).
CacheSizes KernelCacheSizes(const Topology& topo);

// ---- Memory -----------------------------------------------------------------

// CIUIC_NUMA_POLICY: how pool memory is bound to its NUMA node.
//   bind       only that node (allocation fails when it is full)
//   preferred  that node first, others when it is full (default)
//   interleave pages spread over all nodes (ignores the node)
//   local      no policy: first touch by the allocating thread
enum class NumaPolicy { kBind, kPreferred, kInterleave, kLocal };
// Errors: kInvalidArgument naming the accepted values.
StatusOr<NumaPolicy> ParseNumaPolicy(const std::string& text);
const char* NumaPolicyName(NumaPolicy policy);

struct MemoryOptions {
  int numa_node = -1;   // index in the Topology; -1 = no binding
  NumaPolicy policy = NumaPolicy::kPreferred;
  bool huge_pages = true;  // hugetlbfs 2 MiB pages, else THP (madvise)
  bool lock = true;        // mlock (pinned); fallback: unlocked, noted
  bool prefault = true;    // touch every page now, after the policy is set
};

// Page-aligned anonymous memory bound to a NUMA node, optionally on huge
// pages and locked. The fallbacks (no hugetlbfs pages, mlock refused,
// mbind unavailable) are taken silently but recorded: see the accessors and
// notes(). Move-only; frees on destruction.
class NumaBuffer {
 public:
  NumaBuffer() = default;
  NumaBuffer(NumaBuffer&& other) noexcept;
  NumaBuffer& operator=(NumaBuffer&& other) noexcept;
  NumaBuffer(const NumaBuffer&) = delete;
  NumaBuffer& operator=(const NumaBuffer&) = delete;
  ~NumaBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }        // as requested
  size_t mapped() const { return mapped_; }    // rounded up to the page size
  bool hugetlb() const { return hugetlb_; }    // backed by hugetlbfs pages
  bool thp() const { return thp_; }            // transparent huge pages asked
  bool locked() const { return locked_; }
  bool bound() const { return bound_; }        // the NUMA policy is in force
  int numa_node() const { return numa_node_; } // index asked for (-1 none)
  const std::string& notes() const { return notes_; }

 private:
  friend StatusOr<NumaBuffer> AllocateNumaBuffer(const Topology&, size_t, const MemoryOptions&);
  void Release();
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
  bool hugetlb_ = false;
  bool thp_ = false;
  bool locked_ = false;
  bool bound_ = false;
  int numa_node_ = -1;
  std::string notes_;
};

// Allocates `bytes` (> 0) as described by `options`; `topo` resolves the
// node index to the OS node and its CPUs (when the kernel refuses mbind the
// pages are first-touched from a thread pinned to that node's CPUs).
// Errors: kInvalidArgument (0 bytes, node not in topo), kResourceExhausted
// (out of memory, or the node is full under kBind).
StatusOr<NumaBuffer> AllocateNumaBuffer(const Topology& topo, size_t bytes,
                                        const MemoryOptions& options);

// The OS index of the NUMA node holding the page at `addr` (touched memory).
// Errors: kUnavailable when the kernel does not tell (no get_mempolicy).
StatusOr<int> NumaNodeOfAddress(const void* addr);

// Pins the calling thread to OS CPU `cpu`. Errors: kInvalidArgument.
Status BindThisThreadToCpu(int cpu);

// ---- The plan ciuic-topo prints and the communicator applies -----------------

struct NicChoice {
  int nic = -1;             // index
  int pool_numa_node = -1;  // index; -1 = first touch
};

struct Plan {
  std::vector<int> allowed_nics;         // after CIUIC_IB_HCA
  std::vector<RankPlacement> ranks;
  // Per rank: its progress thread's CPU (near its first NIC, else its node;
  // -1 = not pinned, CIUIC_PROGRESS_CPU=none). Two ranks share a progress
  // CPU only when no free CPU is left.
  std::vector<ProgressChoice> progress;
  std::vector<NicChoice> nics;           // every NIC some rank uses
  NumaPolicy numa_policy = NumaPolicy::kPreferred;
  CacheSizes caches;
};

// Applies CIUIC_IB_HCA, CIUIC_PROGRESS_CPU and CIUIC_NUMA_POLICY to the
// decisions above for `nranks` local ranks.
// Errors: those of SelectNics / PlaceRanks; kInvalidArgument when
// CIUIC_PROGRESS_CPU names a CPU this topology does not have.
StatusOr<Plan> MakePlan(const Topology& topo, const Config& config, int nranks);

// ---- One rank's plan: what its communicator applies ---------------------------

// The ranks of one machine, as a rank's plan needs them (index = local
// rank, in rank order).
struct LocalJob {
  std::vector<std::vector<int>> cpus;  // each local rank's CPUs (OS indices); empty: unknown
  std::vector<int> gpus;               // the GPU (index) of each local rank, -1 none; empty: none
  // The transport: "shm" (no NIC), "tcp" (netdevs) or "verbs" (RDMA NICs).
  std::string transport = "verbs";
};

// What one rank's communicator applies, decided from the topology alone:
// ciuic-topo prints it and the communicator applies it (a test holds the
// two equal on every fixture).
struct RankPlan {
  int local_rank = 0;
  int local_size = 1;
  std::string transport;
  std::vector<int> cpus;   // its CPUs (its affinity within the topology; all when unknown)
  int numa_node = -1;      // index of the node holding most of them
  int gpu = -1;            // index, the GPU whose NIC it uses; -1 for a CPU rank or shm
  int nic = -1;            // index; -1: none (shm, or CIUIC_SOCKET_IFNAME decides)
  std::string device;      // verbs: the RDMA device to open ("mlx5_3"), else ""
  std::string netdev;      // tcp: the interface to use, else ""
  int pool_numa_os = -1;   // OS node of the buffer pools; -1 first touch
  // The progress thread's CPUs (CIUIC_PROGRESS_CPU): auto picks one CPU no
  // local rank and no lower local rank's progress thread uses, near the NIC
  // (else the rank's node), a whole free core first and the highest core;
  // when none is free the thread stays on the rank's CPUs (`shared`); a
  // number is that CPU; none (empty) leaves the thread as it starts.
  std::vector<int> progress_cpus;
  bool progress_shared = false;
  CacheSizes caches;       // what the kernels tile with
  std::string why;         // one line: how the NIC and the progress CPU were chosen
};

// The plan of local rank `r` of `job` on `topo` under `config`
// (CIUIC_IB_HCA, CIUIC_SOCKET_IFNAME, CIUIC_PROGRESS_CPU). Pure: the same
// inputs give the same plan on any machine. Errors: kInvalidArgument (r out
// of range, CIUIC_PROGRESS_CPU not in the topology, an unknown transport),
// those of SelectNics.
StatusOr<RankPlan> PlanRank(const Topology& topo, const Config& config, const LocalJob& job, int r);

// The job ciuic-topo assumes for `nranks` local ranks: PlaceRanks' CPUs and,
// with `use_gpus`, GPU k for rank k. Errors: those of PlaceRanks and
// SelectNics.
StatusOr<LocalJob> PlacedJob(const Topology& topo, const Config& config, int nranks, bool use_gpus,
                             const std::string& transport);

// A plan as one line of JSON (OS indices and names): what ciuic-topo prints
// per rank and the communicator logs. Two plans are equal when these are.
std::string FormatRankPlan(const Topology& topo, const RankPlan& plan);

// Parses "0-3,8,10-11" (empty: no CPU). Errors: kInvalidArgument.
StatusOr<std::vector<int>> ParseCpuList(const std::string& text);

// Formats "0-3,8,10-11".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace topology
}  // namespace ciuic

#endif  // CIUIC_TOPOLOGY_H_
