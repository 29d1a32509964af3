// ciuic-topo prints the plan the runtime applies: on every topology fixture,
// for several jobs, transports and knobs, each rank's line of
// `ciuic-topo --format json` equals what a communicator of that rank
// computes (ComputeRankPlan, the dry run of its Init) from the same
// placement. Plus the plans' shapes on the machines we know (DGX: GPU k,
// NIC mlx5_k, a free NIC-local core each).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ciuic/topology.h"
#include "collectives/topology_plan.h"

namespace ciuic {
namespace {

namespace topo = topology;

std::string Fixture(const std::string& name) { return std::string(CIUIC_FIXTURES) + "/" + name; }

// The "ranks" lines of ciuic-topo's JSON for these arguments and env.
std::vector<std::string> PrintedRanks(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " + CIUIC_TOPO_BIN + " " + args + " --format json 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::vector<std::string> out;
  if (p == nullptr) return out;
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  pclose(p);
  const size_t at = text.find("\"ranks\": [");
  if (at == std::string::npos) {
    ADD_FAILURE() << cmd << ":\n" << text;
    return out;
  }
  const size_t end = text.find("\n  ]", at);
  size_t line = text.find('\n', at) + 1;
  while (line < end) {
    size_t nl = text.find('\n', line);
    std::string l = text.substr(line, nl - line);
    l = l.substr(l.find('{'));
    if (!l.empty() && l.back() == ',') l.pop_back();
    out.push_back(l);
    line = nl + 1;
  }
  return out;
}

struct Knob {
  const char* env;  // "" or "NAME=value"
};

TEST(CiuicTopoPlan, WhatCiuicTopoPrintsIsWhatTheRuntimeApplies) {
  if (!topo::HaveHwloc()) GTEST_SKIP() << "built without hwloc: the XML fixtures cannot be read";
  int cases = 0;
  for (const auto& entry : std::filesystem::directory_iterator(CIUIC_FIXTURES)) {
    if (entry.path().extension() != ".xml") continue;
    const std::string file = entry.path().string();
    StatusOr<topo::Topology> t = topo::LoadXmlFile(file);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    std::vector<int> counts = {1, 2, static_cast<int>(t->numa_nodes.size())};
    if (!t->gpus.empty()) counts.push_back(static_cast<int>(t->gpus.size()));
    for (int n : counts) {
      for (const char* kind : {"shm", "tcp", "verbs"}) {
        for (const Knob& k : {Knob{""}, Knob{"CIUIC_PROGRESS_CPU=none"}, Knob{"CIUIC_GPU=off"}}) {
          SCOPED_TRACE(file + " n=" + std::to_string(n) + " " + kind + " " + k.env);
          Config config;
          config.topo_file = file;
          if (std::string(k.env) == "CIUIC_PROGRESS_CPU=none") config.progress_cpu = Config::kProgressCpuNone;
          if (std::string(k.env) == "CIUIC_GPU=off") config.gpu = "off";
          const std::vector<std::string> printed =
              PrintedRanks(std::string("env ") + k.env, "--xml " + file + " --ranks " + std::to_string(n) +
                                                            " --transport " + kind);
          // The placement ciuic-topo assumed, as rank 0 would publish it.
          StatusOr<topo::LocalJob> job = topo::PlacedJob(*t, config, n, config.gpu != "off", kind);
          ASSERT_TRUE(job.ok()) << job.status().ToString();
          collectives::LocalRanks local;
          for (int r = 0; r < n; ++r) {
            local.ranks.push_back(r);
            local.cpus.push_back(job->cpus[r]);
          }
          StatusOr<collectives::LocalRanks> wire = collectives::LocalRanks::Decode(local.Encode());
          ASSERT_TRUE(wire.ok());
          ASSERT_EQ(printed.size(), static_cast<size_t>(n));
          StatusOr<transport::BackendKind> bk = transport::ParseBackendKind(kind);
          for (int r = 0; r < n; ++r) {
            StatusOr<topo::RankPlan> plan = collectives::ComputeRankPlan(*t, config, *wire, r, *bk);
            ASSERT_TRUE(plan.ok()) << plan.status().ToString();
            EXPECT_EQ(printed[r], topo::FormatRankPlan(*t, *plan)) << "rank " << r;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// The DGX-H100 fixture, one rank per GPU over verbs: GPU k's NIC mlx5_k,
// the pools on its socket, and a whole free core near it for each progress
// thread, no two alike.
TEST(CiuicTopoPlan, DgxRanksGetTheirGpusNicAndAFreeLocalCore) {
  if (!topo::HaveHwloc()) GTEST_SKIP() << "built without hwloc";
  StatusOr<topo::Topology> t = topo::LoadXmlFile(Fixture("dgx_h100.xml"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Config config;
  StatusOr<topo::LocalJob> job = topo::PlacedJob(*t, config, 8, true, "verbs");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<int> progress;
  for (int r = 0; r < 8; ++r) {
    StatusOr<topo::RankPlan> p = topo::PlanRank(*t, config, *job, r);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->gpu, r);
    EXPECT_EQ(p->device, "mlx5_" + std::to_string(r));
    EXPECT_EQ(p->pool_numa_os, r < 4 ? 0 : 1);
    ASSERT_EQ(p->progress_cpus.size(), 1u);
    EXPECT_FALSE(p->progress_shared);
    for (int other = 0; other < 8; ++other) {
      for (int c : job->cpus[other]) EXPECT_NE(c, p->progress_cpus[0]) << "a rank's CPU";
    }
    for (int c : progress) EXPECT_NE(c, p->progress_cpus[0]) << "another progress thread's CPU";
    progress.push_back(p->progress_cpus[0]);
  }
}

// This VM's fixture: one rank on CPU 0 over tcp gets eth0 and CPU 1 for
// its progress thread; two ranks on CPUs 0 and 1 leave none free, so each
// thread stays with its rank; shm has no NIC.
TEST(CiuicTopoPlan, SmallMachinesKeepProgressWithTheRankWhenNoCpuIsFree) {
  if (!topo::HaveHwloc()) GTEST_SKIP() << "built without hwloc";
  StatusOr<topo::Topology> t = topo::LoadXmlFile(Fixture("this_vm.xml"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Config config;
  topo::LocalJob one{{{0}}, {}, "tcp"};
  StatusOr<topo::RankPlan> p = topo::PlanRank(*t, config, one, 0);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->netdev, "eth0");
  EXPECT_EQ(p->progress_cpus, std::vector<int>{1});
  topo::LocalJob two{{{0}, {1}}, {}, "shm"};
  for (int r = 0; r < 2; ++r) {
    StatusOr<topo::RankPlan> q = topo::PlanRank(*t, config, two, r);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->nic, -1);
    EXPECT_TRUE(q->progress_shared);
    EXPECT_EQ(q->progress_cpus, std::vector<int>{r});
  }
  // Unbound ranks (affinity unknown: every CPU) leave the thread unbound.
  topo::LocalJob unbound{{{}}, {}, "shm"};
  StatusOr<topo::RankPlan> u = topo::PlanRank(*t, config, unbound, 0);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->progress_cpus, t->Cpus());
  // CIUIC_SOCKET_IFNAME decides tcp's interface: no NIC from the plan.
  config.socket_ifname = "lo";
  StatusOr<topo::RankPlan> lo = topo::PlanRank(*t, config, one, 0);
  ASSERT_TRUE(lo.ok());
  EXPECT_TRUE(lo->netdev.empty());
  config.progress_cpu = 7;
  EXPECT_EQ(topo::PlanRank(*t, config, one, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(CiuicTopoPlan, LocalRanksRecordsRoundTrip) {
  collectives::LocalRanks l;
  l.ranks = {3, 5};
  l.cpus = {{0, 1, 2}, {}};
  EXPECT_EQ(l.Encode(), "3:0-2;5:");
  StatusOr<collectives::LocalRanks> d = collectives::LocalRanks::Decode(l.Encode());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ranks, l.ranks);
  EXPECT_EQ(d->cpus, l.cpus);
  EXPECT_EQ(d->LocalRankOf(5), 1);
  EXPECT_EQ(d->LocalRankOf(4), -1);
  for (const char* bad : {"3", ":1", "x:1", "3:1-", "3:2-1"}) {
    EXPECT_EQ(collectives::LocalRanks::Decode(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
}

}  // namespace
}  // namespace ciuic
