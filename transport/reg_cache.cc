// RegistrationCache: sorted, reference-counted registrations of caller memory.
#include <unistd.h>

#include <algorithm>

#include "ciuic/transport.h"

namespace ciuic::transport {

struct RegistrationCache::Entry {
  uintptr_t start = 0;
  uintptr_t end = 0;  // exclusive
  uint64_t id = 0;
  int refs = 0;
  std::unique_ptr<MemoryRegion> region;
};

RegistrationCache::~RegistrationCache() = default;

StatusOr<RegistrationCache::Handle> RegistrationCache::Ref(const void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return InvalidArgumentError("RegistrationCache::Ref: null address or 0 bytes");
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (a + bytes < a) return InvalidArgumentError("RegistrationCache::Ref: range wraps around");
  std::lock_guard<std::mutex> lock(mu_);
  // Only entries starting at or before `a` can contain [a, a+bytes); they
  // may overlap one another (misses on overlapping ranges), so look at all
  // of them, nearest first.
  auto it = std::upper_bound(entries_.begin(), entries_.end(), a,
                             [](uintptr_t v, const std::shared_ptr<Entry>& e) { return v < e->start; });
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
  auto pos = std::upper_bound(entries_.begin(), entries_.end(), start,
                              [](uintptr_t v, const std::shared_ptr<Entry>& e) { return v < e->start; });
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
  auto overlaps = [&](const std::shared_ptr<Entry>& e) { return e->start < b && a < e->end; };
  for (auto& e : entries_) {
    if (!overlaps(e)) continue;
    ++stats_.invalidations;
    if (e->refs > 0) retired_.push_back(e);
  }
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), overlaps), entries_.end());
}

RegistrationCache::Stats RegistrationCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

}  // namespace ciuic::transport
