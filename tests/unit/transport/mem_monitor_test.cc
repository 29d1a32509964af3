// The registration cache follows memory that the program gives back to the
// kernel (transport/mem_monitor.h): free() of an mmapped chunk, munmap,
// mremap, madvise(DONTNEED), across fork, when events overflow, and where a
// range cannot be watched. The cache runs over the tcp backend with
// Watch::kAlways (the verbs version, with a real RDMA write into a buffer
// re-made at the same address, is in the contract suite).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "transport/transport.h"
#include "transport/mem_monitor.h"

namespace ciuic::transport {
namespace {

constexpr size_t kPage = 4096;

class MemMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!MemoryMonitor::Get().Available(&why)) GTEST_SKIP() << "no userfaultfd here: " << why;
    BackendOptions o;
    o.job_id = "memmon-" + std::to_string(getpid());
    auto be = OpenBackend(BackendKind::kTcp, o);
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    backend_ = std::move(*be);
    // A fixed mmap threshold (glibc raises it after freeing an mmapped
    // chunk, which would move the next 1 MiB malloc onto the heap).
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  }

  static void* MapPages(size_t pages) {
    void* p = mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    memset(p, 0x5a, pages * kPage);
    return p;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(MemMonitorTest, AutoWatchesOnlyPinningBackends) {
  RegistrationCache cache(*backend_);  // kAuto over tcp
  std::string why;
  EXPECT_FALSE(cache.watching(&why));
  EXPECT_NE(why.find("does not pin"), std::string::npos) << why;
  RegistrationCache never(*backend_, RegistrationCache::Watch::kNever);
  EXPECT_FALSE(never.watching(&why));
  RegistrationCache always(*backend_, RegistrationCache::Watch::kAlways);
  EXPECT_TRUE(always.watching(nullptr));
}

// free() of an mmapped chunk unmaps it: the next lookup misses, even when
// the new buffer lands at the same address. Repeated with no pause between
// free and lookup (the monitor must have published before free returns).
TEST_F(MemMonitorTest, FreeOfMappedChunkDropsTheRegistration) {
  constexpr size_t kBytes = 1 << 20;
  {
    // A sanitizer's allocator quarantines freed memory instead of unmapping
    // it (then the registration rightly stays: the pages are the same).
    void* probe = malloc(kBytes);
    memset(probe, 0, kBytes);
    void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(probe) & ~(kPage - 1));
    free(probe);
    if (msync(page, kPage, MS_ASYNC) == 0) {
      GTEST_SKIP() << "this allocator keeps a freed 1 MiB chunk mapped (a sanitizer's quarantine), "
                      "so free() releases nothing here; munmap/mremap/madvise are covered below";
    }
  }
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  uint64_t misses = 0, same_address = 0;
  void* last = nullptr;
  for (int round = 0; round < 50; ++round) {
    // Owned, so that a failed assertion does not leak it; freed by reset().
    std::unique_ptr<uint8_t, void (*)(void*)> owner(static_cast<uint8_t*>(malloc(kBytes)), free);
    uint8_t* p = owner.get();
    ASSERT_NE(p, nullptr);
    memset(p, round, kBytes);
    same_address += p == last;
    last = p;
    auto h = cache.Ref(p + 64, kBytes - 64);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ++misses;
    cache.Unref(*h);
    auto again = cache.Ref(p + 100, 1000);  // still mapped: a hit
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->region, h->region);
    cache.Unref(*again);
    owner.reset();
    auto s = cache.stats();
    ASSERT_EQ(s.entries, 0u) << "round " << round << ": the registration outlived free()";
    EXPECT_EQ(s.misses, misses);
    EXPECT_EQ(s.released, static_cast<uint64_t>(round + 1));
  }
  EXPECT_GT(same_address, 0u) << "no buffer came back at the same address: the test proved less";
}

// A small heap chunk stays mapped after free(): same pages, still valid.
TEST_F(MemMonitorTest, FreeThatKeepsTheMemoryMappedKeepsTheRegistration) {
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  std::unique_ptr<uint8_t, void (*)(void*)> owner(static_cast<uint8_t*>(malloc(3 * kPage)), free);
  uint8_t* p = owner.get();
  // Keeps p's chunk away from the top (no trim).
  std::unique_ptr<void, void (*)(void*)> guard(malloc(64), free);
  ASSERT_NE(p, nullptr);
  memset(p, 1, 3 * kPage);
  auto h = cache.Ref(p + kPage, kPage);
  ASSERT_TRUE(h.ok());
  cache.Unref(*h);
  owner.reset();
  auto s = cache.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.released, 0u);
}

TEST_F(MemMonitorTest, MunmapMremapAndDontneedDropOverlappingRegistrations) {
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  auto* base = static_cast<uint8_t*>(MapPages(16));
  auto ref = [&](size_t page, size_t pages) {
    auto h = cache.Ref(base + page * kPage, pages * kPage);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    cache.Unref(*h);
  };
  ref(0, 2);   // pages 0-1
  ref(4, 2);   // pages 4-5
  ref(8, 2);   // pages 8-9
  ref(12, 2);  // pages 12-13
  EXPECT_EQ(cache.stats().entries, 4u);

  ASSERT_EQ(munmap(base + 3 * kPage, kPage), 0);  // between two registrations
  EXPECT_EQ(cache.stats().entries, 4u);
  EXPECT_EQ(cache.stats().released, 0u);

  ASSERT_EQ(munmap(base + 5 * kPage, kPage), 0);  // the second half of pages 4-5
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().released, 1u);

  // madvise(DONTNEED) discards the pages: dropped, and the memory then
  // behaves as usual (reads zero, takes writes).
  ASSERT_EQ(madvise(base + 8 * kPage, 2 * kPage, MADV_DONTNEED), 0);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(base[8 * kPage], 0);
  base[8 * kPage + 1] = 7;
  EXPECT_EQ(base[8 * kPage + 1], 7);

  // mremap moves pages 12-13 elsewhere (growing them: page 14 is in the
  // way, so the kernel must move them).
  void* moved = mremap(base + 12 * kPage, 2 * kPage, 64 * kPage, MREMAP_MAYMOVE);
  ASSERT_NE(moved, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().released, 3u);
  EXPECT_EQ(static_cast<uint8_t*>(moved)[0], 0x5a);  // the data moved with it

  auto s = cache.stats();
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.invalidations, 3u);
  munmap(base, 16 * kPage);
  munmap(moved, 64 * kPage);
}

