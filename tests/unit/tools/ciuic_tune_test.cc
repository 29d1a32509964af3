// ciuic-tune end to end: a quick run writes a file LoadTuningFile reads
// (alpha/beta for shm, an all-reduce rule for 2 ranks); bad flags are named;
// a rank that dies stops the run with its reason and leaves no process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ciuic/topology.h"
#include "collectives/tuning.h"
#include "tests/util/proc.h"

namespace ciuic {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int rc = -1;
  std::string output;  // stdout and stderr
};

Result RunCommand(const std::string& cmd) {
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Result RunTune(const std::string& args) { return RunCommand(std::string(CIUIC_TUNE_BIN) + " " + args + " 2>&1"); }

std::string TempPath() {
  char tmpl[] = "/tmp/ciuic-tune-test-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  return tmpl;
}

// DRAM's rate shared by the cores: measured on up to 8 of the machine's
// cores at once, also from a rank its launcher bound to one core.
void ExpectSharedDram(const collectives::Tuning& t) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(t.memory_shared_cores, cpus >= 2 ? static_cast<int>(std::min(8L, cpus)) : 0)
      << collectives::FormatTuning(t);
  if (cpus >= 2) {
    EXPECT_GT(t.memory_shared_gbps, 0);
    // Beyond the last-level cache the measured cores share, where discovery
    // finds one: the instances CPUs 0..cores-1 fill in order.
    StatusOr<topology::Topology> topo = topology::DiscoverLive();
    if (topo.ok() && topo->caches.measured && topo->caches.llc > 0) {
      const long cores = std::min(8L, cpus), per = topo->caches.llc_cpus;
      const size_t instances = per > 0 && per < cores ? static_cast<size_t>((cores + per - 1) / per) : 1;
      EXPECT_EQ(t.memory_shared_beyond, topo->caches.llc * instances);
    } else {
      EXPECT_EQ(t.memory_shared_beyond, 0u);
    }
  }
}

TEST(CiuicTuneTest, QuickRunWritesALoadableFile) {
  const std::string path = TempPath();
  const Result r = RunTune("--quick -n 2 -t shm -o " + path);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("Out of bounds values : 0 OK"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# allreduce on shm, 2 ranks"), std::string::npos) << r.output;
  StatusOr<collectives::Tuning> t = collectives::LoadTuningFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->backends.size(), 1u);
  EXPECT_EQ(t->backends[0].backend, transport::BackendKind::kShm);
  ASSERT_TRUE(t->backends[0].alpha_us.has_value());
  ASSERT_TRUE(t->backends[0].beta_gbps.has_value());
  EXPECT_GT(*t->backends[0].alpha_us, 0);
  EXPECT_GT(*t->backends[0].beta_gbps, 0);
  ASSERT_TRUE(t->backends[0].exchange_gbps && t->backends[0].exchange_dram_gbps) << collectives::FormatTuning(*t);
  EXPECT_GT(*t->backends[0].exchange_gbps, 0);
  EXPECT_GT(*t->backends[0].exchange_dram_gbps, 0);
  // One step alone, 64 KiB to 16 MiB each way.
  ASSERT_EQ(t->backends[0].exchange_steps.size(), 6u) << collectives::FormatTuning(*t);
  EXPECT_EQ(t->backends[0].exchange_steps.front().first, size_t{64} << 10);
  EXPECT_EQ(t->backends[0].exchange_steps.back().first, size_t{16} << 20);
  // Forked unbound, the pair could run on two cores (unless this test
  // itself was confined to one CPU, which its children inherit).
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(t->backends[0].pair_cores, CPU_COUNT(&set) == 1 ? 1 : 2) << collectives::FormatTuning(*t);
  EXPECT_FALSE(t->gammas.empty());
  ExpectSharedDram(*t);
  // Rules cover every size from 0 for 2 ranks, and nothing else.
  EXPECT_TRUE(collectives::TunedAlgorithm(*t, collectives::Collective::kAllReduce, transport::BackendKind::kShm, 2, 0)
                  .has_value());
  for (const collectives::TuningRule& rule : t->rules) {
    EXPECT_EQ(rule.nranks, 2) << collectives::FormatRule(rule);
    EXPECT_EQ(rule.backend, transport::BackendKind::kShm);
    EXPECT_EQ(rule.nhosts, 1) << collectives::FormatRule(rule);
  }
  // Measured on one machine: said so, and its rules do not reach a job
  // across hosts.
  EXPECT_TRUE(collectives::MeasuredOnOneMachine(*t));
  EXPECT_FALSE(collectives::TunedAlgorithm(*t, collectives::Collective::kAllReduce, transport::BackendKind::kShm, 2, 0,
                                           /*nhosts=*/2)
                   .has_value());
}

