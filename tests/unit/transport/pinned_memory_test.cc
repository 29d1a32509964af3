// Tests of AllocatePinned, the pool memory of the tcp and verbs backends:
// alignment, pre-faulting (mincore right after the call), writability,
// NUMA placement (NumaNodeOfAddress), locking, argument errors, and the
// /sys NUMA node of a device. Sizes are fixed (no randomness).
#include "transport/pinned_memory.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/topology.h"

namespace ciuic::transport {
namespace {

size_t PageSize() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// OS indices of the NUMA nodes /sys lists.
std::vector<int> Nodes() {
  std::vector<int> nodes;
  DIR* dir = ::opendir("/sys/devices/system/node");
  if (dir == nullptr) return nodes;
  while (const dirent* e = ::readdir(dir)) {
    int n = -1;
    char tail = 0;
    if (std::sscanf(e->d_name, "node%d%c", &n, &tail) == 1 && n >= 0) nodes.push_back(n);
  }
  ::closedir(dir);
  return nodes;
}

// Every page of the buffer is resident (mincore), i.e. it was faulted in
// by AllocatePinned, not by the test.
void ExpectResident(const PinnedBuffer& b) {
  const size_t page = PageSize();
  std::vector<unsigned char> vec((b.mapped() + page - 1) / page);
  ASSERT_EQ(::mincore(b.data(), b.mapped(), vec.data()), 0) << std::strerror(errno);
  size_t missing = 0;
  for (unsigned char v : vec) missing += (v & 1) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "of " << vec.size() << " pages";
}

Config WithPolicy(const std::string& policy) {
  Config c;
  c.numa_policy = policy;
  return c;
}

TEST(PinnedMemoryTest, AlignedPrefaultedWritable) {
  const size_t page = PageSize();
  for (size_t bytes : {size_t{1}, page + 1, size_t{3} << 20, (size_t{4} << 20) + 123}) {
    SCOPED_TRACE(bytes);
    auto b = AllocatePinned(bytes, -1, Config());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_NE(b->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % page, 0u);
    if (bytes >= (size_t{2} << 20)) {
      // 2 MiB aligned so that transparent huge pages can back it.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (size_t{2} << 20), 0u);
      EXPECT_TRUE(b->huge_pages());
    }
    EXPECT_EQ(b->size(), bytes);
    EXPECT_GE(b->mapped(), bytes);
    EXPECT_EQ(b->mapped() % page, 0u);
    EXPECT_EQ(b->numa_node(), -1);
    ExpectResident(*b);
    // Writable end to end, and fresh memory reads as zero.
    uint8_t* p = static_cast<uint8_t*>(b->data());
    EXPECT_EQ(p[0], 0);
    EXPECT_EQ(p[bytes - 1], 0);
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes / 2], 0x5a);
    EXPECT_EQ(p[bytes - 1], 0x5a);
  }
}

TEST(PinnedMemoryTest, OnRequestedNodeUnderEveryPolicy) {
  const std::vector<int> nodes = Nodes();
  if (nodes.empty()) GTEST_SKIP() << "no NUMA nodes in /sys/devices/system/node";
  const int node = nodes.front();
  for (const char* policy : {"bind", "preferred", "interleave", "local"}) {
    SCOPED_TRACE(policy);
    auto b = AllocatePinned(size_t{1} << 20, node, WithPolicy(policy));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->numa_node(), node);
    ExpectResident(*b);
    if (nodes.size() > 1 && std::string(policy) == "interleave") continue;
    // With one node every policy lands there; with several, bind and
    // preferred do by their definition and local does for a caller there.
    if (nodes.size() > 1 && std::string(policy) == "local") continue;
    auto where = topology::NumaNodeOfAddress(b->data());
    if (!where.ok()) GTEST_SKIP() << "the kernel does not say: " << where.status().ToString();
    EXPECT_EQ(*where, node);
    auto last = topology::NumaNodeOfAddress(static_cast<uint8_t*>(b->data()) + b->mapped() - 1);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(*last, node);
    if (std::string(policy) == "bind" || std::string(policy) == "preferred") {
      EXPECT_TRUE(b->bound()) << "mbind refused?";
    }
  }
}

TEST(PinnedMemoryTest, CrossNodeBind) {
  const std::vector<int> nodes = Nodes();
  if (nodes.size() < 2) {
    GTEST_SKIP() << "this machine has " << nodes.size()
                 << " NUMA node(s): binding to another node than the caller's cannot be shown";
  }
  const int node = nodes.back();
  auto b = AllocatePinned(size_t{1} << 20, node, WithPolicy("bind"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectResident(*b);
  auto where = topology::NumaNodeOfAddress(b->data());
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(*where, node);
}

TEST(PinnedMemoryTest, LockedWhenTheLimitAllows) {
  const size_t bytes = size_t{256} << 10;
  auto b = AllocatePinned(bytes, -1, Config());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  struct rlimit rl{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &rl), 0);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (size_t{64} << 20) && ::geteuid() != 0) {
    GTEST_SKIP() << "RLIMIT_MEMLOCK is " << rl.rlim_cur << " bytes: mlock may be refused here";
  }
  EXPECT_TRUE(b->locked());
  auto unlocked = AllocatePinned(bytes, -1, Config(), /*lock=*/false);
  ASSERT_TRUE(unlocked.ok());
  EXPECT_FALSE(unlocked->locked());
  ExpectResident(*unlocked);
}

TEST(PinnedMemoryTest, MoveTransfersOwnership) {
  auto b = AllocatePinned(4096, -1, Config());
  ASSERT_TRUE(b.ok());
  void* data = b->data();
  PinnedBuffer moved = std::move(*b);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(b->data(), nullptr);  // NOLINT(bugprone-use-after-move): documented empty
  PinnedBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  empty = std::move(moved);
  EXPECT_EQ(empty.data(), data);
  static_cast<volatile uint8_t*>(empty.data())[0] = 1;
}

TEST(PinnedMemoryTest, BadArguments) {
  auto zero = AllocatePinned(0, -1, Config());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  auto huge = AllocatePinned(SIZE_MAX, -1, Config());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  auto negative = AllocatePinned(4096, -2, Config());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  auto absent = AllocatePinned(4096, 4000, Config());
  EXPECT_EQ(absent.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(absent.status().message().find("4000"), std::string::npos) << absent.status().ToString();
  auto policy = AllocatePinned(4096, -1, WithPolicy("nearest"));
  EXPECT_EQ(policy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(policy.status().message().find("CIUIC_NUMA_POLICY"), std::string::npos)
      << policy.status().ToString();
}

TEST(PinnedMemoryTest, DeviceNumaNodeReadsSysfs) {
  char tmpl[] = "/tmp/ciuic_pinned_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  EXPECT_EQ(DeviceNumaNode(dir), -1);  // no numa_node file (virtual device)
  const std::vector<std::pair<std::string, int>> cases = {{"1\n", 1}, {"0\n", 0}, {"-1\n", -1}, {"x\n", -1}};
  for (const auto& [text, want] : cases) {
    std::ofstream(dir + "/numa_node") << text;
    EXPECT_EQ(DeviceNumaNode(dir), want) << text;
  }
  ::unlink((dir + "/numa_node").c_str());
  ::rmdir(dir.c_str());
  EXPECT_EQ(DeviceNumaNode("/sys/class/net/lo/device"), -1);  // loopback has no device
}

}  // namespace
}  // namespace ciuic::transport