// A page of a watched range that was never touched faults through the
// monitor: the program still gets its page, and the registration over it is
// dropped (it could not have been pinned).
TEST_F(MemMonitorTest, FaultOnAWatchedMissingPageIsServed) {
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  void* p = mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto h = cache.Ref(p, 8 * kPage);  // tcp does not touch the pages
  ASSERT_TRUE(h.ok());
  const uint64_t faults = MemoryMonitor::Get().stats().faults;
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < 8; ++i) b[i * kPage] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(b[i * kPage], i + 1);
  EXPECT_GE(MemoryMonitor::Get().stats().faults, faults + 1);
  EXPECT_EQ(cache.stats().entries, 0u);
  cache.Unref(*h);
  munmap(p, 8 * kPage);
}

// More events than the ring holds before the cache looks: it cannot tell
// which ranges went away, so it drops everything.
TEST_F(MemMonitorTest, LostEventsDropEverything) {
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  constexpr size_t kPages = MemoryMonitor::kRingEvents + 8;
  auto* big = static_cast<uint8_t*>(MapPages(kPages));
  auto* other = static_cast<uint8_t*>(MapPages(4));
  auto h1 = cache.Ref(big, kPages * kPage);
  auto h2 = cache.Ref(other, 4 * kPage);
  ASSERT_TRUE(h1.ok() && h2.ok());
  cache.Unref(*h1);
  cache.Unref(*h2);
  // Every other page, so each unmap is an event of its own.
  for (size_t i = 0; i < kPages; i += 2) ASSERT_EQ(munmap(big + i * kPage, kPage), 0);
  for (size_t i = 1; i < kPages; i += 2) ASSERT_EQ(munmap(big + i * kPage, kPage), 0);
  auto s = cache.stats();
  EXPECT_EQ(s.entries, 0u) << "the unrelated registration survived lost events";
  EXPECT_EQ(s.released, 2u);
  munmap(other, 4 * kPage);
}

// Memory the kernel cannot watch (a file mapping) is registered for the use
// at hand and not kept.
TEST_F(MemMonitorTest, UnwatchableMemoryIsNotKept) {
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* p = mmap(nullptr, 4 * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  auto h = cache.Ref(p, 4 * kPage);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto s = cache.stats();
  EXPECT_EQ(s.uncached, 1u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(static_cast<uint8_t*>(h->region->data()) + h->offset, p);
  auto again = cache.Ref(p, kPage);  // not cached: a miss
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->region, h->region);
  EXPECT_EQ(cache.stats().misses, 2u);
  cache.Unref(*h);
  cache.Unref(*again);
  munmap(p, 4 * kPage);
}

// A forked child has none of its parent's watches: its copy of the cache
// drops what it held, and watching works again in the child.
TEST_F(MemMonitorTest, ForkedChildStartsAfresh) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded fork";
#endif
  RegistrationCache cache(*backend_, RegistrationCache::Watch::kAlways);
  auto* p = static_cast<uint8_t*>(MapPages(4));
  auto h = cache.Ref(p, 4 * kPage);
  ASSERT_TRUE(h.ok());
  cache.Unref(*h);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    if (cache.stats().entries != 0) code |= 1;
    auto* q = static_cast<uint8_t*>(mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    memset(q, 1, 4 * kPage);
    auto hq = cache.Ref(q, 4 * kPage);
    if (!hq.ok()) code |= 2;
    cache.Unref(*hq);
    if (cache.stats().entries != 1) code |= 4;
    munmap(q, 4 * kPage);
    if (cache.stats().entries != 0) code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 kept the parent's entry, 2 Ref failed, "
                                       "4 not cached, 8 unmap not seen";
  EXPECT_EQ(cache.stats().entries, 1u);  // the parent's watch is untouched
  munmap(p, 4 * kPage);
  EXPECT_EQ(cache.stats().entries, 0u);
}

// Two caches watching overlapping memory: one dropping its entry leaves the
// other's watch in place.
TEST_F(MemMonitorTest, OverlappingWatchesOfTwoCaches) {
  RegistrationCache a(*backend_, RegistrationCache::Watch::kAlways);
  RegistrationCache b(*backend_, RegistrationCache::Watch::kAlways);
  auto* p = static_cast<uint8_t*>(MapPages(8));
  auto ha = a.Ref(p, 8 * kPage);
  auto hb = b.Ref(p + 2 * kPage, 2 * kPage);
  ASSERT_TRUE(ha.ok() && hb.ok());
  a.Unref(*ha);
  b.Unref(*hb);
  a.Invalidate(p, 8 * kPage);  // b still watches pages 2-3
  ASSERT_EQ(munmap(p + 2 * kPage, kPage), 0);
  EXPECT_EQ(b.stats().entries, 0u) << "Unwatch of a's range removed b's watch";
  EXPECT_EQ(b.stats().released, 1u);
  munmap(p, 8 * kPage);
}

}  // namespace
}  // namespace ciuic::transport