// A gathering algorithm (swinglat: every rank's vector in scratch) is not
// timed at sizes the communicator would refuse under CIUIC_SCRATCH_MAX; the
// run says so and still writes its rules from the others.
TEST(CiuicTuneTest, SizesOverTheScratchLimitAreSkippedAndSaid) {
  const std::string path = TempPath();
  const Result r = RunCommand("CIUIC_SCRATCH_MAX=1 " + std::string(CIUIC_TUNE_BIN) + " --quick -n 4 -t shm -o " + path +
                              " 2>&1");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("shm 4 ranks swinglat: skipped (from 8 B: its scratch (32 B, every rank's vector) is over "
                          "16 B (CIUIC_SCRATCH_MAX))"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("shm 4 ranks swinglat     0 sizes"), std::string::npos) << r.output;
  StatusOr<collectives::Tuning> t = collectives::LoadTuningFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(collectives::TunedAlgorithm(*t, collectives::Collective::kAllReduce, transport::BackendKind::kShm, 4, 0)
                  .has_value());
  for (const collectives::TuningRule& rule : t->rules) EXPECT_NE(rule.algorithm, "swinglat");
}

Result RunLaunched(const std::string& launcher_args, const std::string& tune_args) {
  return RunCommand(std::string(CIUIC_RUN_BIN) + " " + launcher_args + " -- " + CIUIC_TUNE_BIN + " " + tune_args +
                    " 2>&1");
}

// The file at `path` (removed), every rule of it for `backend`, `nranks`
// ranks and `nhosts` hosts, whether it says it was measured on one machine,
// and its backend lines: shm measured inside a host, and across hosts the
// network's between_hosts line. The file is returned in *out.
void ExpectFile(const std::string& path, transport::BackendKind backend, int nranks, int nhosts,
                collectives::Tuning* out = nullptr) {
  StatusOr<collectives::Tuning> t = collectives::LoadTuningFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(collectives::MeasuredOnOneMachine(*t), nhosts == 1);
  ASSERT_FALSE(t->rules.empty());
  for (const collectives::TuningRule& rule : t->rules) {
    EXPECT_EQ(rule.backend, backend) << collectives::FormatRule(rule);
    EXPECT_EQ(rule.nranks, nranks) << collectives::FormatRule(rule);
    EXPECT_EQ(rule.nhosts, nhosts) << collectives::FormatRule(rule);
  }
  EXPECT_TRUE(collectives::TunedAlgorithm(*t, collectives::Collective::kAllReduce, backend, nranks, 0, nhosts)
                  .has_value());
  using collectives::TuningLevel;
  const collectives::BackendTuning* shm =
      collectives::FindBackendLine(*t, transport::BackendKind::kShm, TuningLevel::kOneMachine);
  ASSERT_NE(shm, nullptr) << collectives::FormatTuning(*t);
  EXPECT_TRUE(shm->alpha_us && shm->beta_gbps && shm->copy_gbps) << collectives::FormatTuning(*t);
  EXPECT_FALSE(t->gammas.empty()) << collectives::FormatTuning(*t);
  ExpectSharedDram(*t);
  if (nhosts > 1) {
    const collectives::BackendTuning* net = collectives::FindBackendLine(*t, backend, TuningLevel::kBetweenHosts);
    ASSERT_NE(net, nullptr) << collectives::FormatTuning(*t);
    EXPECT_TRUE(net->between_hosts && net->alpha_us && net->beta_gbps) << collectives::FormatTuning(*t);
  }
  if (out != nullptr) *out = *t;
}

