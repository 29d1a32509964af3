// Pool memory for the tcp and verbs backends. The mapping, huge pages and
// the NUMA policy come from topology::AllocateNumaBuffer (asked not to
// prefault or lock); pre-faulting and locking are done here, because
// MADV_POPULATE_WRITE faults a range in one system call instead of one trap
// per page, and because a refused mlock should be said once per process,
// not once per pool.
#include "transport/pinned_memory.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace ciuic::transport {
namespace {

// The OS indices of the NUMA nodes /sys lists, ascending (empty when the
// kernel has no NUMA support or /sys is not mounted).
std::vector<int> OnlineNumaNodes() {
  std::vector<int> nodes;
  DIR* dir = ::opendir("/sys/devices/system/node");
  if (dir == nullptr) return nodes;
  while (const dirent* e = ::readdir(dir)) {
    const char* name = e->d_name;
    if (std::strncmp(name, "node", 4) != 0 || name[4] < '0' || name[4] > '9') continue;
    char* end = nullptr;
    const long n = std::strtol(name + 4, &end, 10);
    if (*end == '\0' && n >= 0 && n < (1 << 16)) nodes.push_back(static_cast<int>(n));
  }
  ::closedir(dir);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

std::string JoinNodes(const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += (s.empty() ? "" : ",") + std::to_string(n);
  return s.empty() ? "none" : s;
}

// Faults every page of [p, p+len) in for writing. Errors:
// kResourceExhausted when the kernel has no memory for them (under bind,
// touching instead would summon the OOM killer).
Status Prefault(void* p, size_t len, size_t step) {
  if (::madvise(p, len, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  const int err = errno;
  if (err == ENOMEM || err == EFAULT || err == EHWPOISON) {
    return ResourceExhaustedError("cannot fault in " + std::to_string(len) +
                                  " bytes of pool memory: " + std::strerror(err));
  }
  // EINVAL: a kernel older than 5.14. Touch each page instead.
  volatile uint8_t* c = static_cast<volatile uint8_t*>(p);
  for (size_t off = 0; off < len; off += step) c[off] = 0;
  return Status::Ok();
}

std::atomic<bool> g_mlock_refusal_logged{false};

}  // namespace

StatusOr<PinnedBuffer> AllocatePinned(size_t bytes, int numa_node, const Config& config, bool lock) {
  if (bytes == 0) return InvalidArgumentError("AllocatePinned: 0 bytes");
  if (bytes > (SIZE_MAX >> 2)) {
    return InvalidArgumentError("AllocatePinned: absurd size " + std::to_string(bytes) + " bytes");
  }
  if (numa_node < -1) {
    return InvalidArgumentError("AllocatePinned: NUMA node " + std::to_string(numa_node) +
                                " (expected -1 or an OS node index)");
  }
  topology::NumaPolicy policy = topology::NumaPolicy::kPreferred;
  if (!config.numa_policy.empty()) {
    auto parsed = topology::ParseNumaPolicy(config.numa_policy);
    if (!parsed.ok()) return InvalidArgumentError("CIUIC_NUMA_POLICY: " + parsed.status().message());
    policy = *parsed;
  }

  // A topology of just the nodes (by OS index) is all AllocateNumaBuffer
  // needs: the node to bind to, and every node for interleave. Without
  // /sys NUMA information a requested node stands alone.
  std::vector<int> nodes = OnlineNumaNodes();
  if (nodes.empty() && numa_node >= 0) nodes.push_back(numa_node);
  topology::Topology topo;
  topo.source = "sysfs nodes";
  topology::MemoryOptions options;
  for (int os : nodes) {
    if (os == numa_node) options.numa_node = static_cast<int>(topo.numa_nodes.size());
    topology::NumaNode node;
    node.os_index = os;
    topo.numa_nodes.push_back(node);
  }
  if (numa_node >= 0 && options.numa_node < 0) {
    return InvalidArgumentError("AllocatePinned: no NUMA node " + std::to_string(numa_node) +
                                " on this machine (nodes: " + JoinNodes(nodes) + ")");
  }
  options.policy = policy;
  options.huge_pages = true;
  options.lock = false;      // below, logged once
  options.prefault = false;  // below, with MADV_POPULATE_WRITE

  auto numa = topology::AllocateNumaBuffer(topo, bytes, options);
  if (!numa.ok()) return numa.status();
  PinnedBuffer b;
  b.buffer_ = std::move(*numa);
  b.numa_node_ = numa_node;

  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t step = b.buffer_.hugetlb() ? (2u << 20) : page;
  CIUIC_RETURN_IF_ERROR(Prefault(b.buffer_.data(), b.buffer_.mapped(), step));

  if (lock) {
    if (::mlock(b.buffer_.data(), b.buffer_.mapped()) == 0) {
      b.locked_ = true;
    } else if (!g_mlock_refusal_logged.exchange(true)) {
      const int err = errno;
      struct rlimit rl{};
      ::getrlimit(RLIMIT_MEMLOCK, &rl);
      const std::string limit =
          rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_cur) + " bytes";
      CIUIC_LOG(kInfo,
                "pool memory: mlock of %zu bytes refused (%s; RLIMIT_MEMLOCK %s): pool memory stays "
                "pageable (said once)",
                b.buffer_.mapped(), std::strerror(err), limit.c_str());
    }
  }
  return b;
}

int DeviceNumaNode(const std::string& sysfs_device_dir) {
  std::ifstream f(sysfs_device_dir + "/numa_node");
  int node = -1;
  if (!(f >> node) || node < 0) return -1;
  return node;
}

}  // namespace ciuic::transport
