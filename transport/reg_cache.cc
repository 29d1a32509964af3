// RegistrationCache: sorted, reference-counted registrations of caller
// memory, dropped when the memory under them goes away (see transport.h).
#include <unistd.h>

#include <algorithm>

#include "transport/transport.h"
#include "transport/mem_monitor.h"

namespace ciuic::transport {

struct RegistrationCache::Entry {
  uintptr_t start = 0;
  uintptr_t end = 0;  // exclusive
  uint64_t id = 0;
  int refs = 0;
  bool watched = false;
  std::unique_ptr<MemoryRegion> region;
};

RegistrationCache::RegistrationCache(Backend& backend, Watch watch) : backend_(backend) {
  if (watch == Watch::kNever) {
    not_watching_ = "watching is off (Watch::kNever)";
  } else if (watch == Watch::kAuto && !backend.PinsRegisteredMemory()) {
    not_watching_ = std::string(BackendName(backend.kind())) +
                    " does not pin registered memory: registrations never go stale";
  } else if (MemoryMonitor::Get().Available(&not_watching_)) {
    watch_ = true;
    epoch_ = MemoryMonitor::Get().epoch();
    cursor_ = MemoryMonitor::Get().Sync();
  }
}

RegistrationCache::~RegistrationCache() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool same_process = watch_ && MemoryMonitor::Get().epoch() == epoch_;
  for (const auto* list : {&entries_, &retired_}) {
    for (const EntryPtr& e : *list) {
      if (e->watched && same_process) MemoryMonitor::Get().Unwatch(e->start, e->end);
    }
  }
}

bool RegistrationCache::watching(std::string* why) const {
  if (!watch_ && why != nullptr) *why = not_watching_;
  return watch_;
}

template <typename Pred>
void RegistrationCache::DropLocked(Pred pred, bool released) {
  const bool same_process = MemoryMonitor::Get().epoch() == epoch_;
  auto keep = std::stable_partition(entries_.begin(), entries_.end(),
                                    [&](const EntryPtr& e) { return !pred(*e); });
  for (auto it = keep; it != entries_.end(); ++it) {
    Entry& e = **it;
    ++stats_.invalidations;
    if (released) ++stats_.released;
    if (e.watched) {
      if (same_process) MemoryMonitor::Get().Unwatch(e.start, e.end);
      e.watched = false;
    }
    if (e.refs > 0) retired_.push_back(*it);
  }
  entries_.erase(keep, entries_.end());  // deregisters those not retired
}

void RegistrationCache::ApplyReleasedLocked() {
  if (!watch_) return;
  MemoryMonitor& monitor = MemoryMonitor::Get();
  if (monitor.epoch() != epoch_) {
    // A forked child: the kernel dropped every watch of the parent.
    DropLocked([](const Entry&) { return true; }, true);
    epoch_ = monitor.epoch();
    cursor_ = monitor.Sync();
    return;
  }
  std::vector<MemoryMonitor::Event> gone;
  const bool complete = monitor.Read(&cursor_, [&](const MemoryMonitor::Event& e) {
    if (!entries_.empty()) gone.push_back(e);
  });
  if (!complete) {
    DropLocked([](const Entry&) { return true; }, true);
    return;
  }
  if (gone.empty()) return;
  DropLocked(
      [&](const Entry& e) {
        for (const auto& g : gone) {
          if (g.start < e.end && e.start < g.end) return true;
        }
        return false;
      },
      true);
}

StatusOr<RegistrationCache::Handle> RegistrationCache::Ref(const void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return InvalidArgumentError("RegistrationCache::Ref: null address or 0 bytes");
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (a + bytes < a) return InvalidArgumentError("RegistrationCache::Ref: range wraps around");
  // Outside the lock: wait until every event the kernel has handed over is
  // published (an unmap that returned before this call is among them).
  if (watch_) MemoryMonitor::Get().Sync();
  std::lock_guard<std::mutex> lock(mu_);
  ApplyReleasedLocked();
  // Only entries starting at or before `a` can contain [a, a+bytes); they
  // may overlap one another (misses on overlapping ranges), so look at all
  // of them, nearest first.
  auto it = std::upper_bound(entries_.begin(), entries_.end(), a,
                             [](uintptr_t v, const EntryPtr& e) { return v < e->start; });
  while (it != entries_.begin()) {
    --it;
    Entry& e = **it;
    if (e.start <= a && a + bytes <= e.end) {
      ++e.refs;
      ++stats_.hits;
      return Handle{e.region.get(), a - reinterpret_cast<uintptr_t>(e.region->data()), e.id};
    }
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = a & ~(page - 1);
  const uintptr_t end = (a + bytes + page - 1) & ~(page - 1);
  // Register first (a pinning backend faults every page in), then watch:
  // a watched page that is missing costs a trip through the monitor.
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region,
                         backend_.Register(reinterpret_cast<void*>(start), end - start));
  auto entry = std::make_shared<Entry>();
  entry->start = start;
  entry->end = end;
  entry->id = next_id_++;
  entry->refs = 1;
  entry->region = std::move(region);
  ++stats_.misses;
  Handle h{entry->region.get(), a - start, entry->id};
  if (watch_) {
    entry->watched = MemoryMonitor::Get().Watch(start, end).ok();
    if (!entry->watched) {
      ++stats_.uncached;  // used now, deregistered at its last Unref
      retired_.push_back(std::move(entry));
      return h;
    }
  }
  auto pos = std::upper_bound(entries_.begin(), entries_.end(), start,
                              [](uintptr_t v, const EntryPtr& e) { return v < e->start; });
  entries_.insert(pos, std::move(entry));
  return h;
}

void RegistrationCache::Unref(const Handle& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : entries_) {
    if (e->id == handle.id) {
      if (e->refs > 0) --e->refs;
      return;
    }
  }
  for (auto it = retired_.begin(); it != retired_.end(); ++it) {
    if ((*it)->id == handle.id) {
      if (--(*it)->refs <= 0) retired_.erase(it);  // deregisters
      return;
    }
  }
}

void RegistrationCache::Invalidate(const void* addr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t b = a + bytes;
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked([&](const Entry& e) { return e.start < b && a < e.end; }, false);
}

RegistrationCache::Stats RegistrationCache::stats() {
  if (watch_) MemoryMonitor::Get().Sync();
  std::lock_guard<std::mutex> lock(mu_);
  ApplyReleasedLocked();
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace ciuic::transport
