// The communicator's agreement: host records and rank 0's decision survive
// their text form, malformed ones are named, and Decide follows its rules.
#include "collectives/bootstrap.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "transport/backend.h"
#include "transport/bootstrap.h"

namespace ciuic::collectives {
namespace {

using transport::BackendKind;

TEST(BootstrapTest, RecordsRoundTripAndMalformedOnesAreNamed) {
  HostRecord h{"node17", "boot/pid:[1]/node17", true, {0, 1, 5}};
  EXPECT_EQ(h.Encode(), "node17 boot/pid:[1]/node17 1 0,1,5");
  auto back = HostRecord::Decode(h.Encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host, "node17");
  EXPECT_EQ(back->key, "boot/pid:[1]/node17");
  EXPECT_TRUE(back->verbs);
  EXPECT_EQ(back->cpus, (std::vector<int>{0, 1, 5}));
  auto bare = HostRecord::Decode("node17 k 0");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->cpus.empty());
  EXPECT_FALSE(bare->verbs);
  // One encoding only: no sign, leading zero, trailing comma, extra or
  // other whitespace; CPU numbers within 2^20 (no int overflow); a key and
  // a verbs bit always.
  for (const char* bad : {"", "node17", "node 1,2", "a b c", "a b 2", "a b 0 1 2", "node k 0 1,,2", "node k 0 -1",
                          "node k 0 1x", "node k 0 1,", "node k 0 +1", "node k 0 01", "node k 0 1048577",
                          "node k 0 99999999999", "node k 0  1", " node k 0", "node k 0 ", "node k 0 1\n",
                          "no\tde k 0 1"}) {
    EXPECT_EQ(HostRecord::Decode(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
  const HostRecord here = HostRecord::OfThisProcess("", false);
  EXPECT_FALSE(here.host.empty());
  // The key ends with the host name; CIUIC_HOST_ID is appended to it.
  EXPECT_EQ(here.key.substr(here.key.size() - here.host.size()), here.host);
  EXPECT_EQ(HostRecord::OfThisProcess("h1", false).key, here.key + "/h1");
  if (!transport::ProcessIdentity().empty()) {
    EXPECT_GT(here.key.size(), here.host.size() + 10) << here.key;
  }

  CommDecision d;
  d.transport = BackendKind::kTcp;
  d.job_id = "abcd";
  d.ranks_outnumber_cpus = true;
  d.tuning_id = "123";
  d.accumulate = "wire";
  d.host_of = {0, 0, 1};
  d.verbs = {true, false, true};
  EXPECT_EQ(d.Encode(), "tcp abcd 1 123 wire 0 0,0,1 101 -");
  auto e = CommDecision::Decode(d.Encode(), 3);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->transport, BackendKind::kTcp);
  EXPECT_EQ(e->job_id, "abcd");
  EXPECT_TRUE(e->ranks_outnumber_cpus);
  EXPECT_EQ(e->tuning_id, "123");
  EXPECT_EQ(e->accumulate, "wire");
  EXPECT_FALSE(e->forced);
  EXPECT_EQ(e->host_of, d.host_of);
  EXPECT_EQ(e->verbs, d.verbs);
  EXPECT_EQ(e->machine_cpus, 0);
  // The CPUs of a job on one machine ride on the oversubscription flag.
  d.machine_cpus = 12;
  EXPECT_EQ(d.Encode(), "tcp abcd 1/12 123 wire 0 0,0,1 101 -");
  e = CommDecision::Decode(d.Encode(), 3);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->machine_cpus, 12);
  EXPECT_TRUE(e->ranks_outnumber_cpus);
  d.machine_cpus = 0;
  // Host indices in order of first appearance (one encoding), as many verbs
  // bits as ranks.
  for (const char* bad : {"", "tcp abcd 1", "tcp abcd 2 x f32", "rdma abcd 0 none f32 0 0 0 -", "tcp a 0 none f32 extra",
                          "tcp abcd 1 123", "tcp abcd 1 123 wire", "tcp  abcd 1 123 wire 0 0 0",
                          "tcp abcd 1 123 wire 0 0 0 ", "tcp abcd 1 123 wire 0 0 0\n", "tcp abcd 1 123 wire 2 0 0 -",
                          "tcp abcd 1 123 wire 0 1 0 -", "tcp abcd 1 123 wire 0 0,2 00 -", "tcp abcd 1 123 wire 0 0,1 0 -",
                          "tcp abcd 1 123 wire 0 0,1 012 -", "tcp abcd 1 123 wire 0 0,,1 000 -",
                          "tcp abcd 1 123 wire 0 0,01 00 -", "tcp abcd 1 123 wire 0 0, 0 -",
                          "tcp abcd 1 123 wire 0 0 0 - extra", "tcp abcd 1/0 123 wire 0 0,0 00 -",
                          "tcp abcd 1/ 123 wire 0 0,0 00 -", "tcp abcd 1/012 123 wire 0 0,0 00 -",
                          "tcp abcd 1/-2 123 wire 0 0,0 00 -", "tcp abcd /4 123 wire 0 0,0 00 -",
                          "tcp abcd 1/4/4 123 wire 0 0,0 00 -", "tcp abcd 2/4 123 wire 0 0,0 00 -"}) {
    auto s = CommDecision::Decode(bad, 2);
    EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.status().message().find("rank 0"), std::string::npos) << s.status().ToString();
  }
  // A record for another size is refused, a long one before its lists are
  // read past the communicator's size.
  for (int n : {2, 4}) {
    auto s = CommDecision::Decode(d.Encode(), n);
    EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << n;
    EXPECT_NE(s.status().message().find("for a communicator of " + std::to_string(n)), std::string::npos)
        << s.status().ToString();
  }
  std::string many = "tcp abcd 1 123 wire 0 0";  // + the verbs list and knobs below
  for (int r = 1; r < (1 << 20); ++r) many += ",0";
  auto s = CommDecision::Decode(many + " " + std::string(1 << 20, '0') + " -", 4);
  EXPECT_EQ(s.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(s.status().message().find("more than 4 ranks"), std::string::npos) << s.status().ToString();
}

// The schedule knobs travel in the decision and are compared by meaning
// (CIUIC_ALGO's canonical form), the first difference named.
TEST(BootstrapTest, ScheduleKnobsAreCanonicalAndTheFirstDifferenceIsNamed) {
  Config a, b;
  ASSERT_TRUE(a.Set("CIUIC_ALGO", "RING").ok());
  ASSERT_TRUE(b.Set("CIUIC_ALGO", "allreduce:ring,ring").ok());
  StatusOr<std::string> ka = ScheduleKnobs(a), kb = ScheduleKnobs(b);
  ASSERT_TRUE(ka.ok() && kb.ok()) << ka.status().ToString() << kb.status().ToString();
  EXPECT_EQ(*ka, *kb);
  EXPECT_EQ(ka->find(' '), std::string::npos) << *ka;
  EXPECT_NE(ka->find("CIUIC_ALGO=allreduce:ring,"), std::string::npos) << *ka;
  EXPECT_TRUE(SameScheduleKnobs(*ka, *kb, 1).ok());
  Config c;
  EXPECT_EQ(*ScheduleKnobs(c), "CIUIC_ALGO=auto;CIUIC_NCHANNELS=1;CIUIC_KNOMIAL_RADIX=4;CIUIC_PAT_AGGREGATION=0;CIUIC_SCRATCH_MAX=1073741824");
  c.nchannels = 4;
  Status s = SameScheduleKnobs(*ScheduleKnobs(c),
                               "CIUIC_ALGO=auto;CIUIC_NCHANNELS=1;CIUIC_KNOMIAL_RADIX=4;CIUIC_PAT_AGGREGATION=0;CIUIC_SCRATCH_MAX=1073741824", 3);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 3: CIUIC_NCHANNELS=4 differs from rank 0's 1"), std::string::npos) << s.ToString();
  // Rank 0's record from another version (no such knob): named as unset.
  s = SameScheduleKnobs("CIUIC_ALGO=auto;CIUIC_NCHANNELS=1;CIUIC_X=1", "CIUIC_ALGO=auto;CIUIC_NCHANNELS=1", 2);
  EXPECT_NE(s.message().find("CIUIC_X=1 differs from rank 0's (not set)"), std::string::npos) << s.ToString();
  // The default radix and 4 are the same radix.
  Config four;
  ASSERT_TRUE(four.Set("CIUIC_KNOMIAL_RADIX", "4").ok());
  EXPECT_EQ(*ScheduleKnobs(four), *ScheduleKnobs(Config()));
  Config bad;
  ASSERT_TRUE(bad.Set("CIUIC_ALGO", "nosuchalgo").ok());
  EXPECT_FALSE(ScheduleKnobs(bad).ok());
  // Through the decision's encoding.
  CommDecision d = Decide({{"a", "ka", false, {}}, {"a", "ka", false, {}}}, c, 2, "none");
  EXPECT_EQ(d.knobs, "CIUIC_ALGO=auto;CIUIC_NCHANNELS=4;CIUIC_KNOMIAL_RADIX=4;CIUIC_PAT_AGGREGATION=0;CIUIC_SCRATCH_MAX=1073741824");
  StatusOr<CommDecision> back = CommDecision::Decode(d.Encode(), 2);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->knobs, d.knobs);
}

TEST(BootstrapTest, LocalRanksRoundTripAndMalformedOnesAreNamed) {
  LocalRanks l;
  l.ranks = {0, 2};
  l.cpus = {{0, 1, 2, 3}, {5}};
  EXPECT_EQ(l.Encode(), "0:0-3;2:5");
  auto back = LocalRanks::Decode(l.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ranks, l.ranks);
  EXPECT_EQ(back->cpus, l.cpus);
  // Ranks as Encode writes them (no sign, leading zero, int overflow), and
  // a bounded sum of CPUs: two full ranges would be 8 MiB from 30 bytes.
  for (const char* bad : {"+1:0", "01:0", "99999999999:0", ":0", "1", "1:x", "1:0-1048576;2:0-1048576"}) {
    EXPECT_EQ(LocalRanks::Decode(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
}

TEST(BootstrapTest, AMalformedRecordIsQuotedShortAndPrintable) {
  // A record comes from another process: its error quotes at most 64
  // printable characters, never a megabyte or a forged log line.
  const std::string huge = "node\n[fake] " + std::string(1 << 20, 'x');
  const std::string huge_cpus = "0:" + huge;
  for (const Status& s : {HostRecord::Decode(huge).status(), CommDecision::Decode(huge, 2).status(),
                          LocalRanks::Decode(huge).status(), LocalRanks::Decode(huge_cpus).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_LT(s.message().size(), 400u) << s.message().substr(0, 500);
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
    EXPECT_NE(s.message().find("node\\x0a[fake] xxx"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("..."), std::string::npos) << s.message();
  }
}

TEST(BootstrapTest, DecideFollowsHostsCpusAndTheKnob) {
  Config c;
  std::vector<HostRecord> one = {{"a", "ka", false, {0}}, {"a", "ka", false, {1}}};
  CommDecision d = Decide(one, c, 2, "none");
  EXPECT_EQ(d.transport, BackendKind::kShm);
  EXPECT_FALSE(d.ranks_outnumber_cpus);
  EXPECT_EQ(d.job_id.size(), 16u);
  EXPECT_NE(Decide(one, c, 2, "none").job_id, d.job_id);  // fresh per communicator
  // Three ranks sharing two CPUs on one host.
  std::vector<HostRecord> over = {{"a", "ka", false, {0, 1}}, {"a", "ka", false, {0, 1}}, {"a", "ka", false, {1}}};
  EXPECT_TRUE(Decide(over, c, 3, "none").ranks_outnumber_cpus);
  // One machine: the CPUs its ranks may use together.
  EXPECT_EQ(d.machine_cpus, 2);
  EXPECT_EQ(Decide(over, c, 3, "none").machine_cpus, 2);
  // Two simulated hosts of one machine (one boot id) on one CPU: their
  // ranks still share it.
  std::vector<HostRecord> split = {{"a", "boot1/ns/a", false, {0}}, {"b", "boot1/ns/b", false, {0}}};
  EXPECT_TRUE(Decide(split, c, 2, "none").ranks_outnumber_cpus);
  EXPECT_EQ(Decide(split, c, 2, "none").nhosts(), 2);
  EXPECT_EQ(Decide(split, c, 2, "none").machine_cpus, 1);
  // Unknown affinity says nothing.
  std::vector<HostRecord> unknown = {{"a", "ka", false, {}}, {"a", "ka", false, {}}, {"a", "ka", false, {}}};
  EXPECT_FALSE(Decide(unknown, c, 3, "none").ranks_outnumber_cpus);
  EXPECT_EQ(Decide(unknown, c, 3, "none").machine_cpus, 0);
  std::vector<HostRecord> partly = {{"a", "ka", false, {0}}, {"a", "ka", false, {}}};
  EXPECT_EQ(Decide(partly, c, 2, "none").machine_cpus, 0);
  // Two hosts: the network (verbs when every rank can open a device).
  std::vector<HostRecord> two = {{"a", "ka", false, {0}}, {"b", "kb", false, {0}}};
  EXPECT_EQ(Decide(two, c, 2, "none").transport, BackendKind::kTcp);
  EXPECT_EQ(Decide(two, c, 2, "none").machine_cpus, 0);  // two machines
  two[0].verbs = two[1].verbs = true;
  EXPECT_EQ(Decide(two, c, 2, "none").transport, BackendKind::kVerbs);
  // Hosts are keys, not names: one name on two boots is two hosts.
  std::vector<HostRecord> same_name = {{"a", "boot1/a", false, {0}}, {"a", "boot2/a", false, {0}}};
  EXPECT_EQ(Decide(same_name, c, 2, "none").host_of, (std::vector<int>{0, 1}));
  c.transport = "tcp";
  EXPECT_EQ(Decide(one, c, 2, "7").transport, BackendKind::kTcp);
  EXPECT_TRUE(Decide(one, c, 2, "7").forced);
  EXPECT_EQ(Decide(one, c, 2, "7").tuning_id, "7");
  const std::string text = "ciuic-tuning 1\n";
  EXPECT_EQ(TuningId(nullptr), "none");
  EXPECT_EQ(TuningId(&text), TuningId(&text));
  EXPECT_NE(TuningId(&text), "none");
}

TEST(BootstrapTest, PairsTakeShmInsideAHostAndTheNetworkBetween) {
  Config c;
  // Hosts 2 + 1 + 2 (ranks 0,3 | 1 | 2,4 by key), verbs on ranks 0, 2, 4.
  std::vector<HostRecord> recs = {{"x", "k0", true, {}},
                                  {"y", "k1", false, {}},
                                  {"z", "k2", true, {}},
                                  {"x", "k0", false, {}},
                                  {"z", "k2", true, {}}};
  const CommDecision d = Decide(recs, c, 5, "none");
  EXPECT_FALSE(d.forced);
  EXPECT_EQ(d.host_of, (std::vector<int>{0, 1, 2, 0, 2}));
  EXPECT_EQ(d.nhosts(), 3);
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 5; ++b) EXPECT_EQ(PairKind(d, a, b), PairKind(d, b, a)) << a << "," << b;
  }
  EXPECT_EQ(PairKind(d, 0, 3), BackendKind::kShm);
  EXPECT_EQ(PairKind(d, 2, 4), BackendKind::kShm);
  EXPECT_EQ(PairKind(d, 0, 2), BackendKind::kVerbs);  // both can
  EXPECT_EQ(PairKind(d, 0, 1), BackendKind::kTcp);    // rank 1 cannot
  EXPECT_EQ(PairKind(d, 3, 4), BackendKind::kTcp);    // rank 3 cannot
  EXPECT_EQ(d.KindsInUse(), (std::vector<BackendKind>{BackendKind::kShm, BackendKind::kTcp, BackendKind::kVerbs}));
  EXPECT_EQ(d.CollectiveKind(), BackendKind::kTcp);
  // 10 pairs: 2 inside hosts; between, verbs for 0-2, 0-4 (2), tcp for 6.
  EXPECT_EQ(DescribeRoutes(d, {"x", "y", "z"}),
            "3 hosts (x: ranks 0,3; y: ranks 1; z: ranks 2,4): shm inside hosts (2 pairs), between hosts tcp (6 "
            "pairs) and verbs (2 pairs)");
  auto back = CommDecision::Decode(d.Encode(), 5);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (int a = 0; a < 5; ++a) {
    for (int b = 0; b < 5; ++b) EXPECT_EQ(PairKind(*back, a, b), PairKind(d, a, b));
  }
  // One rank per host: no shm pair; one host: shm only.
  const CommDecision spread = Decide({{"a", "ka", false, {}}, {"b", "kb", false, {}}}, c, 2, "none");
  EXPECT_EQ(spread.KindsInUse(), (std::vector<BackendKind>{BackendKind::kTcp}));
  const CommDecision local = Decide({{"a", "ka", true, {}}, {"a", "ka", true, {}}}, c, 2, "none");
  EXPECT_EQ(local.KindsInUse(), (std::vector<BackendKind>{BackendKind::kShm}));
  EXPECT_EQ(local.CollectiveKind(), BackendKind::kShm);
  // CIUIC_TRANSPORT: one kind for every pair, even inside a host.
  c.transport = "tcp";
  const CommDecision forced = Decide(recs, c, 5, "none");
  EXPECT_TRUE(forced.forced);
  EXPECT_EQ(PairKind(forced, 0, 3), BackendKind::kTcp);
  EXPECT_EQ(PairKind(forced, 0, 2), BackendKind::kTcp);
  EXPECT_EQ(forced.KindsInUse(), (std::vector<BackendKind>{BackendKind::kTcp}));
  EXPECT_EQ(DescribeRoutes(forced, {}), "tcp for all 10 pairs (CIUIC_TRANSPORT)");
}

// A FileStore in a fresh temporary directory, removed afterwards.
struct TempFileStore {
  TempFileStore() {
    char tmpl[] = "/tmp/ciuic-bootstrap-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    dir = tmpl;
    auto s = transport::FileStore::Open(dir);
    if (s.ok()) store = std::move(*s);
  }
  ~TempFileStore() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  std::string dir;
  std::unique_ptr<transport::FileStore> store;
};

// CIUIC_TRANSPORT=shm joins one machine only: split hosts of one machine
// pass, ranks on two machines are refused, naming each machine's ranks.
TEST(BootstrapTest, ForcedShmAcrossMachinesIsRefusedNamingTheRanks) {
  Config c;
  c.transport = "shm";
  const std::vector<HostRecord> split = {{"a", "boot1/ns1/a/x", false, {}}, {"a", "boot1/ns1/a/y", false, {}}};
  EXPECT_TRUE(ForcedTransportReachesEveryPair(split, Decide(split, c, 2, "none")).ok());
  const std::vector<HostRecord> apart = {{"a", "boot1/ns1/a", false, {}},
                                         {"b", "boot2/ns1/b", false, {}},
                                         {"a", "boot1/ns1/a", false, {}},
                                         {"c", "boot1/ns2/a", false, {}}};  // another pid namespace
  const Status s = ForcedTransportReachesEveryPair(apart, Decide(apart, c, 4, "none"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CIUIC_TRANSPORT=shm"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ranks 0 and 2 on a, rank 1 on b and rank 3 on c"), std::string::npos) << s.message();
  // Hosts known by name only (no /proc): two names are two machines.
  const std::vector<HostRecord> names = {{"a", "a", false, {}}, {"b", "b", false, {}}};
  EXPECT_FALSE(ForcedTransportReachesEveryPair(names, Decide(names, c, 2, "none")).ok());
  // Auto and the network kinds join anything.
  c.transport = "tcp";
  EXPECT_TRUE(ForcedTransportReachesEveryPair(apart, Decide(apart, c, 4, "none")).ok());
  c.transport = "auto";
  EXPECT_TRUE(ForcedTransportReachesEveryPair(apart, Decide(apart, c, 4, "none")).ok());
}

// Through a store: rank 0 refuses, and the other rank reads the refusal at
// once instead of waiting out its timeout for a decision.
TEST(BootstrapTest, EveryRankLearnsRankZerosRefusalAtOnce) {
  TempFileStore t;
  ASSERT_NE(t.store, nullptr) << t.dir;
  Config c;
  c.transport = "shm";
  // Rank 1's record as from another machine.
  ASSERT_TRUE(t.store->Set("t/host/1", HostRecord{"far", "bootX/nsX/far", false, {}}.Encode()).ok());
  const auto start = std::chrono::steady_clock::now();
  auto zero = AgreeOnCommunicator(*t.store, "t", 0, 2, c, "none", std::chrono::milliseconds(20000));
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("rank 1 on far"), std::string::npos) << zero.status().ToString();
  auto one = AgreeOnCommunicator(*t.store, "t", 1, 2, c, "none", std::chrono::milliseconds(20000));
  EXPECT_EQ(one.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(one.status().message().find("rank 0 refused the communicator: CIUIC_TRANSPORT=shm"), std::string::npos)
      << one.status().ToString();
  EXPECT_NE(one.status().message().find("rank 1 on far"), std::string::npos) << one.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "a rank waited out its timeout";
  EXPECT_EQ(CommDecision::Decode("refused x\ny", 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(CommDecision::Decode("refused x\ny", 2).status().message().find("x\\x0ay"), std::string::npos);
}

// The CIUIC_HOST_ID of a key, with and without /proc's boot id (the INFO
// line names a host "<name>[<id>]").
TEST(BootstrapTest, HostIdWithAndWithoutProc) {
  EXPECT_EQ((HostRecord{"a", "boot/ns/a/x", false, {}}.HostId()), "x");
  EXPECT_EQ((HostRecord{"a", "a/x", false, {}}.HostId()), "x");
  EXPECT_EQ((HostRecord{"a", "boot/ns/a", false, {}}.HostId()), "");
  EXPECT_EQ((HostRecord{"a", "a", false, {}}.HostId()), "");
  EXPECT_EQ(HostRecord::OfThisProcess("h7", false).HostId(), "h7");
  EXPECT_EQ(HostRecord::OfThisProcess("", false).HostId(), "");
}

// A rank checks the local ranks rank 0 published for its host against the
// decision: a list without it (or with others' ranks) is data loss.
TEST(BootstrapTest, LocalRanksThatDisagreeWithTheDecisionAreDataLoss) {
  TempFileStore t;
  ASSERT_NE(t.store, nullptr) << t.dir;
  Config c;
  CommDecision d;
  d.transport = BackendKind::kShm;
  d.job_id = "0123abcd";
  d.tuning_id = "none";
  d.accumulate = c.accumulate;
  d.host_of = {0, 0};
  d.verbs = {false, false};
  ASSERT_TRUE(t.store->Set("t/transport", d.Encode()).ok());
  LocalRanks wrong;
  wrong.ranks = {0};
  wrong.cpus = {{}};
  ASSERT_TRUE(t.store->Set("t/local/0", wrong.Encode()).ok());
  LocalRanks local;
  auto one = AgreeOnCommunicator(*t.store, "t", 1, 2, c, "none", std::chrono::milliseconds(5000), &local);
  EXPECT_EQ(one.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(one.status().message().find("(rank 0) are not its decision's (ranks 0 and 1)"), std::string::npos)
      << one.status().ToString();
  LocalRanks right;
  right.ranks = {0, 1};
  right.cpus = {{}, {}};
  ASSERT_TRUE(t.store->Set("t/local/0", right.Encode()).ok());
  auto ok = AgreeOnCommunicator(*t.store, "t", 1, 2, c, "none", std::chrono::milliseconds(5000), &local);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(local.ranks, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace ciuic::collectives