// Started by a launcher across simulated hosts, ciuic-tune sweeps the job's
// own communicator (shm inside hosts, tcp between, hier a candidate) and
// rank 0 writes rules for 4 ranks on 2 hosts; the model's table is the
// two-level one. Both levels are measured: shm inside a host, and tcp
// between hosts at the link's rate (1 Gbit/s: under 0.2 GB/s, below shm);
// and tcp inside a host.
TEST(CiuicTuneTest, LaunchedAcrossHostsWritesTheJobsRules) {
  if (geteuid() != 0) GTEST_SKIP() << "ciuic-run --hosts needs root (network namespaces)";
  const std::string path = TempPath();
  const Result r = RunLaunched("-n 4 --hosts 2 --link-rate 1gbit", "--quick -e 64K -o " + path);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("[0] # allreduce on shm+tcp (tcp), 4 ranks on 2 hosts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] # shm   alpha "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] # tcp   between hosts alpha "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] #   hier "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] # Out of bounds values : 0 OK"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[1] #"), std::string::npos) << "only rank 0 reports:\n" << r.output;
  collectives::Tuning t;
  ExpectFile(path, transport::BackendKind::kTcp, 4, 2, &t);
  const collectives::BackendTuning* net =
      collectives::FindBackendLine(t, transport::BackendKind::kTcp, collectives::TuningLevel::kBetweenHosts);
  const collectives::BackendTuning* shm =
      collectives::FindBackendLine(t, transport::BackendKind::kShm, collectives::TuningLevel::kOneMachine);
  ASSERT_TRUE(net != nullptr && shm != nullptr);
  EXPECT_LT(*net->beta_gbps, 0.2) << collectives::FormatTuning(t);
  EXPECT_GT(*shm->beta_gbps, *net->beta_gbps) << collectives::FormatTuning(t);
  // tcp inside a host too (a plain line): what the CPU pays per byte of tcp,
  // which ciuic-sim --cpu-cores charges apart from the links; faster than
  // the 1 Gbit/s link, and its own line, not the network's.
  const collectives::BackendTuning* inside =
      collectives::FindBackendLine(t, transport::BackendKind::kTcp, collectives::TuningLevel::kOneMachine);
  ASSERT_NE(inside, nullptr) << collectives::FormatTuning(t);
  EXPECT_NE(inside, net);
  EXPECT_FALSE(inside->between_hosts);
  ASSERT_TRUE(inside->alpha_us && inside->beta_gbps) << collectives::FormatTuning(t);
  EXPECT_GT(*inside->beta_gbps, 2 * *net->beta_gbps) << collectives::FormatTuning(t);
  // Each measured pair says whether the launcher bound it to one core.
  EXPECT_TRUE(inside->pair_cores && net->pair_cores && shm->pair_cores) << collectives::FormatTuning(t);
  EXPECT_TRUE(inside->exchange_gbps && net->exchange_gbps && shm->exchange_gbps) << collectives::FormatTuning(t);
  // Between hosts only: the machine's CPU time per byte (from /proc/stat).
  ASSERT_TRUE(net->cpu_gbps.has_value()) << collectives::FormatTuning(t);
  EXPECT_GT(*net->cpu_gbps, 0);
  EXPECT_FALSE(inside->cpu_gbps || shm->cpu_gbps) << collectives::FormatTuning(t);
  EXPECT_NE(r.output.find("per second of the machine's CPU time"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] # tcp   alpha "), std::string::npos) << r.output;
}

// Ranks started with other sizes than rank 0 would sweep different
// sizes: every rank stops with an error naming the rank and both flag sets.
TEST(CiuicTuneTest, LaunchedRanksMustAgreeOnTheirFlags) {
  const std::string path = TempPath();
  std::remove(path.c_str());
  const Result r = RunCommand(std::string(CIUIC_RUN_BIN) + " -n 2 -- sh -c 'exec " + CIUIC_TUNE_BIN +
                              " --quick -e $((CIUIC_RANK ? 8 : 4))K -o " + path + "' 2>&1");
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 was started with -b 8 -e 8192 --quick, rank 0 with -b 8 -e 4096 --quick"),
            std::string::npos)
      << r.output;
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "a file was written";
  std::remove(path.c_str());
}

// On one host a launched run tunes shm for its rank count, marked one host.
TEST(CiuicTuneTest, LaunchedOnOneHostTunesItsRankCount) {
  const std::string path = TempPath();
  const Result r = RunLaunched("-n 3", "--quick -e 4K -o " + path);
  ASSERT_EQ(r.rc, 0) << r.output;
  ExpectFile(path, transport::BackendKind::kShm, 3, 1);
}

