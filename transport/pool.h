// Private: buffer pools and the registration cache.
#ifndef CIUIC_TRANSPORT_POOL_H_
#define CIUIC_TRANSPORT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/status.h"
#include "transport/backend.h"

namespace ciuic::transport {

// Pool memory handed out in pieces: a few large regions from
// Backend::Allocate (pinned, pre-faulted, NUMA-local, registered once) carved
// into page-aligned leases, so nothing is allocated or registered per
// operation. Thread contract: thread-safe.
class BufferPool {
 public:
  // `arena_bytes`: size of each region allocated from the backend (a lease
  // larger than that gets a region of its own).
  BufferPool(Backend& backend, size_t arena_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  struct Lease {
    MemoryRegion* region = nullptr;  // owned by the pool
    size_t offset = 0;               // page-aligned
    size_t size = 0;
    void* data() const { return static_cast<char*>(region->data()) + offset; }
  };
  // A lease of `bytes` (rounded up to a page). Errors: kInvalidArgument (0),
  // those of Backend::Allocate.
  StatusOr<Lease> Acquire(size_t bytes);
  // Returns a lease; adjacent free space coalesces.
  void Release(const Lease& lease);
  // Bytes allocated from the backend so far.
  size_t allocated_bytes() const;

 private:
  struct Arena;
  Backend& backend_;
  size_t arena_bytes_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Arena>> arenas_;
};

// Registrations of caller memory, reused: sorted by address, reference
// counted, a request inside an existing registration is a hit (sub-range).
//
// A registration that pins pages (Backend::PinsRegisteredMemory: verbs) goes
// stale when the program gives its memory back to the kernel: free() of an
// mmapped chunk, a heap trim, munmap, mremap, madvise(DONTNEED). The cache
// watches every range it keeps through the process's MemoryMonitor
// (userfaultfd events, transport/mem_monitor.h) and drops the registrations
// over memory that went away before its next lookup, so a new buffer at the
// same address is registered afresh. free() of memory that stays mapped (a
// small chunk of the heap) keeps the same pages, so the registration stays
// valid and cached. Where the kernel cannot watch a range (no userfaultfd,
// file-backed memory), that registration is not kept after its last Unref
// (stats().uncached), so nothing stale is ever reused.
//
// Entries are also dropped when Invalidate() covers them and all at
// destruction; an entry dropped while in use stays alive until its last
// Unref. Thread contract: thread-safe.
class RegistrationCache {
 public:
  // kAuto watches when the backend pins registered memory; kAlways and
  // kNever are for tests and for callers that know better.
  enum class Watch { kAuto, kAlways, kNever };
  explicit RegistrationCache(Backend& backend, Watch watch = Watch::kAuto);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  struct Handle {
    MemoryRegion* region = nullptr;  // covers [addr, addr+bytes)
    size_t offset = 0;               // of addr inside region
    uint64_t id = 0;                 // pass to Unref
  };
  // A registration covering [addr, addr+bytes): an existing one when it
  // contains the range (hit), else a new one (miss) registered with the
  // backend, page-aligned outward. Errors: kInvalidArgument (null/0), those
  // of Backend::Register.
  StatusOr<Handle> Ref(const void* addr, size_t bytes);
  void Unref(const Handle& handle);
  // Forgets every registration overlapping [addr, addr+bytes).
  void Invalidate(const void* addr, size_t bytes);

  // Whether kept registrations are watched; `why` (optional) says why not
  // (kNever, a backend that does not pin, or no userfaultfd here).
  bool watching(std::string* why) const;

  struct Stats {
    uint64_t hits = 0, misses = 0;
    uint64_t invalidations = 0;  // entries dropped by Invalidate or by released memory
    uint64_t released = 0;       // of those: memory unmapped/moved/discarded under them
    uint64_t uncached = 0;       // registrations not kept: the range could not be watched
    size_t entries = 0;
  };
  // (Applies released memory first, like Ref.)
  Stats stats();

 private:
  struct Entry;
  using EntryPtr = std::shared_ptr<Entry>;
  // Applies the monitor's new events and a fork (under mu_).
  void ApplyReleasedLocked();
  // Removes entries_ matching `pred`, retiring those still referenced.
  template <typename Pred>
  void DropLocked(Pred pred, bool released);

  Backend& backend_;
  bool watch_ = false;
  std::string not_watching_;
  mutable std::mutex mu_;
  std::vector<EntryPtr> entries_;   // sorted by start address
  std::vector<EntryPtr> retired_;   // dropped or uncached, still referenced
  uint64_t cursor_ = 0;             // into the monitor's events
  uint64_t epoch_ = 0;              // the monitor's, when cursor_ was set
  uint64_t next_id_ = 1;
  Stats stats_;
};

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_POOL_H_
