// The live machine (hwloc, or /sys without it) and the /sys reader on a fake
// tree with two sockets, an InfiniBand NIC, a Soft-RoCE device and a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ciuic/topology.h"
#include "tests/unit/topology/test_util.h"

namespace ciuic::topology {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(LiveTopology, DiscoversThisMachine) {
  StatusOr<Topology> t = DiscoverLive();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, HaveHwloc() ? "hwloc" : "sysfs");
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_GE(t->Cpus().size(), 1u);
  EXPECT_LE(static_cast<long>(t->Cpus().size()), online);
  EXPECT_GE(t->numa_nodes.size(), 1u);
  EXPECT_TRUE(t->Validate().ok());
  if (!t->caches.measured) GTEST_SKIP() << "this machine reports no cache sizes";
  EXPECT_GE(t->caches.l1d, 4096u);
  EXPECT_GE(t->caches.l2, t->caches.l1d);
  EXPECT_GE(t->caches.llc, t->caches.l2);
  // Discover() without CIUIC_TOPO_FILE is the live machine.
  StatusOr<Topology> d = Discover(Config());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->Cpus(), t->Cpus());
}

TEST(LiveTopology, SysfsAgreesWithDiscovery) {
  StatusOr<Topology> live = DiscoverLive();
  StatusOr<Topology> sys = LoadSysfs("/");
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_TRUE(sys.ok()) << sys.status().ToString();
  EXPECT_EQ(sys->numa_nodes.size(), live->numa_nodes.size());
  EXPECT_EQ(sys->packages.size(), live->packages.size());
  if (sys->Cpus() != live->Cpus()) {
    GTEST_SKIP() << "hwloc restricts CPUs to this process's cgroup (" << FormatCpuList(live->Cpus())
                 << ") and /sys lists all online ones (" << FormatCpuList(sys->Cpus()) << ")";
  }
  EXPECT_EQ(sys->cores.size(), live->cores.size());
  if (sys->caches.measured && live->caches.measured) {
    EXPECT_EQ(sys->caches.l1d, live->caches.l1d);
    EXPECT_EQ(sys->caches.l2, live->caches.l2);
  }
  // The same netdevs with the same PCI addresses.
  for (const Nic& n : live->nics) {
    const int i = sys->FindNic(n.name);
    ASSERT_GE(i, 0) << n.name;
    EXPECT_EQ(sys->nics[i].bus_id, n.bus_id) << n.name;
  }
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("ciuic_fake_sysfs_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const fs::path sys = root_ / "sys";
    const fs::path cpu = sys / "devices/system/cpu";
    Write(cpu / "online", "0-3");
    for (int c = 0; c < 4; ++c) {
      const fs::path d = cpu / ("cpu" + std::to_string(c));
      Write(d / "topology/physical_package_id", std::to_string(c / 2));
      Write(d / "topology/core_id", "0");
      Cache(d, 0, 1, "Data", "48K", c % 2 == 0 ? std::to_string(c) + "-" + std::to_string(c + 1)
                                               : std::to_string(c - 1) + "-" + std::to_string(c));
      Cache(d, 1, 1, "Instruction", "32K", "0-1");
      Cache(d, 2, 2, "Unified", "2048K", c < 2 ? "0-1" : "2-3");
      Cache(d, 3, 3, "Unified", "32768K", c < 2 ? "0-1" : "2-3");
    }
    const fs::path node = sys / "devices/system/node";
    Write(node / "online", "0-1");
    for (int n = 0; n < 2; ++n) {
      const fs::path d = node / ("node" + std::to_string(n));
      Write(d / "cpulist", n == 0 ? "0-1" : "2-3");
      Write(d / "meminfo", "Node " + std::to_string(n) + " MemTotal:       1048576 kB\n");
      Write(d / "distance", n == 0 ? "10 21" : "21 10");
    }
    // Socket 1: root complex 80 with an InfiniBand NIC and a GPU.
    const fs::path nic = sys / "devices/pci0000:80/0000:80:01.0/0000:81:00.0";
    Pci(sys / "devices/pci0000:80/0000:80:01.0", "0x8086", "0x0604", "1");
    Pci(nic, "0x15b3", "0x020700", "1");
    fs::create_directories(nic / "net/ib0");
    const fs::path gpu = sys / "devices/pci0000:80/0000:80:02.0/0000:82:00.0";
    Pci(sys / "devices/pci0000:80/0000:80:02.0", "0x8086", "0x0604", "1");
    Pci(gpu, "0x10de", "0x030200", "1");
    fs::create_directories(sys / "bus/pci/devices");
    fs::create_symlink("../../../devices/pci0000:80/0000:80:02.0/0000:82:00.0",
                       sys / "bus/pci/devices/0000:82:00.0");
    fs::create_symlink("../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0",
                       sys / "bus/pci/devices/0000:81:00.0");
    Write(sys / "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE");
    fs::create_symlink("../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0",
                       sys / "class/infiniband/mlx5_0/device");
    Write(sys / "class/net/ib0/type", "32");
    fs::create_symlink("../../../devices/pci0000:80/0000:80:01.0/0000:81:00.0", sys / "class/net/ib0/device");
    // Socket 0: a virtio NIC (eth0) with Soft-RoCE on top (rxe0, no PCI).
    const fs::path virtio = sys / "devices/pci0000:00/0000:00:03.0";
    Pci(virtio, "0x1af4", "0x020000", "-1");
    fs::create_directories(virtio / "virtio1/net/eth0");
    Write(sys / "class/net/eth0/type", "1");
    fs::create_symlink("../../../devices/pci0000:00/0000:00:03.0/virtio1", sys / "class/net/eth0/device");
    Write(sys / "class/net/lo/type", "772");  // no device link: virtual
    Write(sys / "class/infiniband/rxe0/parent", "eth0");
    Write(sys / "class/infiniband/rxe0/ports/1/state", "4: ACTIVE");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void Write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  static void Cache(const fs::path& cpu, int index, int level, const std::string& type, const std::string& size,
                    const std::string& shared) {
    const fs::path d = cpu / ("cache/index" + std::to_string(index));
    Write(d / "level", std::to_string(level));
    Write(d / "type", type);
    Write(d / "size", size);
    Write(d / "shared_cpu_list", shared);
  }
  static void Pci(const fs::path& d, const std::string& vendor, const std::string& cls, const std::string& numa) {
    Write(d / "vendor", vendor);
    Write(d / "device", "0x1234");
    Write(d / "class", cls);
    Write(d / "numa_node", numa);
  }

  fs::path root_;
};

TEST_F(FakeSysfs, ReadsCpusNumaCachesNicsAndGpus) {
  StatusOr<Topology> t = LoadSysfs(root_.string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->packages.size(), 2u);
  ASSERT_EQ(t->numa_nodes.size(), 2u);
  EXPECT_EQ(t->numa_nodes[1].memory_bytes, 1ull << 30);
  EXPECT_EQ(t->numa_nodes[1].package, 1);
  ASSERT_EQ(t->cores.size(), 2u);
  EXPECT_EQ(t->cores[1].cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(t->NumaDistance(0, 1), 21);
  EXPECT_EQ(t->caches.l1d, 48u * 1024);
  EXPECT_EQ(t->caches.l2, 2u << 20);
  EXPECT_EQ(t->caches.llc, 32u << 20);
  EXPECT_EQ(t->caches.llc_cpus, 2);
  ASSERT_EQ(t->nics.size(), 2u) << t->Summary();
  EXPECT_EQ(t->nics[0].name, "mlx5_0");
  EXPECT_EQ(t->nics[0].netdev, "ib0");
  EXPECT_EQ(t->nics[0].bus_id, "0000:81:00.0");
  EXPECT_EQ(t->nics[0].numa_node, 1);
  EXPECT_EQ(t->nics[0].ports, 1);
  EXPECT_EQ(t->nics[1].name, "rxe0");
  EXPECT_EQ(t->nics[1].netdev, "eth0") << "rxe0 takes over its parent netdev";
  EXPECT_EQ(t->nics[1].bus_id, "0000:00:03.0");
  EXPECT_EQ(t->nics[1].numa_node, -1) << "numa_node -1 on a 2-node machine is unknown";
  ASSERT_EQ(t->gpus.size(), 1u);
  EXPECT_EQ(t->gpus[0].bus_id, "0000:82:00.0");
  EXPECT_EQ(t->gpus[0].numa_node, 1);
  EXPECT_EQ(t->PathBetween({Endpoint::kGpu, 0}, {Endpoint::kNic, 0})->link, Link::kPhb);
  EXPECT_EQ(NearestNicsToGpu(*t, 0, SelectNics(*t, "").value()).value(), std::vector<int>{0});
  EXPECT_EQ(NearestNicsToCpu(*t, 2, SelectNics(*t, "").value()).value(), std::vector<int>{0});
  EXPECT_EQ(NearestNicsToCpu(*t, 0, SelectNics(*t, "").value()).value(), std::vector<int>{0})
      << "a known (remote) NIC before one of unknown locality";
}

TEST_F(FakeSysfs, EmptyTreeIsUnavailable) {
  StatusOr<Topology> t = LoadSysfs((root_ / "nothing").string());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(t.status().message(), HasSubstr("nothing"));
}

}  // namespace
}  // namespace ciuic::topology