// Under a forced CIUIC_TRANSPORT the job's pairs inside the host use it:
// that is what is measured and tuned (a plain tcp line), not shm, which the
// job does not use.
TEST(CiuicTuneTest, LaunchedUnderAForcedTransportMeasuresThatTransport) {
  const std::string path = TempPath();
  const Result r = RunLaunched("-n 2 --transport tcp", "--quick -e 4K -o " + path);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("[0] # tcp   alpha "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[0] # shm "), std::string::npos) << r.output;
  StatusOr<collectives::Tuning> t = collectives::LoadTuningFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  using collectives::TuningLevel;
  const collectives::BackendTuning* tcp =
      collectives::FindBackendLine(*t, transport::BackendKind::kTcp, TuningLevel::kOneMachine);
  ASSERT_NE(tcp, nullptr) << collectives::FormatTuning(*t);
  EXPECT_FALSE(tcp->between_hosts);
  EXPECT_TRUE(tcp->alpha_us && tcp->beta_gbps && tcp->copy_gbps) << collectives::FormatTuning(*t);
  EXPECT_EQ(collectives::FindBackendLine(*t, transport::BackendKind::kShm, TuningLevel::kOneMachine), nullptr)
      << collectives::FormatTuning(*t);
  ASSERT_FALSE(t->rules.empty());
  for (const collectives::TuningRule& rule : t->rules) {
    EXPECT_EQ(rule.backend, transport::BackendKind::kTcp) << collectives::FormatRule(rule);
    EXPECT_EQ(rule.nranks, 2) << collectives::FormatRule(rule);
  }
}

TEST(CiuicTuneTest, LaunchedRefusesRankAndTransportFlags) {
  Result r = RunLaunched("-n 2", "-n 2 -o /dev/null");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("-n: the launcher sets the ranks (2)"), std::string::npos) << r.output;
  r = RunLaunched("-n 2", "-t tcp -o /dev/null");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("-t: the launcher sets the ranks (2) and the job's hosts decide the transports"),
            std::string::npos)
      << r.output;
}

TEST(CiuicTuneTest, CheckParsesAFile) {
  const std::string path = TempPath();
  {
    std::ofstream f(path);
    f << "ciuic-tuning 1\nrule allreduce shm ranks 2 from 64K ring  # hand-edited\n";
  }
  Result r = RunTune("--check " + path);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("\nrule allreduce shm ranks 2 from 65536 ring\n"), std::string::npos) << r.output;
  {
    std::ofstream f(path, std::ios::app);
    f << "rule allreduce shm ranks 2 from 0 tree\n";
  }
  r = RunTune("--check " + path);
  std::remove(path.c_str());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("CIUIC_TUNING_FILE: " + path + ":3: rules for allreduce shm ranks 2 are not sorted"),
            std::string::npos)
      << r.output;
}

TEST(CiuicTuneTest, BadFlagsAreNamed) {
  const struct {
    const char* args;
    const char* message;
  } kCases[] = {
      {"-n 1", "-n/--ranks '1': expected rank counts from 2 to 64"},
      {"-n 2,x", "-n/--ranks '2,x'"},
      {"-t ib", "-t/--transport 'ib': expected shm, tcp, verbs"},
      {"-b 0", "-b/--min-bytes '0'"},
      {"-e 1Q", "-e/--max-bytes '1Q'"},
      {"-b 1M -e 1K", "-b (1048576) is larger than -e (1024)"},
      {"--bogus", "unknown flag '--bogus'"},
      {"-o", "-o needs a value"},
      {"extra", "unexpected argument 'extra'"},
  };
  for (const auto& c : kCases) {
    const Result r = RunTune(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}

TEST(CiuicTuneTest, ADeadRankStopsTheRunWithItsReason) {
  const std::string path = TempPath();
  std::remove(path.c_str());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t tool = fork();
  ASSERT_GE(tool, 0);
  if (tool == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execl(CIUIC_TUNE_BIN, CIUIC_TUNE_BIN, "-n", "2", "-t", "shm", "-o", path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  // Read until the sweep starts, then kill one of its ranks.
  std::string output;
  char buf[4096];
  while (output.find("# allreduce sweep") == std::string::npos) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  std::vector<pid_t> ranks;
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (ranks.size() < 2 && Clock::now() < until) {
    ranks = testing::ChildrenOf(tool);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ranks.size(), 2u) << output;
  ASSERT_EQ(kill(ranks[1], SIGKILL), 0);
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(tool, &status, 0), tool);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 1) << output;
  EXPECT_NE(output.find("2-rank sweep: rank "), std::string::npos) << output;
  EXPECT_NE(output.find("killed by signal 9"), std::string::npos) << output;
  // Both ranks are gone (reaped, not orphaned), and no file was written.
  for (pid_t p : ranks) EXPECT_NE(kill(p, 0), 0) << "rank process " << p << " still exists";
  std::ifstream written(path);
  EXPECT_FALSE(written.good());
}

}  // namespace
}  // namespace ciuic
