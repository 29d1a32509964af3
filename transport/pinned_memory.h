// Private: the pool memory of the tcp and verbs backends (Backend::Allocate):
// page-aligned anonymous memory, on huge pages where available, placed on a
// NUMA node by CIUIC_NUMA_POLICY, pre-faulted and (optionally) mlocked. One
// implementation for both backends; the NUMA work itself is topology's
// AllocateNumaBuffer. shm keeps its own memfd segments.
//
// Thread contract: AllocatePinned and DeviceNumaNode are thread-safe; a
// PinnedBuffer is owned by one thread at a time.
#ifndef CIUIC_TRANSPORT_PINNED_MEMORY_H_
#define CIUIC_TRANSPORT_PINNED_MEMORY_H_

#include <cstddef>
#include <string>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/topology.h"

namespace ciuic::transport {

// Owns the memory AllocatePinned returned; unmaps it on destruction (which
// also unlocks it). Move-only. An empty one (default-constructed or moved
// from) holds nothing.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&&) noexcept = default;
  PinnedBuffer& operator=(PinnedBuffer&&) noexcept = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() = default;

  void* data() const { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }      // as requested
  size_t mapped() const { return buffer_.mapped(); }  // rounded up to the page size
  bool huge_pages() const { return buffer_.hugetlb() || buffer_.thp(); }
  bool locked() const { return locked_; }
  // The OS NUMA node asked for (-1: none, first touch by the caller).
  int numa_node() const { return numa_node_; }
  // True when the NUMA policy is in force on the range (false for
  // kLocal/-1, or when the kernel refused mbind).
  bool bound() const { return buffer_.bound(); }

 private:
  friend StatusOr<PinnedBuffer> AllocatePinned(size_t, int, const Config&, bool);
  topology::NumaBuffer buffer_;
  bool locked_ = false;
  int numa_node_ = -1;
};

// Allocates `bytes` of pool memory:
//  - page-aligned anonymous memory; for >= 2 MiB hugetlbfs pages when the
//    machine has some reserved, else 2 MiB-aligned with MADV_HUGEPAGE;
//  - placed on OS NUMA node `numa_node` (-1: no node, first touch by the
//    calling thread) per config.numa_policy (CIUIC_NUMA_POLICY: bind,
//    preferred, interleave over every node, local = no policy);
//  - pre-faulted (MADV_POPULATE_WRITE, else one write per page), because a
//    first touch costs ~12 us per 4 KiB page and would otherwise be paid
//    inside the first receives;
//  - when `lock`, mlocked, best effort: when RLIMIT_MEMLOCK refuses, the
//    memory stays pageable and this is logged once per process at INFO.
//    (verbs passes false: ibv_reg_mr pins the pages itself, and locking
//    twice would count them twice against RLIMIT_MEMLOCK.)
// Errors: kInvalidArgument (0 bytes, absurd size, numa_node < -1 or a node
// this machine does not have, bad CIUIC_NUMA_POLICY — each named),
// kResourceExhausted (out of memory, or the node is full under bind).
StatusOr<PinnedBuffer> AllocatePinned(size_t bytes, int numa_node, const Config& config,
                                      bool lock = true);

// The OS NUMA node of a device per /sys (the `numa_node` file under
// `sysfs_device_dir`, e.g. "/sys/class/net/eth0/device"), or -1 when the
// device is virtual, the file is missing or says -1.
int DeviceNumaNode(const std::string& sysfs_device_dir);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_PINNED_MEMORY_H_
