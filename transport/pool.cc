// BufferPool: first-fit leases carved from large registered regions.
#include <unistd.h>

#include <map>

#include "transport/transport.h"

namespace ciuic::transport {

namespace {
size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

struct BufferPool::Arena {
  std::unique_ptr<MemoryRegion> region;
  std::map<size_t, size_t> free;  // offset -> bytes, never adjacent (coalesced)
};

BufferPool::BufferPool(Backend& backend, size_t arena_bytes)
    : backend_(backend), arena_bytes_(RoundUp(arena_bytes == 0 ? 1 : arena_bytes, PageSize())) {}

BufferPool::~BufferPool() = default;

StatusOr<BufferPool::Lease> BufferPool::Acquire(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("BufferPool::Acquire: 0 bytes");
  const size_t need = RoundUp(bytes, PageSize());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& arena : arenas_) {
    for (auto it = arena->free.begin(); it != arena->free.end(); ++it) {
      if (it->second < need) continue;
      Lease lease{arena->region.get(), it->first, need};
      const size_t rest = it->second - need;
      const size_t rest_at = it->first + need;
      arena->free.erase(it);
      if (rest > 0) arena->free.emplace(rest_at, rest);
      return lease;
    }
  }
  const size_t size = need > arena_bytes_ ? need : arena_bytes_;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<MemoryRegion> region, backend_.Allocate(size));
  auto arena = std::make_unique<Arena>();
  arena->region = std::move(region);
  if (size > need) arena->free.emplace(need, size - need);
  Lease lease{arena->region.get(), 0, need};
  arenas_.push_back(std::move(arena));
  return lease;
}

void BufferPool::Release(const Lease& lease) {
  if (lease.region == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& arena : arenas_) {
    if (arena->region.get() != lease.region) continue;
    auto [it, inserted] = arena->free.emplace(lease.offset, lease.size);
    if (!inserted) return;  // double release: ignore rather than corrupt the map
    auto next = std::next(it);
    if (next != arena->free.end() && it->first + it->second == next->first) {
      it->second += next->second;
      arena->free.erase(next);
    }
    if (it != arena->free.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        arena->free.erase(it);
      }
    }
    return;
  }
}

size_t BufferPool::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& arena : arenas_) total += arena->region->size();
  return total;
}

}  // namespace ciuic::transport
