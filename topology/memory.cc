// NUMA-bound, pinned memory for buffer pools.
//
// Order matters for first touch: map, set the NUMA policy on the range
// (mbind), then fault every page in (prefault), then mlock. Pages are placed
// when first touched, so setting the policy before touching is what puts
// them on the pool's node whichever thread touches them. When the kernel
// refuses mbind (seccomp, a topology file of another machine) the pages are
// touched from a helper thread pinned to the node's CPUs instead.
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "ciuic/topology.h"
#include "common/log.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {
namespace {

// From <linux/mempolicy.h>; called through syscall() so that no libnuma is
// needed.
constexpr int kMpolPreferred = 1;
constexpr int kMpolBind = 2;
constexpr int kMpolInterleave = 3;
constexpr int kMpolFNode = 1 << 0;
constexpr int kMpolFAddr = 1 << 1;
constexpr size_t kHugePage = 2u << 20;
constexpr unsigned long kMaxNodes = 1024;

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

void AddNote(std::string* notes, const std::string& note) {
  if (!notes->empty()) *notes += "; ";
  *notes += note;
}

void Touch(void* p, size_t bytes, size_t step) {
  volatile char* c = static_cast<volatile char*>(p);
  for (size_t off = 0; off < bytes; off += step) c[off] = 0;
}

// Free bytes on OS node `os` per /sys, or 0 when unknown.
uint64_t NodeFreeBytes(int os) {
  std::string meminfo;
  if (!internal::ReadFileToString("/sys/devices/system/node/node" + std::to_string(os) + "/meminfo", &meminfo)) {
    return 0;
  }
  const size_t p = meminfo.find("MemFree:");
  if (p == std::string::npos) return 0;
  return std::strtoull(meminfo.c_str() + p + 8, nullptr, 10) * 1024;
}

}  // namespace

StatusOr<NumaPolicy> ParseNumaPolicy(const std::string& text) {
  if (text == "bind") return NumaPolicy::kBind;
  if (text == "preferred") return NumaPolicy::kPreferred;
  if (text == "interleave") return NumaPolicy::kInterleave;
  if (text == "local") return NumaPolicy::kLocal;
  return InvalidArgumentError("'" + text + "': expected bind, preferred, interleave or local");
}

const char* NumaPolicyName(NumaPolicy p) {
  switch (p) {
    case NumaPolicy::kBind: return "bind";
    case NumaPolicy::kPreferred: return "preferred";
    case NumaPolicy::kInterleave: return "interleave";
    case NumaPolicy::kLocal: return "local";
  }
  return "?";
}

NumaBuffer::NumaBuffer(NumaBuffer&& o) noexcept { *this = std::move(o); }

NumaBuffer& NumaBuffer::operator=(NumaBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    hugetlb_ = o.hugetlb_;
    thp_ = o.thp_;
    locked_ = o.locked_;
    bound_ = o.bound_;
    numa_node_ = o.numa_node_;
    notes_ = std::move(o.notes_);
    o.data_ = nullptr;
    o.size_ = o.mapped_ = 0;
  }
  return *this;
}

NumaBuffer::~NumaBuffer() { Release(); }

void NumaBuffer::Release() {
  if (data_ == nullptr) return;
  if (locked_) ::munlock(data_, mapped_);
  ::munmap(data_, mapped_);
  data_ = nullptr;
}

