// NUMA-bound pinned memory: placement, huge pages, fallbacks, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <cstring>
#include <thread>

#include "ciuic/topology.h"

namespace ciuic::topology {
namespace {

using ::testing::HasSubstr;

Topology Live() {
  StatusOr<Topology> t = DiscoverLive();
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Topology();
}

TEST(NumaMemory, BoundToTheNodeAskedFor) {
  const Topology t = Live();
  ASSERT_FALSE(t.numa_nodes.empty());
  const int node = static_cast<int>(t.numa_nodes.size()) - 1;  // the last node: not always the local one
  MemoryOptions opt;
  opt.numa_node = node;
  opt.policy = NumaPolicy::kBind;
  const size_t bytes = (4u << 20) + 123;  // not a multiple of the page size
  StatusOr<NumaBuffer> b = AllocateNumaBuffer(t, bytes, opt);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), bytes);
  EXPECT_GE(b->mapped(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % (2u << 20), 0u) << "2 MiB aligned for huge pages";
  EXPECT_TRUE(b->hugetlb() || b->thp() || !b->notes().empty());
  std::memset(b->data(), 0x5a, bytes);
  EXPECT_EQ(static_cast<unsigned char*>(b->data())[bytes - 1], 0x5a);
  if (!b->bound()) GTEST_SKIP() << "mbind unavailable here: " << b->notes();
  StatusOr<int> where = NumaNodeOfAddress(static_cast<char*>(b->data()) + bytes / 2);
  if (!where.ok()) GTEST_SKIP() << where.status().ToString();
  EXPECT_EQ(*where, t.numa_nodes[node].os_index);
  EXPECT_TRUE(b->locked() || !b->notes().empty()) << "not pinned, and no note saying why";
}

TEST(NumaMemory, FirstTouchFromAnotherThreadStaysOnTheNode) {
  // The policy is set before any page is touched, so a thread that touches
  // the memory later does not move it.
  const Topology t = Live();
  MemoryOptions opt;
  opt.numa_node = 0;
  opt.prefault = false;
  opt.lock = false;
  StatusOr<NumaBuffer> b = AllocateNumaBuffer(t, 1u << 20, opt);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  if (!b->bound()) GTEST_SKIP() << "mbind unavailable here: " << b->notes();
  std::thread([&] { std::memset(b->data(), 1, b->size()); }).join();
  StatusOr<int> where = NumaNodeOfAddress(b->data());
  if (!where.ok()) GTEST_SKIP() << where.status().ToString();
  EXPECT_EQ(*where, t.numa_nodes[0].os_index);
}

TEST(NumaMemory, NodeMissingOnThisMachineFallsBackCleanly) {
  // A topology of another machine (as from CIUIC_TOPO_FILE): node OS index
  // 63 does not exist here, so mbind fails; the memory is still usable and
  // the note says what happened.
  Topology t;
  t.source = "hand-built";
  t.numa_nodes.resize(2);
  t.numa_nodes[0].os_index = 0;
  t.numa_nodes[1].os_index = 63;
  t.numa_nodes[1].cpus = {4095};
  MemoryOptions opt;
  opt.numa_node = 1;
  opt.huge_pages = false;
  StatusOr<NumaBuffer> b = AllocateNumaBuffer(t, 64 * 1024, opt);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->bound());
  EXPECT_FALSE(b->hugetlb());
  EXPECT_THAT(b->notes(), HasSubstr("mbind"));
  std::memset(b->data(), 7, b->size());
  // Moves keep ownership single.
  NumaBuffer moved = std::move(*b);
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(static_cast<char*>(moved.data())[100], 7);
}

TEST(NumaMemory, BadArguments) {
  const Topology t = Live();
  EXPECT_EQ(AllocateNumaBuffer(t, 0, MemoryOptions()).status().code(), StatusCode::kInvalidArgument);
  MemoryOptions opt;
  opt.numa_node = 99;
  StatusOr<NumaBuffer> b = AllocateNumaBuffer(t, 4096, opt);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("99"));
  opt.numa_node = 0;
  opt.policy = NumaPolicy::kBind;
  b = AllocateNumaBuffer(t, size_t{1} << 50, opt);  // a petabyte
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted) << b.status().ToString();
  EXPECT_EQ(ParseNumaPolicy("membind").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseNumaPolicy("interleave").value(), NumaPolicy::kInterleave);
  EXPECT_STREQ(NumaPolicyName(NumaPolicy::kLocal), "local");
}

TEST(NumaMemory, InterleaveAndLocalPolicies) {
  const Topology t = Live();
  for (NumaPolicy p : {NumaPolicy::kInterleave, NumaPolicy::kLocal, NumaPolicy::kPreferred}) {
    MemoryOptions opt;
    opt.policy = p;
    opt.numa_node = p == NumaPolicy::kInterleave ? -1 : 0;
    StatusOr<NumaBuffer> b = AllocateNumaBuffer(t, 3 * 4096, opt);
    ASSERT_TRUE(b.ok()) << NumaPolicyName(p) << ": " << b.status().ToString();
    std::memset(b->data(), 1, b->size());
    if (p == NumaPolicy::kLocal) {
      EXPECT_FALSE(b->bound());
    }
  }
}

TEST(BindThread, PinsToOneCpu) {
  const Topology t = Live();
  const int cpu = t.Cpus().back();
  std::thread([&] {
    ASSERT_TRUE(BindThisThreadToCpu(cpu).ok());
    EXPECT_EQ(sched_getcpu(), cpu);
    EXPECT_EQ(BindThisThreadToCpu(-1).code(), StatusCode::kInvalidArgument);
  }).join();
}

}  // namespace
}  // namespace ciuic::topology
