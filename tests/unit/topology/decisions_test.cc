// Decisions on hand-built topologies (no hwloc needed): PCI relations,
// NIC selection syntax, rank placement edge cases, progress CPU, pools.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/topology.h"
#include "tests/unit/topology/test_util.h"
#include "topology/internal.h"

namespace ciuic::topology {
namespace {

using ::testing::HasSubstr;

// Two NUMA nodes (one package each) of `cores_per_node` cores with two PUs:
// node n, core c has CPUs 2*(n*cores_per_node+c) and +1.
Topology TwoNodes(int cores_per_node) {
  Topology t;
  t.source = "hand-built";
  for (int n = 0; n < 2; ++n) {
    t.packages.push_back(Package{n, {}, {}});
    NumaNode node;
    node.os_index = n;
    node.package = n;
    node.memory_bytes = 1ull << 30;
    for (int c = 0; c < cores_per_node; ++c) {
      Core core;
      core.os_index = c;
      core.package = n;
      core.numa_node = n;
      const int first = 2 * (n * cores_per_node + c);
      core.cpus = {first, first + 1};
      node.cpus.insert(node.cpus.end(), core.cpus.begin(), core.cpus.end());
      t.cores.push_back(core);
    }
    t.numa_nodes.push_back(node);
  }
  t.numa_distances = {10, 32, 32, 10};
  return t;
}

int AddPci(Topology* t, PciKind kind, int parent, const std::string& bus, int numa) {
  PciNode n;
  n.kind = kind;
  n.parent = parent;
  n.bus_id = bus;
  n.numa_node = numa;
  t->pci.push_back(n);
  return static_cast<int>(t->pci.size()) - 1;
}

// Node 0: host bridge A -> root port -> switch up -> {down1 -> gpu0, down2 ->
// nic0, down3 -> switch2 up -> down -> nic1}; host bridge B -> nic2.
// Node 1: host bridge C -> nic3 (a NIC of a CPU-less... no: plain node 1).
Topology WithPci() {
  Topology t = TwoNodes(2);
  const int a = AddPci(&t, PciKind::kHostBridge, -1, "0000:[00-0f]", 0);
  const int rp = AddPci(&t, PciKind::kBridge, a, "0000:00:01.0", 0);
  const int up = AddPci(&t, PciKind::kBridge, rp, "0000:01:00.0", 0);
  const int d1 = AddPci(&t, PciKind::kBridge, up, "0000:02:00.0", 0);
  const int d2 = AddPci(&t, PciKind::kBridge, up, "0000:02:01.0", 0);
  const int d3 = AddPci(&t, PciKind::kBridge, up, "0000:02:02.0", 0);
  const int gpu0 = AddPci(&t, PciKind::kDevice, d1, "0000:03:00.0", 0);
  const int nic0 = AddPci(&t, PciKind::kDevice, d2, "0000:04:00.0", 0);
  const int up2 = AddPci(&t, PciKind::kBridge, d3, "0000:05:00.0", 0);
  const int dd = AddPci(&t, PciKind::kBridge, up2, "0000:06:00.0", 0);
  const int nic1 = AddPci(&t, PciKind::kDevice, dd, "0000:07:00.0", 0);
  const int b = AddPci(&t, PciKind::kHostBridge, -1, "0000:[10-1f]", 0);
  const int nic2 = AddPci(&t, PciKind::kDevice, b, "0000:10:00.0", 0);
  const int c = AddPci(&t, PciKind::kHostBridge, -1, "0000:[80-8f]", 1);
  const int nic3 = AddPci(&t, PciKind::kDevice, c, "0000:80:00.0", 1);
  t.gpus.push_back(Gpu{"cuda0", "0000:03:00.0", gpu0, 0, 0x10de, 0x2330});
  auto nic = [&t](const std::string& name, int pci, int numa) {
    Nic n;
    n.name = n.verbs_name = name;
    n.netdev = "net_" + name;
    n.bus_id = t.pci[pci].bus_id;
    n.pci = pci;
    n.numa_node = numa;
    n.ports = 2;
    t.nics.push_back(n);
  };
  nic("mlx5_0", nic0, 0);
  nic("mlx5_1", nic1, 0);
  nic("mlx5_2", nic2, 0);
  nic("mlx5_3", nic3, 1);
  return t;
}

TEST(TopologyValue, ValidateCatchesBadIndices) {
  Topology t = WithPci();
  EXPECT_TRUE(t.Validate().ok()) << t.Validate().ToString();
  Topology bad = t;
  bad.cores[0].numa_node = 7;
  EXPECT_EQ(bad.Validate().code(), StatusCode::kInvalidArgument);
  bad = t;
  bad.pci[1].parent = 1;
  EXPECT_FALSE(bad.Validate().ok());
  bad = t;
  bad.pci[0].parent = 2;  // a cycle 0 -> 2 -> 1 -> 0
  EXPECT_FALSE(bad.Validate().ok());
  bad = t;
  bad.cores[1].cpus = bad.cores[0].cpus;
  EXPECT_THAT(bad.Validate().message(), HasSubstr("two cores"));
  bad = t;
  bad.numa_distances.pop_back();
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(TopologyValue, Lookups) {
  const Topology t = WithPci();
  EXPECT_EQ(t.Cpus().size(), 8u);
  EXPECT_EQ(t.CoreOfCpu(5), 2);
  EXPECT_EQ(t.NumaOfCpu(5), 1);
  EXPECT_EQ(t.NumaOfCpu(99), -1);
  EXPECT_EQ(t.NumaDistance(0, 1), 32);
  EXPECT_EQ(t.NumaDistance(0, -1), 0);
  EXPECT_EQ(t.FindNic("net_mlx5_3"), 3);
  EXPECT_EQ(t.FindNic("mlx5_9"), -1);
  EXPECT_EQ(t.FindGpu("0000:03:00.0"), 0);
  EXPECT_EQ(t.FindGpu("03:00.0"), 0);
  EXPECT_EQ(t.PciDepth(6), 4);
  Topology no_matrix = t;
  no_matrix.numa_distances.clear();
  EXPECT_EQ(no_matrix.NumaDistance(0, 1), 20);
  EXPECT_EQ(no_matrix.NumaDistance(1, 1), 10);
}

TEST(TopologyPath, RelationsThroughThePciTree) {
  const Topology t = WithPci();
  auto link = [&t](Endpoint a, Endpoint b) {
    StatusOr<Path> p = t.PathBetween(a, b);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? p->link : Link::kUnknown;
  };
  const Endpoint gpu{Endpoint::kGpu, 0};
  EXPECT_EQ(link(gpu, {Endpoint::kNic, 0}), Link::kPix);  // same switch
  EXPECT_EQ(link(gpu, {Endpoint::kNic, 1}), Link::kPxb);  // through a second switch
  EXPECT_EQ(link(gpu, {Endpoint::kNic, 2}), Link::kNode);  // other host bridge, same node
  EXPECT_EQ(link(gpu, {Endpoint::kNic, 3}), Link::kSys);
  EXPECT_EQ(link({Endpoint::kNic, 3}, {Endpoint::kNuma, 1}), Link::kNode);
  EXPECT_EQ(link({Endpoint::kCpu, 0}, {Endpoint::kCpu, 1}), Link::kSelf);  // hyperthreads
  EXPECT_EQ(link({Endpoint::kCpu, 0}, {Endpoint::kCpu, 2}), Link::kNode);
  EXPECT_EQ(link({Endpoint::kCpu, 0}, {Endpoint::kCpu, 7}), Link::kSys);
  EXPECT_EQ(t.PathBetween(gpu, {Endpoint::kNic, 0})->hops, 4);
  EXPECT_EQ(t.PathBetween(gpu, {Endpoint::kNic, 3})->numa_distance, 32);
  // A host bridge shared by two devices on different root ports is PHB.
  Topology u = t;
  const int other = AddPci(&u, PciKind::kBridge, 0, "0000:00:02.0", 0);
  const int dev = AddPci(&u, PciKind::kDevice, other, "0000:08:00.0", 0);
  u.nics[2].pci = dev;
  EXPECT_EQ(u.PathBetween(gpu, {Endpoint::kNic, 2})->link, Link::kPhb);
  // Unknown locality.
  u.nics[2].pci = -1;
  u.nics[2].numa_node = -1;
  EXPECT_EQ(u.PathBetween(gpu, {Endpoint::kNic, 2})->link, Link::kUnknown);
  // Bad endpoints are errors, not crashes.
  EXPECT_EQ(t.PathBetween({Endpoint::kGpu, 3}, gpu).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.PathBetween(gpu, {Endpoint::kCpu, 100}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.PathBetween(gpu, {Endpoint::kNuma, -1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TopologyDecisions, NearestNics) {
  const Topology t = WithPci();
  const std::vector<int> all = SelectNics(t, "").value();
  EXPECT_EQ(NearestNicsToGpu(t, 0, all).value(), std::vector<int>{0});
  EXPECT_EQ(NearestNicsToGpu(t, 0, {1, 2, 3}).value(), std::vector<int>{1});  // PXB before NODE
  EXPECT_EQ(NearestNicsToGpu(t, 0, {3}).value(), std::vector<int>{3});
  EXPECT_EQ(NearestNicsToNuma(t, 0, all).value(), (std::vector<int>{0, 1, 2}));  // stripe
  EXPECT_EQ(NearestNicsToCpu(t, 6, all).value(), std::vector<int>{3});
  EXPECT_EQ(NearestNicsToGpu(t, 1, all).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NearestNicsToGpu(t, 0, {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(NearestNicsToNuma(t, 0, {9}).status().code(), StatusCode::kInvalidArgument);
  // NICs of unknown locality tie with each other and lose to a local one.
  Topology u = t;
  u.nics[3].numa_node = -1;
  u.nics[3].pci = -1;
  EXPECT_EQ(NearestNicsToNuma(u, 1, all).value(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(NearestNicsToNuma(u, 1, {3}).value(), std::vector<int>{3});
}

TEST(TopologyDecisions, SelectNicsSyntax) {
  const Topology t = WithPci();
  EXPECT_EQ(SelectNics(t, "mlx5_3,mlx5_0").value(), (std::vector<int>{0, 3}));
  EXPECT_EQ(SelectNics(t, "^mlx5_0,mlx5_1").value(), (std::vector<int>{2, 3}));
  EXPECT_EQ(SelectNics(t, "mlx5_1:2").value(), std::vector<int>{1});
  EXPECT_EQ(SelectNics(t, "=mlx5_2:1").value(), std::vector<int>{2});
  EXPECT_EQ(SelectNics(t, "^=mlx5_2").value(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(SelectNics(t, "mlx5_1:3").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(SelectNics(t, "^").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectNics(t, "mlx5_0,,mlx5_1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectNics(t, "mlx5_0:x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectNics(t, "mlx5_0:").status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::vector<int>> s = SelectNics(t, "^bnxt_re0");
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("bnxt_re0"));
}

TEST(TopologyDecisions, PoolNumaNode) {
  Topology t = WithPci();
  EXPECT_EQ(PoolNumaNode(t, 3).value(), 1);
  EXPECT_EQ(PoolNumaNode(t, 7).status().code(), StatusCode::kInvalidArgument);
  t.numa_nodes[1].memory_bytes = 0;  // a memory-less node: nearest with memory
  EXPECT_EQ(PoolNumaNode(t, 3).value(), 0);
  t.nics[3].numa_node = -1;  // unknown locality on a 2-node machine: first touch
  EXPECT_EQ(PoolNumaNode(t, 3).value(), -1);
}

TEST(TopologyDecisions, ProgressCpuPrefersAFreeLocalCore) {
  const Topology t = TwoNodes(3);  // node 0: CPUs 0-5, node 1: CPUs 6-11
  Topology with_nic = t;
  Nic n;
  n.name = n.verbs_name = "mlx5_0";
  n.numa_node = 1;
  with_nic.nics.push_back(n);
  // Free core on the NIC's node, highest first.
  EXPECT_EQ(ProgressCpu(with_nic, 0, {6, 7}).value().cpu, 10);
  // Only a hyperthread left locally: beats a free core on the other node.
  ProgressChoice pc = ProgressCpu(with_nic, 0, {6, 7, 8, 9, 10}).value();
  EXPECT_EQ(pc.cpu, 11);
  EXPECT_FALSE(pc.shared);
  // Node full: the other node's highest free core.
  EXPECT_EQ(ProgressCpu(with_nic, 0, {6, 7, 8, 9, 10, 11}).value().cpu, 4);
  // Everything used: shared, on the NIC's node, the least used CPU.
  std::vector<int> all = t.Cpus();
  all.push_back(6);
  all.push_back(11);
  pc = ProgressCpu(with_nic, 0, all).value();
  EXPECT_TRUE(pc.shared);
  EXPECT_EQ(pc.cpu, 10);
  EXPECT_EQ(ProgressCpu(with_nic, 3, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ProgressCpu(with_nic, -1, {}).value().cpu, 10) << "no NIC: the highest free core";
}

TEST(TopologyDecisions, PlaceRanksSpreadsAndOversubscribes) {
  const Topology t = TwoNodes(2);  // 4 cores, 8 CPUs
  StatusOr<std::vector<RankPlacement>> p = PlaceRanks(t, 2, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].numa_node, 0);
  EXPECT_EQ((*p)[1].numa_node, 1);
  EXPECT_EQ((*p)[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*p)[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  p = PlaceRanks(t, 1, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].numa_node, 0);
  p = PlaceRanks(t, 3, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].numa_node, 0);
  EXPECT_EQ((*p)[1].numa_node, 0);
  EXPECT_EQ((*p)[2].numa_node, 1);
  EXPECT_EQ((*p)[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ((*p)[1].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ((*p)[2].cpus, (std::vector<int>{4, 5, 6, 7}));
  p = PlaceRanks(t, 10, {});
  ASSERT_TRUE(p.ok());
  int over = 0;
  for (const RankPlacement& r : *p) {
    EXPECT_EQ(r.cpus.size(), 2u);
    over += r.oversubscribed;
  }
  EXPECT_EQ(over, 10);
  // GPUs of unknown locality: ranks still get disjoint cores, spread.
  Topology g = WithPci();
  g.gpus.push_back(g.gpus[0]);
  g.gpus[0].numa_node = -1;
  p = PlaceRanks(g, 2, SelectNics(g, "").value());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].gpu, 0);
  EXPECT_EQ((*p)[1].gpu, 1);
  EXPECT_EQ((*p)[0].numa_node, 0);
  EXPECT_EQ((*p)[1].numa_node, 1);
  EXPECT_EQ((*p)[0].nics, std::vector<int>{0}) << "still the NIC on the GPU's switch";
  EXPECT_EQ(PlaceRanks(t, 0, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceRanks(Topology(), 1, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceRanks(t, 1, {5}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TopologyDecisions, PlanHonoursKnobs) {
  const Topology t = WithPci();
  Config c;
  ASSERT_TRUE(c.Set("CIUIC_PROGRESS_CPU", "3").ok());
  StatusOr<Plan> plan = MakePlan(t, c, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->progress[0].cpu, 3);
  EXPECT_EQ(plan->ranks[0].gpu, 0);
  EXPECT_EQ(plan->ranks[0].nics, std::vector<int>{0});
  ASSERT_TRUE(c.Set("CIUIC_PROGRESS_CPU", "64").ok());
  plan = MakePlan(t, c, 1);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("CIUIC_PROGRESS_CPU"));
  ASSERT_TRUE(c.Set("CIUIC_PROGRESS_CPU", "none").ok());
  ASSERT_TRUE(c.Set("CIUIC_NUMA_POLICY", "bind").ok());
  plan = MakePlan(t, c, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->progress[0].cpu, -1);
  EXPECT_EQ(plan->numa_policy, NumaPolicy::kBind);
  ASSERT_TRUE(c.Set("CIUIC_IB_HCA", "mlx5_9").ok());
  plan = MakePlan(t, c, 1);
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(plan.status().message(), HasSubstr("mlx5_9"));
}

TEST(TopologyKnobs, ParseFromEnvironment) {
  auto lookup = [](std::map<std::string, std::string> env) {
    return [env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
  };
  StatusOr<Config> c = Config::FromLookup(lookup({{"CIUIC_TOPO_FILE", "/x.xml"},
                                                  {"CIUIC_IB_HCA", "^=mlx5_0:1,mlx5_1"},
                                                  {"CIUIC_PROGRESS_CPU", "7"},
                                                  {"CIUIC_NUMA_POLICY", "Interleave"}}));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->topo_file, "/x.xml");
  EXPECT_EQ(c->ib_hca, "^=mlx5_0:1,mlx5_1");
  EXPECT_EQ(c->progress_cpu, 7);
  EXPECT_EQ(c->numa_policy, "interleave");
  EXPECT_EQ(Config().progress_cpu, Config::kProgressCpuAuto);
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"CIUIC_IB_HCA", "mlx5_0:"},
           {"CIUIC_IB_HCA", ",mlx5_0"},
           {"CIUIC_IB_HCA", "^"},
           {"CIUIC_PROGRESS_CPU", "-3"},
           {"CIUIC_PROGRESS_CPU", "core7"},
           {"CIUIC_NUMA_POLICY", "membind"}}) {
    StatusOr<Config> bad = Config::FromLookup(lookup({{name, value}}));
    ASSERT_FALSE(bad.ok()) << name << "=" << value;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr(name));
  }
  bool seen = false;
  for (const KnobDescription& k : DescribeKnobs(Config())) {
    if (k.name == "CIUIC_NUMA_POLICY") {
      seen = true;
      EXPECT_EQ(k.value, "preferred");
    }
  }
  EXPECT_TRUE(seen);
}

TEST(TopologyHelpers, CpuListsAndNaturalOrder) {
  EXPECT_EQ(FormatCpuList({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
  std::vector<int> v;
  ASSERT_TRUE(internal::ParseCpuList("0-3,8,10-11\n", &v));
  EXPECT_EQ(v, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_FALSE(internal::ParseCpuList("3-1", &v));
  EXPECT_FALSE(internal::ParseCpuList("a", &v));
  EXPECT_FALSE(internal::ParseCpuList("1,,2", &v));
  // CPU numbers near LONG_MAX (the range loop used to overflow) and beyond
  // what strtol holds.
  EXPECT_FALSE(internal::ParseCpuList("9223372036854775807", &v));
  EXPECT_FALSE(internal::ParseCpuList("9223372036854775806-9223372036854775807", &v));
  EXPECT_FALSE(internal::ParseCpuList("99999999999999999999999", &v));
  EXPECT_FALSE(internal::ParseCpuList("2147483648", &v));
  ASSERT_TRUE(internal::ParseCpuList("1048575-1048576", &v));
  EXPECT_EQ(v, (std::vector<int>{1048575, 1048576}));
  // A number ends where its field does: not at a stray byte before the
  // dash, nor at a NUL inside the text (both parsers).
  EXPECT_FALSE(internal::ParseCpuList("1x-3", &v));
  EXPECT_FALSE(internal::ParseCpuList(std::string("0\0junk", 6), &v));
  EXPECT_FALSE(ParseCpuList(std::string("0\0junk", 6)).ok());
  EXPECT_FALSE(ParseCpuList(std::string("0-3\0", 4)).ok());
  // Bounded in all, not only per item: a repeated range is refused, not
  // expanded to gigabytes (both parsers).
  ASSERT_TRUE(internal::ParseCpuList("0-1048576", &v));
  EXPECT_EQ(v.size(), 1048577u);
  EXPECT_FALSE(internal::ParseCpuList("0-1048576,0", &v));
  EXPECT_TRUE(ParseCpuList("0-1048576").ok());
  StatusOr<std::vector<int>> many = ParseCpuList("0-1048576,0-1048576");
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("more than 2^20 CPUs"), std::string::npos) << many.status().ToString();
  EXPECT_TRUE(internal::NaturalLess("mlx5_2", "mlx5_10"));
  EXPECT_FALSE(internal::NaturalLess("mlx5_10", "mlx5_2"));
  EXPECT_TRUE(internal::IsPciBusId("0000:1b:00.0"));
  EXPECT_FALSE(internal::IsPciBusId("pci0000:00"));
  EXPECT_EQ(KernelCacheSizes(Topology()).l1d, CacheSizes().l1d);
  EXPECT_STREQ(LinkName(Link::kPxb), "PXB");
}

}  // namespace
}  // namespace ciuic::topology