StatusOr<NumaBuffer> AllocateNumaBuffer(const Topology& topo, size_t bytes, const MemoryOptions& opt) {
  if (bytes == 0) return InvalidArgumentError("AllocateNumaBuffer: 0 bytes");
  if (opt.numa_node < -1 || opt.numa_node >= static_cast<int>(topo.numa_nodes.size())) {
    return InvalidArgumentError("AllocateNumaBuffer: no NUMA node " + std::to_string(opt.numa_node) + " in " +
                                topo.source + " (" + std::to_string(topo.numa_nodes.size()) + " nodes)");
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  NumaBuffer b;
  b.size_ = bytes;
  b.numa_node_ = opt.numa_node;
  const int os_node = opt.numa_node >= 0 ? topo.numa_nodes[opt.numa_node].os_index : -1;

  if (opt.policy == NumaPolicy::kBind && os_node >= 0) {
    const uint64_t free_bytes = NodeFreeBytes(os_node);
    if (free_bytes > 0 && bytes > free_bytes) {
      return ResourceExhaustedError("AllocateNumaBuffer: " + std::to_string(bytes) + " bytes bound to NUMA node " +
                                    std::to_string(os_node) + " but only " + std::to_string(free_bytes) +
                                    " are free there (CIUIC_NUMA_POLICY=bind)");
    }
  }

  // 1. Map: hugetlbfs pages when there are some, else normal pages aligned
  // to 2 MiB with transparent huge pages requested.
  if (opt.huge_pages && bytes >= kHugePage) {
    const size_t len = RoundUp(bytes, kHugePage);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      b.data_ = p;
      b.mapped_ = len;
      b.hugetlb_ = true;
    }
  }
  if (b.data_ == nullptr) {
    const bool huge = opt.huge_pages && bytes >= kHugePage;
    const size_t len = RoundUp(bytes, huge ? kHugePage : page);
    const size_t extra = huge ? kHugePage : 0;
    void* p = ::mmap(nullptr, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhaustedError("AllocateNumaBuffer: mmap of " + std::to_string(len) +
                                    " bytes failed: " + std::strerror(errno));
    }
    char* start = static_cast<char*>(p);
    if (extra > 0) {  // trim to a 2 MiB boundary so THP can back it
      char* aligned = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(start), kHugePage));
      if (aligned > start) ::munmap(start, static_cast<size_t>(aligned - start));
      const size_t tail = static_cast<size_t>(start + len + extra - (aligned + len));
      if (tail > 0) ::munmap(aligned + len, tail);
      start = aligned;
    }
    b.data_ = start;
    b.mapped_ = len;
    if (huge) {
      if (::madvise(start, len, MADV_HUGEPAGE) == 0) {
        b.thp_ = true;
        AddNote(&b.notes_, "no hugetlbfs pages: transparent huge pages requested");
      } else {
        AddNote(&b.notes_, std::string("no huge pages (madvise: ") + std::strerror(errno) + ")");
      }
    }
  }

  // 2. NUMA policy on the still untouched range.
  bool bound = false;
  if (opt.policy != NumaPolicy::kLocal && (os_node >= 0 || opt.policy == NumaPolicy::kInterleave)) {
    unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
    auto set_bit = [&mask](int os) {
      if (os >= 0 && static_cast<unsigned long>(os) < kMaxNodes) {
        mask[os / (8 * sizeof(unsigned long))] |= 1ul << (os % (8 * sizeof(unsigned long)));
      }
    };
    int mode = kMpolPreferred;
    if (opt.policy == NumaPolicy::kInterleave) {
      mode = kMpolInterleave;
      for (const NumaNode& n : topo.numa_nodes) set_bit(n.os_index);
    } else {
      mode = opt.policy == NumaPolicy::kBind ? kMpolBind : kMpolPreferred;
      set_bit(os_node);
    }
    if (::syscall(SYS_mbind, b.data_, b.mapped_, mode, mask, kMaxNodes, 0) == 0) {
      bound = true;
    } else {
      AddNote(&b.notes_, std::string("mbind refused (") + std::strerror(errno) + "): " +
                             (os_node >= 0 ? "first touch from the node's CPUs" : "no interleaving"));
    }
  }
  b.bound_ = bound;

  // 3. Fault the pages in: from here when the policy holds (or none was
  // asked for), else from a thread on the node's CPUs.
  const size_t step = b.hugetlb_ ? kHugePage : page;
  if (opt.prefault) {
    const bool pin_toucher = !bound && os_node >= 0 && opt.policy != NumaPolicy::kInterleave &&
                             !topo.numa_nodes[opt.numa_node].cpus.empty();
    if (pin_toucher) {
      const std::vector<int>& cpus = topo.numa_nodes[opt.numa_node].cpus;
      bool pinned = false;
      std::thread toucher([&] {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cpus) {
          if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
        }
        pinned = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0;
        Touch(b.data_, b.mapped_, step);
      });
      toucher.join();
      if (!pinned) AddNote(&b.notes_, "the node's CPUs are not on this machine: placed by the kernel");
    } else {
      Touch(b.data_, b.mapped_, step);
    }
  }

  // 4. Pin.
  if (opt.lock) {
    if (::mlock(b.data_, b.mapped_) == 0) {
      b.locked_ = true;
    } else {
      const int err = errno;
      struct rlimit rl{};
      ::getrlimit(RLIMIT_MEMLOCK, &rl);
      AddNote(&b.notes_, std::string("mlock refused (") + std::strerror(err) + ", RLIMIT_MEMLOCK " +
                             (rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur)) +
                             "): not pinned");
    }
  }
  if (!b.notes_.empty()) CIUIC_LOG(kInfo, "numa buffer of %zu bytes: %s", bytes, b.notes_.c_str());
  return b;
}

StatusOr<int> NumaNodeOfAddress(const void* addr) {
  int node = -1;
  if (::syscall(SYS_get_mempolicy, &node, nullptr, 0, const_cast<void*>(addr), kMpolFNode | kMpolFAddr) != 0) {
    return UnavailableError(std::string("get_mempolicy: ") + std::strerror(errno));
  }
  return node;
}

Status BindThisThreadToCpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return InvalidArgumentError("no CPU " + std::to_string(cpu));
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
  if (rc != 0) return InvalidArgumentError("cannot bind to CPU " + std::to_string(cpu) + ": " + std::strerror(rc));
  return Status::Ok();
}

}  // namespace topology
}  // namespace ciuic
