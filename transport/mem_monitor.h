// MemoryMonitor: tells the registration cache when caller memory it has
// registered stops being the memory it registered.
//
// A registration pins physical pages behind a virtual range (verbs). When the
// program frees that range and the allocator gives it back to the kernel
// (free() of an mmapped chunk, a heap trim, munmap, mremap, madvise
// DONTNEED/REMOVE), a later buffer at the same address has other pages, and
// a cached registration would make the NIC read and write the old ones:
// silent data loss. glibc 2.36 has no malloc hooks and free() calls munmap
// inside libc, where no symbol interposition reaches, so the monitor asks the
// kernel instead: a userfaultfd (Linux >= 4.11 for the events, >= 5.11 for
// UFFD_USER_MODE_ONLY, which lets unprivileged processes use it) with
// UFFD_FEATURE_EVENT_UNMAP | EVENT_REMOVE | EVENT_REMAP. The kernel stops the
// unmapping thread until the event has been read, so by the time munmap()
// (or the free() that called it) returns, the monitor holds the event.
//
// One monitor per process, started on the first Watch; a thread reads the
// events into a ring of kRingEvents and publishes them with a sequence
// number; each cache keeps its own cursor into the ring and applies what is
// new before every lookup (Sync). Reading and publishing never allocate or
// take a lock that a program thread could hold while it unmaps, so an unmap
// anywhere (even inside the cache, even inside malloc) cannot deadlock.
//
// Watched ranges are registered with the userfaultfd in MISSING mode (the
// only mode that delivers these events); a fault on a missing page of a
// watched range (after DONTNEED) is resolved by the thread with the zero
// page, as the kernel would, and counts as an event for that page.
//
// A forked child inherits no watches (without UFFD_FEATURE_EVENT_FORK the
// kernel drops them in the child) and no thread: the child's monitor starts
// afresh, and epoch() changes so caches copied into the child drop
// everything they held.
//
// Where the kernel refuses (no userfaultfd, seccomp, a file-backed range, a
// range another userfaultfd owns), Watch fails with the reason and the cache
// does not keep that registration beyond its use.
#ifndef CIUIC_TRANSPORT_MEM_MONITOR_H_
#define CIUIC_TRANSPORT_MEM_MONITOR_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "ciuic/status.h"

namespace ciuic::transport {

class MemoryMonitor {
 public:
  static constexpr size_t kRingEvents = 4096;

  // The process's monitor (created on first use, never destroyed).
  static MemoryMonitor& Get();
  MemoryMonitor(const MemoryMonitor&) = delete;
  MemoryMonitor& operator=(const MemoryMonitor&) = delete;

  // Whether the kernel gives this process a userfaultfd with the events
  // (starting the monitor if needed); `why` (optional) says why not.
  bool Available(std::string* why);

  // Watches [start, end) (rounded out to pages). Overlapping watches are
  // fine; each Watch is matched by one Unwatch. Errors: kUnavailable with
  // the reason (no userfaultfd here, the range holds file-backed or foreign
  // userfaultfd memory, or is not mapped).
  Status Watch(uintptr_t start, uintptr_t end);
  // Stops watching [start, end) (as passed to Watch) where no other watch
  // covers it. Never an error (a range already unmapped is simply gone).
  void Unwatch(uintptr_t start, uintptr_t end);

  // A range whose memory went away (unmapped, moved, discarded).
  struct Event {
    uintptr_t start = 0;
    uintptr_t end = 0;  // exclusive
  };

  // The sequence number the next event will get, after every event the
  // kernel has handed to the monitor has been published. A cursor
  // initialised from it sees only later events.
  uint64_t Sync();
  // Calls fn(event) for every published event from *cursor on and advances
  // *cursor. Returns false when events were lost (the cursor fell more than
  // kRingEvents behind): the caller must then drop everything it watches.
  // Call Sync() first so events that the kernel has delivered are included.
  template <typename Fn>
  bool Read(uint64_t* cursor, Fn&& fn) {
    const uint64_t head = Published();
    uint64_t i = *cursor;
    *cursor = head;
    if (head - i > kRingEvents) return false;
    for (; i < head; ++i) {
      const Event e = At(i);
      if (!Fresh(i)) return false;  // overwritten while we read it
      fn(e);
    }
    return true;
  }

  // Changes in a forked child (its watches are gone).
  uint64_t epoch() const;

  struct Stats {
    uint64_t watches = 0, events = 0, faults = 0;
  };
  Stats stats() const;

  class Impl;

 private:
  MemoryMonitor();
  uint64_t Published() const;
  Event At(uint64_t seq) const;
  bool Fresh(uint64_t seq) const;
  Impl* impl_;
};

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_MEM_MONITOR_H_
