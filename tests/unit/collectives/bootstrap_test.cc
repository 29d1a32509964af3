// The communicator's agreement: host records and rank 0's decision survive
// their text form, malformed ones are named, and Decide follows its rules.
#include "collectives/bootstrap.h"

#include <gtest/gtest.h>

namespace ciuic::collectives {
namespace {

using transport::BackendKind;

TEST(BootstrapTest, RecordsRoundTripAndMalformedOnesAreNamed) {
  HostRecord h{"node17", {0, 1, 5}};
  EXPECT_EQ(h.Encode(), "node17 0,1,5");
  auto back = HostRecord::Decode(h.Encode());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host, "node17");
  EXPECT_EQ(back->cpus, (std::vector<int>{0, 1, 5}));
  auto bare = HostRecord::Decode("node17");
  ASSERT_TRUE(bare.ok());
  EXPECT_TRUE(bare->cpus.empty());
  // One encoding only: no sign, leading zero, trailing comma, extra or
  // other whitespace; CPU numbers within 2^20 (no int overflow).
  for (const char* bad : {"", "a b c", "node 1,,2", "node -1", "node 1x", "node 1,", "node +1", "node 01",
                          "node 1048577", "node 99999999999", "node  1", " node", "node ", "node 1\n",
                          "no\tde 1"}) {
    EXPECT_EQ(HostRecord::Decode(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
  EXPECT_FALSE(HostRecord::OfThisProcess().host.empty());

  CommDecision d;
  d.transport = BackendKind::kTcp;
  d.job_id = "abcd";
  d.ranks_outnumber_cpus = true;
  d.tuning_id = "123";
  d.accumulate = "wire";
  EXPECT_EQ(d.Encode(), "tcp abcd 1 123 wire");
  auto e = CommDecision::Decode(d.Encode());
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->transport, BackendKind::kTcp);
  EXPECT_EQ(e->job_id, "abcd");
  EXPECT_TRUE(e->ranks_outnumber_cpus);
  EXPECT_EQ(e->tuning_id, "123");
  EXPECT_EQ(e->accumulate, "wire");
  for (const char* bad : {"", "tcp abcd 1", "tcp abcd 2 x f32", "rdma abcd 0 none f32", "tcp a 0 none f32 extra",
                          "tcp abcd 1 123", "tcp  abcd 1 123 wire", "tcp abcd 1 123 wire ", "tcp abcd 1 123 wire\n"}) {
    auto s = CommDecision::Decode(bad);
    EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.status().message().find("rank 0"), std::string::npos) << s.status().ToString();
  }
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
  for (const Status& s : {HostRecord::Decode(huge).status(), CommDecision::Decode(huge).status(),
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
  std::vector<HostRecord> one = {{"a", {0}}, {"a", {1}}};
  CommDecision d = Decide(one, c, 2, "none");
  EXPECT_EQ(d.transport, BackendKind::kShm);
  EXPECT_FALSE(d.ranks_outnumber_cpus);
  EXPECT_EQ(d.job_id.size(), 16u);
  EXPECT_NE(Decide(one, c, 2, "none").job_id, d.job_id);  // fresh per communicator
  // Three ranks sharing two CPUs on one host.
  std::vector<HostRecord> over = {{"a", {0, 1}}, {"a", {0, 1}}, {"a", {1}}};
  EXPECT_TRUE(Decide(over, c, 3, "none").ranks_outnumber_cpus);
  // Unknown affinity says nothing.
  std::vector<HostRecord> unknown = {{"a", {}}, {"a", {}}, {"a", {}}};
  EXPECT_FALSE(Decide(unknown, c, 3, "none").ranks_outnumber_cpus);
  // Two hosts: the network (verbs when a device opens, else tcp).
  std::vector<HostRecord> two = {{"a", {0}}, {"b", {0}}};
  const BackendKind net = Decide(two, c, 2, "none").transport;
  EXPECT_TRUE(net == BackendKind::kTcp || net == BackendKind::kVerbs);
  c.transport = "tcp";
  EXPECT_EQ(Decide(one, c, 2, "7").transport, BackendKind::kTcp);
  EXPECT_EQ(Decide(one, c, 2, "7").tuning_id, "7");
  const std::string text = "ciuic-tuning 1\n";
  EXPECT_EQ(TuningId(nullptr), "none");
  EXPECT_EQ(TuningId(&text), TuningId(&text));
  EXPECT_NE(TuningId(&text), "none");
}

}  // namespace
}  // namespace ciuic::collectives
