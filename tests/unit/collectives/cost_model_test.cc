// The alpha-beta-gamma cost model, and selection among schedules by it.
#include "collectives/cost_model.h"
#include "collectives/selection.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace ciuic::collectives {
namespace {

CostParams Verbs() { return DefaultCostParams(transport::BackendKind::kVerbs); }

double PredictOrDie(Collective c, Algorithm a, size_t bytes, int n, const CostParams& p) {
  auto pred = Predict(c, a, bytes, n, p);
  EXPECT_TRUE(pred.ok()) << pred.status().ToString();
  return pred.ok() ? pred->seconds : -1;
}

TEST(CostModelTest, OneMessageIsAlphaPlusBytesTimesBeta) {
  CostParams p;
  p.alpha_s = 1e-6;
  p.beta_s_per_byte = 1e-9;
  p.copy_s_per_byte = 0;
  p.chunk_bytes = 1 << 30;  // one chunk
  auto pred = Predict(Collective::kSend, Algorithm::kPointToPoint, 1000, 2, p);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_DOUBLE_EQ(pred->seconds, 1e-6 + 1000 * 1e-9);
  EXPECT_EQ(pred->max_messages_per_rank, 1u);
  EXPECT_EQ(pred->max_bytes_sent_per_rank, 1000u);
  // Chunked: one alpha, then the chunks follow in a stream.
  p.chunk_bytes = 100;
  pred = Predict(Collective::kSend, Algorithm::kPointToPoint, 1000, 2, p);
  ASSERT_TRUE(pred.ok());
  EXPECT_NEAR(pred->seconds, 1e-6 + 1000 * 1e-9, 1e-12);
  EXPECT_EQ(pred->max_messages_per_rank, 1u);
}

TEST(CostModelTest, TwoLevelsChargeEachPairItsLevelAndShareTheHostLink) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.copy_s_per_byte = 0;
  p.gamma_s_per_byte = 0;
  p.chunk_bytes = 1 << 30;
  // One message between two ranks of one host costs shm's alpha and beta.
  p.host_of = {0, 0};
  auto inside = Predict(Collective::kSend, Algorithm::kPointToPoint, 1000, 2, p);
  ASSERT_TRUE(inside.ok());
  EXPECT_DOUBLE_EQ(inside->seconds, p.intra_alpha_s + 1000 * p.intra_beta_s_per_byte);
  p.host_of = {0, 1};
  auto across = Predict(Collective::kSend, Algorithm::kPointToPoint, 1000, 2, p);
  ASSERT_TRUE(across.ok());
  EXPECT_DOUBLE_EQ(across->seconds, p.alpha_s + 1000 * p.beta_s_per_byte);
  // 2 hosts x 2 ranks at 16 MiB: the ring sends 1.5 vectors over one
  // host's link, hier 1 (two rails of half a vector each): hier wins by
  // about 1.5x, and the model without hosts cannot tell them apart.
  p.chunk_bytes = 512 << 10;
  p.host_of = {0, 0, 1, 1};
  const double ring = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, 16 << 20, 4, p);
  const double hier = PredictOrDie(Collective::kAllReduce, Algorithm::kHierarchical, 16 << 20, 4, p);
  EXPECT_GT(ring / hier, 1.3) << ring << " vs " << hier;
  EXPECT_LT(ring / hier, 1.7) << ring << " vs " << hier;
  // The host link is shared: both of host 0's ranks cross in hier, and the
  // bound is their sum (a vector at beta), not one rank's half.
  auto h = Predict(Collective::kAllReduce, Algorithm::kHierarchical, 16 << 20, 4, p);
  ASSERT_TRUE(h.ok());
  EXPECT_GE(h->resource_bound_s, (16 << 20) * p.beta_s_per_byte * 0.99);
  p.host_of.clear();
  EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, Algorithm::kHierarchical, 16 << 20, 4, p),
                   PredictOrDie(Collective::kAllReduce, Algorithm::kRing, 16 << 20, 4, p));
}

// A map that does not list every rank would put some ranks on hosts and
// leave the rest nowhere: it counts as no map at all.
TEST(CostModelTest, AHostMapOfTheWrongSizeCountsAsNone) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
    p.host_of.clear();
    const double none = PredictOrDie(Collective::kAllReduce, a, 1 << 20, 4, p);
    p.host_of = {0, 0, 1};  // 3 entries for 4 ranks
    EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, a, 1 << 20, 4, p), none) << AlgorithmName(a);
    p.host_of = {0, 0, 1, 1, 2};
    EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, a, 1 << 20, 4, p), none) << AlgorithmName(a);
  }
  // A real map does change it: recursive doubling's first exchange is shm.
  p.host_of = {0, 0, 1, 1};
  EXPECT_LT(PredictOrDie(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 1 << 20, 4, p),
            PredictOrDie(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 1 << 20, 4, CostParams(
                DefaultCostParams(transport::BackendKind::kTcp))));
}

// Above kMaxExactRanks the estimate is rank 0's: each of its message steps
// pays the alpha of its level, not the network's for all.
TEST(CostModelTest, AboveTheExactLimitEachMessagePaysItsLevelsAlpha) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  constexpr int kRanks = 2 * kMaxExactRanks;
  for (int r = 0; r < kRanks; ++r) p.host_of.push_back(r / 8);
  auto hier = Predict(Collective::kAllReduce, Algorithm::kHierarchical, 8, kRanks, p);
  ASSERT_TRUE(hier.ok()) << hier.status().ToString();
  EXPECT_EQ(hier->method, PredictionMethod::kEstimate);  // a host map breaks the symmetry
  const double msgs = static_cast<double>(hier->max_messages_per_rank);
  EXPECT_LT(hier->critical_path_s, msgs * p.alpha_s) << "every message charged the network's alpha";
  EXPECT_GT(hier->critical_path_s, msgs * p.intra_alpha_s);
  p.host_of.clear();
  auto flat = Predict(Collective::kAllReduce, Algorithm::kRing, 8, kRanks, p);
  ASSERT_TRUE(flat.ok());
  ASSERT_EQ(flat->method, PredictionMethod::kEstimate);  // 2 elements in 256 blocks: ranks differ
  EXPECT_NEAR(flat->critical_path_s, static_cast<double>(flat->max_messages_per_rank) * p.alpha_s, 1e-12);
}

// The exact costing's budget and the estimate look past rank 0: on 257 ranks
// rank 0 folds out of swinglat (two steps) while rank 1 takes its pair's sum
// and, as every rank not folded out, reduces 256 vectors.
// Judged by rank 0 alone, ciuic-sim costed every rank's schedule and ran
// out of memory at 65,535 ranks.
TEST(CostModelTest, TheExactBudgetCountsTheLargestScheduleNotRankZeros) {
  constexpr int kRanks = 2 * kMaxExactRanks + 1;
  CollectiveArgs a;
  a.collective = Collective::kAllReduce;
  a.nranks = kRanks;
  a.count = 1024;
  auto s0 = MakeSchedule(Algorithm::kSwingLatency, a);
  a.rank = 1;
  auto s1 = MakeSchedule(Algorithm::kSwingLatency, a);
  ASSERT_TRUE(s0.ok() && s1.ok());
  ASSERT_LE(s0->steps.size(), 3u);
  size_t inputs = 0;
  for (const Step& st : s1->steps) inputs += st.inputs.size();
  ASSERT_GE(inputs, 256u);
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.max_exact_steps = 10 * s0->steps.size() * kRanks;  // rank 0's alone would fit
  auto pred = Predict(Collective::kAllReduce, Algorithm::kSwingLatency, 4096, kRanks, p);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_EQ(pred->method, PredictionMethod::kEstimate);
  EXPECT_EQ(pred->busiest, "rank 1 (estimate)");
  EXPECT_GT(pred->max_messages_per_rank, 2u);  // rank 1's messages, not rank 0's two
  p.max_exact_steps = (s1->steps.size() + inputs) * kRanks;  // now every rank fits
  pred = Predict(Collective::kAllReduce, Algorithm::kSwingLatency, 4096, kRanks, p);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_EQ(pred->method, PredictionMethod::kExact);
}

// The estimate is the largest of the sampled ranks' own estimates, each
// judged as a whole: a binomial reduce's root receives one more message than
// rank n/2, which sends one, so at 64 KiB the root is the larger.
TEST(CostModelTest, TheEstimateIsTheLargestOfTheSampledRanks) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  constexpr int kRanks = 2 * kMaxExactRanks;
  auto pred = Predict(Collective::kReduce, Algorithm::kBinomial, 64 << 10, kRanks, p);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  ASSERT_EQ(pred->method, PredictionMethod::kEstimate);
  CollectiveArgs a;
  a.collective = Collective::kReduce;
  a.nranks = kRanks;
  a.count = (64 << 10) / 4;
  for (int r : {0, 1, kRanks / 2, kRanks - 1}) {
    a.rank = r;
    auto s = MakeSchedule(Algorithm::kBinomial, a);
    ASSERT_TRUE(s.ok());
    size_t recvs = 0;
    for (const Step& st : s->steps) recvs += st.op == StepOp::kRecvReduce ? 1 : 0;
    // Each receive reduces the whole vector: the estimate is at least that.
    EXPECT_GE(pred->seconds, static_cast<double>(recvs) * (a.count * 4 * p.beta_s_per_byte)) << "rank " << r;
  }
  EXPECT_EQ(pred->busiest, "rank 0 (estimate)");
}

// A host's link carries its ranks' bytes; a message's alpha is its own
// rank's time, not the link's: with no bytes to move (beta 0) the shared
// link adds nothing beyond the busiest rank.
TEST(CostModelTest, TheHostLinkCarriesBytesNotAlphas) {
  CostParams p;
  p.alpha_s = 1e-3;
  p.intra_alpha_s = 1e-6;
  p.beta_s_per_byte = p.intra_beta_s_per_byte = 0;
  p.gamma_s_per_byte = p.copy_s_per_byte = 0;
  p.host_of = {0, 0, 1, 1};  // both ranks of each host cross once
  auto rd = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 8, 4, p);
  ASSERT_TRUE(rd.ok()) << rd.status().ToString();
  EXPECT_NEAR(rd->resource_bound_s, p.alpha_s + p.intra_alpha_s, 1e-12)
      << "the two ranks' alphas were summed on their host's link";
}

// The other hierarchical collectives on 2 hosts x 2 ranks at 16 MiB: the
// ring all-gather and reduce-scatter send 3 blocks over a host's link, hier
// 2 (each block crosses once), so hier wins by about 1.5x; on interleaved
// hosts (0,1,0,1) the flat chains cross at every hop and hier's broadcast
// and reduce cross once.
TEST(CostModelTest, TwoLevelsFavourTheOtherHierarchicalCollectives) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.host_of = {0, 0, 1, 1};
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter}) {
    const double ring = PredictOrDie(c, Algorithm::kRing, 16 << 20, 4, p);
    const double hier = PredictOrDie(c, Algorithm::kHierarchical, 16 << 20, 4, p);
    EXPECT_GT(ring / hier, 1.3) << CollectiveName(c) << ": " << ring << " vs " << hier;
    EXPECT_LT(ring / hier, 1.7) << CollectiveName(c) << ": " << ring << " vs " << hier;
  }
  p.host_of = {0, 1, 0, 1};
  for (Collective c : {Collective::kBroadcast, Collective::kReduce}) {
    const double ring = PredictOrDie(c, Algorithm::kRing, 16 << 20, 4, p);
    const double hier = PredictOrDie(c, Algorithm::kHierarchical, 16 << 20, 4, p);
    EXPECT_GT(ring / hier, 1.3) << CollectiveName(c) << ": " << ring << " vs " << hier;
  }
}

TEST(CostModelTest, PipeliningHidesHopsOfAChain) {
  // A broadcast chain over 8 ranks: with small chunks the 7 hops overlap,
  // so the time is close to one transfer, not seven.
  CostParams p;
  p.alpha_s = 1e-6;
  p.beta_s_per_byte = 1e-9;
  p.copy_s_per_byte = 0;
  p.chunk_bytes = 64 << 10;
  const size_t bytes = 64 << 20;
  const double one = bytes * 1e-9;
  const double t = PredictOrDie(Collective::kBroadcast, Algorithm::kRing, bytes, 8, p);
  EXPECT_GT(t, one);
  EXPECT_LT(t, 1.2 * one);
  // Slots as large as the message: the executor still cuts it into 4
  // chunks (PipelineChunkBytes), so the first takes the 7 hops (and their
  // alphas) and the other 3 follow, 10 quarters in all.
  p.chunk_bytes = bytes;
  EXPECT_NEAR(PredictOrDie(Collective::kBroadcast, Algorithm::kRing, bytes, 8, p), 10 * one / 4 + 7e-6, 1e-9);
}

TEST(CostModelTest, ChunksAreTheExecutorsQuarterOfABlock) {
  // An all-reduce's block is count / nranks: a quarter of it in 4 KiB
  // multiples, never below 64 KiB; others cut their whole count; point to
  // point keeps the slot size (0).
  const std::vector<size_t> none;
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllReduce, (4u << 20) / 4, none, 4, 4), 256u << 10);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllReduce, (1u << 20) / 4, none, 4, 4), 64u << 10);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllReduce, 2, none, 4, 2), 64u << 10);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllReduce, 3000, none, 4, 1), 64u << 10);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllReduce, 1000000, none, 4, 2), 503808u);  // 2e6 / 4 up to 4 KiB
  EXPECT_EQ(PipelineChunkBytes(Collective::kBroadcast, (8u << 20) / 4, none, 4, 8), 2u << 20);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllGatherv, 0, {1u << 20, 3u << 20}, 2, 2), 1u << 20);
  EXPECT_EQ(PipelineChunkBytes(Collective::kSend, 1u << 30, none, 4, 2), 0u);
  EXPECT_EQ(PipelineChunkBytes(Collective::kAllToAllv, 1u << 30, none, 4, 2), 0u);
  // Predict cuts steps so: a 2 MiB all-reduce on 4 ranks has 512 KiB
  // steps, cut into 128 KiB chunks with 512 KiB slots as with 128 KiB
  // ones; 64 KiB slots cut finer.
  CostParams p;
  p.alpha_s = 1e-6;
  p.beta_s_per_byte = 1e-9;
  auto path = [&](size_t slot) {
    p.chunk_bytes = slot;
    auto pred = Predict(Collective::kAllReduce, Algorithm::kRing, 2u << 20, 4, p);
    EXPECT_TRUE(pred.ok()) << pred.status().ToString();
    return pred.ok() ? pred->critical_path_s : -1;
  };
  const double quarter = path(128u << 10);
  EXPECT_GT(quarter, 0);
  EXPECT_DOUBLE_EQ(path(512u << 10), quarter);
  EXPECT_DOUBLE_EQ(path(4u << 20), quarter);
  EXPECT_NE(path(64u << 10), quarter);
}

TEST(CostModelTest, RecursiveDoublingForTinyRingForHuge) {
  for (int n : {4, 6, 8, 16}) {
    for (transport::BackendKind kind :
         {transport::BackendKind::kShm, transport::BackendKind::kTcp, transport::BackendKind::kVerbs}) {
      const CostParams p = DefaultCostParams(kind);
      auto tiny = Select(Collective::kAllReduce, 8, n, p, "");
      ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
      EXPECT_EQ(tiny->algorithm->id, Algorithm::kRecursiveDoubling) << tiny->reason;
      auto huge = Select(Collective::kAllReduce, size_t{1} << 30, n, p, "");
      ASSERT_TRUE(huge.ok()) << huge.status().ToString();
      EXPECT_EQ(huge->algorithm->id, Algorithm::kRing) << huge->reason;
      EXPECT_EQ(std::string(huge->name()), "ring");
      EXPECT_EQ(huge->predicted_s.size(), 7u);
      EXPECT_NE(huge->reason.find("ring"), std::string::npos);
    }
  }
}

TEST(CostModelTest, BroadcastBinomialSmallChainLarge) {
  const CostParams p = Verbs();
  auto small = Select(Collective::kBroadcast, 64, 16, p, "");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->algorithm->id, Algorithm::kBinomial) << small->reason;
  auto large = Select(Collective::kBroadcast, 256u << 20, 16, p, "");
  ASSERT_TRUE(large.ok());
  EXPECT_EQ(large->algorithm->id, Algorithm::kRing) << large->reason;
}

// Near-ties go to the algorithm that moves fewer bytes: a 2-rank reduce
// costs the same in the model as ring (reduce-scatter + gather: 3/2 of the
// data moved) and as binomial (the data once), and binomial is picked.
TEST(CostModelTest, NearTiesGoToTheLeastTraffic) {
  for (transport::BackendKind kind : {transport::BackendKind::kShm, transport::BackendKind::kTcp}) {
    const CostParams p = DefaultCostParams(kind);
    auto ring = Predict(Collective::kReduce, Algorithm::kRing, 16u << 20, 2, p);
    auto binomial = Predict(Collective::kReduce, Algorithm::kBinomial, 16u << 20, 2, p);
    ASSERT_TRUE(ring.ok() && binomial.ok());
    EXPECT_LE(ring->seconds, binomial->seconds * 1.03);
    EXPECT_LE(binomial->seconds, ring->seconds * 1.03);
    EXPECT_EQ(binomial->total_bytes_sent, size_t{16} << 20);
    EXPECT_EQ(ring->total_bytes_sent, size_t{24} << 20);
    auto sel = Select(Collective::kReduce, 16u << 20, 2, p, "");
    ASSERT_TRUE(sel.ok()) << sel.status().ToString();
    EXPECT_EQ(sel->algorithm->id, Algorithm::kBinomial) << sel->reason;
  }
}

// Where ranks outnumber their CPUs a reduce of more than 2 ranks runs
// binomial, even where the model alone picks the ring; a forced ring still
// runs, and other collectives are selected as before.
TEST(CostModelTest, ReduceIsBinomialWhereRanksOutnumberTheirCpus) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  auto plain = Select(Collective::kReduce, 1u << 20, 4, p, "");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->algorithm->id, Algorithm::kRing) << plain->reason;  // the model's choice, the premise
  p.ranks_outnumber_cpus = true;
  for (int n : {3, 4, 8}) {
    auto sel = Select(Collective::kReduce, 1u << 20, n, p, "");
    ASSERT_TRUE(sel.ok()) << sel.status().ToString();
    EXPECT_EQ(sel->algorithm->id, Algorithm::kBinomial) << n << " ranks: " << sel->reason;
    EXPECT_NE(sel->reason.find("outnumber their CPUs"), std::string::npos) << sel->reason;
  }
  auto forced = Select(Collective::kReduce, 1u << 20, 4, p, "ring");
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->algorithm->id, Algorithm::kRing);
  auto other = Select(Collective::kBroadcast, 256u << 20, 16, p, "");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->algorithm->id, Algorithm::kRing) << other->reason;
}

TEST(CostModelTest, ForcedAlgorithms) {
  const CostParams p = Verbs();
  auto f = Select(Collective::kAllReduce, 8, 8, p, "rabenseifner");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->algorithm->id, Algorithm::kRabenseifner);
  EXPECT_NE(f->reason.find("forced"), std::string::npos) << f->reason;
  EXPECT_EQ(Select(Collective::kAllReduce, 8, 8, p, "auto")->algorithm->id, Algorithm::kRecursiveDoubling);
  EXPECT_EQ(Select(Collective::kReduce, 8, 8, p, "binomial")->algorithm->id, Algorithm::kBinomial);
  auto bad = Select(Collective::kAllReduce, 8, 8, p, "butterfly");
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("ring, tree, rabenseifner, recdoubling"), std::string::npos)
      << bad.status().ToString();
  EXPECT_EQ(Select(Collective::kAllGather, 8, 8, p, "tree").status().code(), StatusCode::kInvalidArgument);
  CostParams zero = p;
  zero.elem_size = 0;
  EXPECT_EQ(Select(Collective::kAllReduce, 8, 8, zero, "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Select(Collective::kAllReduce, 8, 0, p, "").status().code(), StatusCode::kInvalidArgument);
}

TEST(CostModelTest, EveryCollectiveHasAPrediction) {
  const CostParams p = Verbs();
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                       Collective::kAllGatherv, Collective::kReduceScatter, Collective::kReduceScatterv,
                       Collective::kAllToAll, Collective::kBarrier, Collective::kSend, Collective::kRecv}) {
    for (int n : {1, 2, 5}) {
      if ((c == Collective::kSend || c == Collective::kRecv) && n < 2) continue;
      auto s = Select(c, 4096, n, p, "");
      ASSERT_TRUE(s.ok()) << CollectiveName(c) << " n=" << n << ": " << s.status().ToString();
      for (const auto& [name, t] : s->predicted_s) EXPECT_GE(t, 0) << name;
      EXPECT_FALSE(s->reason.empty());
    }
  }
  // Beyond kMaxExactRanks only rank 0 is costed: estimated where the ranks'
  // schedules differ (uneven blocks), exactly where they are images.
  auto big = Predict(Collective::kAllReduce, Algorithm::kRing, 1 << 20, kMaxExactRanks + 1, p);
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->exact());
  EXPECT_GT(big->seconds, 0);
}

TEST(CostModelTest, DetectsCycles) {
  // Two ranks that each receive before sending: no order exists.
  auto make = [](int rank) {
    Schedule s;
    s.algorithm = "test/cycle";
    s.rank = rank;
    s.nranks = 2;
    Step r;
    r.op = StepOp::kRecv;
    r.recv_peer = 1 - rank;
    r.dst = Range{BufKind::kOutput, 0, 4};
    Step snd;
    snd.op = StepOp::kSend;
    snd.send_peer = 1 - rank;
    snd.src = Range{BufKind::kInput, 0, 4};
    snd.deps = {0};
    s.steps = {r, snd};
    return s;
  };
  auto pred = PredictSchedules({make(0), make(1)}, Verbs());
  EXPECT_EQ(pred.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pred.status().message().find("cycle"), std::string::npos) << pred.status().ToString();
}


TEST(CostModelTest, AForwardingStepStoresAheadOfTheLinksEarlierSends) {
  // Two ranks, each: send 8 chunks to the peer, then receive, reduce and
  // forward 8 chunks, then receive 8 (a 2-rank ring). The executor stores
  // ahead of sending, so the reductions (2 ns a byte) run while the first
  // send (1 ns a byte) still holds the link: the forwarding step's first
  // chunk is stored at 1 + 2 us, the last at 1 + 16; its sends start at
  // the first send's end, 8 us, and end at max(8 + 8, 17 + 1) = 18 us.
  // Waiting for the first send before storing would take 8 + 3 + 7 x 2 = 25.
  const size_t chunk = 1000, n = 8 * chunk / 4;
  auto make = [&](int rank) {
    Schedule s;
    s.algorithm = "test/forward";
    s.rank = rank;
    s.nranks = 2;
    Step snd;
    snd.op = StepOp::kSend;
    snd.send_peer = 1 - rank;
    snd.src = Range{BufKind::kInput, 0, n};
    Step fwd;
    fwd.op = StepOp::kRecvReduceSend;
    fwd.recv_peer = fwd.send_peer = 1 - rank;
    fwd.src = Range{BufKind::kInput, n, n};
    fwd.dst = Range{BufKind::kOutput, n, n};
    Step rcv;
    rcv.op = StepOp::kRecv;
    rcv.recv_peer = 1 - rank;
    rcv.dst = Range{BufKind::kOutput, 0, n};
    s.steps = {snd, fwd, rcv};
    return s;
  };
  CostParams p;
  p.alpha_s = 0;
  p.beta_s_per_byte = 1e-9;
  p.gamma_s_per_byte = 2e-9;
  p.copy_s_per_byte = 0;
  p.chunk_bytes = chunk;
  p.elem_size = 4;
  auto pred = PredictSchedules({make(0), make(1)}, p);
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_NEAR(pred->critical_path_s, 18e-6, 1e-12);
}

// The scale path: where rank 0's schedule and its images are every rank's,
// costing rank 0's steps alone gives exactly what costing every rank's
// gives (times, split, bounds), for every algorithm that has a symmetry,
// on powers of two and not, with pipelining and two channels. The
// algorithms the symmetry is for must have one.
TEST(CostModelSymmetryTest, RankZeroAloneEqualsEveryRank) {
  std::set<std::string> symmetric;
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllToAll, Collective::kBarrier, Collective::kBroadcast, Collective::kReduce}) {
    for (Algorithm a : AlgorithmsFor(c)) {
      for (int n : {8, 12, 64, 128}) {
        // One chunk a step, and several (4 KiB chunks of 24 KiB blocks):
        // forwarding steps then store ahead of their link's earlier sends.
        for (size_t block : {size_t{96}, size_t{96 * 64}}) {
          for (int nch : {1, 2}) {
            CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
            p.chunk_bytes = 4096;
            p.nchannels = nch;
            CollectiveArgs args;
            args.collective = c;
            args.nranks = n;
            args.nchannels = nch;
            args.count = c == Collective::kAllReduce ? static_cast<size_t>(n) * 2 * block : block;
            StatusOr<Symmetry> sym = FindSymmetry(a, args);
            if (!sym.ok()) continue;
            const std::string what = std::string(CollectiveName(c)) + "/" + AlgorithmName(a) + " n=" +
                                     std::to_string(n) + " ch=" + std::to_string(nch) + " block=" +
                                     std::to_string(block) + " " + SymmetryName(*sym);
            symmetric.insert(std::string(CollectiveName(c)) + "/" + AlgorithmName(a));
            std::vector<Schedule> all;
            for (int r = 0; r < n; ++r) {
              args.rank = r;
              StatusOr<Schedule> s = MakeSchedule(a, args);
              ASSERT_TRUE(s.ok()) << what;
              if (r > 0) {
                EXPECT_TRUE(IsSymmetryImage(all[0], *s, *sym)) << what << ": rank " << r << " is not an image";
              }
              all.push_back(*std::move(s));
            }
            StatusOr<Prediction> exact = PredictSchedules(all, p);
            StatusOr<Prediction> sym_pred = PredictSymmetric(all[0], *sym, p);
            ASSERT_TRUE(exact.ok() && sym_pred.ok()) << what;
            EXPECT_EQ(sym_pred->method, PredictionMethod::kSymmetric);
            const double tol = 1e-9 * exact->seconds;
            EXPECT_NEAR(sym_pred->seconds, exact->seconds, tol) << what;
            EXPECT_NEAR(sym_pred->critical_path_s, exact->critical_path_s, tol) << what;
            EXPECT_NEAR(sym_pred->latency_s, exact->latency_s, tol) << what;
            EXPECT_NEAR(sym_pred->bandwidth_s, exact->bandwidth_s, tol) << what;
            EXPECT_NEAR(sym_pred->compute_s, exact->compute_s, tol) << what;
            EXPECT_NEAR(sym_pred->resource_bound_s, exact->resource_bound_s, tol) << what;
            EXPECT_EQ(sym_pred->total_bytes_sent, exact->total_bytes_sent) << what;
            EXPECT_NEAR(exact->latency_s + exact->bandwidth_s + exact->compute_s, exact->critical_path_s, tol) << what;
          }
        }
      }
    }
  }
  // Bruck is not symmetric (its local rotations split at the rank), nor are
  // the trees: beyond kMaxExactRanks they are costed from every rank's
  // schedule (CostParams::max_exact_steps) or estimated.
  for (const char* want : {"allreduce/ring", "allreduce/rabenseifner", "allreduce/swing", "allreduce/recdoubling",
                           "allreduce/knomial", "allgather/ring", "reducescatter/ring", "barrier/dissemination",
                           "allgather/pat", "reducescatter/pat"}) {
    EXPECT_EQ(symmetric.count(want), 1u) << want << " found no symmetry";
  }
  EXPECT_EQ(symmetric.count("allreduce/tree"), 0u);
  EXPECT_EQ(symmetric.count("allgather/bruck"), 0u);
}

// Recursive k-ing on a power of k is symmetric under adding base-k digits
// (xor is base 2): rank 0's schedule alone costs exactly what every rank's
// does, at every radix; off the powers of k (extras fold into proxies) no
// symmetry holds and the scale path estimates.
TEST(CostModelSymmetryTest, KnomialAllReduceHasTheDigitsSymmetry) {
  struct Case {
    int radix, n;
  };
  for (const Case& c : {Case{2, 32}, Case{3, 9}, Case{3, 27}, Case{4, 16}, Case{4, 64}, Case{5, 125}, Case{8, 64},
                        Case{16, 256}, Case{3, 10}, Case{4, 20}}) {
    for (int nch : {1, 2}) {
      CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
      p.chunk_bytes = 4096;
      p.nchannels = nch;
      p.radix = c.radix;
      CollectiveArgs args;
      args.collective = Collective::kAllReduce;
      args.nranks = c.n;
      args.nchannels = nch;
      args.radix = c.radix;
      args.count = static_cast<size_t>(c.n) * 3 * 64 + 5;
      const std::string what = "radix " + std::to_string(c.radix) + " n=" + std::to_string(c.n) + " ch=" +
                               std::to_string(nch);
      StatusOr<Symmetry> sym = FindSymmetry(Algorithm::kKnomial, args);
      bool power = true;
      for (int m = c.n; m > 1; m /= c.radix) power = power && m % c.radix == 0;
      if (!power) {
        EXPECT_FALSE(sym.ok()) << what << ": extras break the symmetry";
        continue;
      }
      ASSERT_TRUE(sym.ok()) << what << ": " << sym.status().ToString();
      // Radix 2 is recursive doubling: xor, found first.
      EXPECT_EQ(*sym, c.radix == 2 ? Symmetry::kXor : Symmetry::Digits(c.radix)) << what;
      std::vector<Schedule> all;
      for (int r = 0; r < c.n; ++r) {
        args.rank = r;
        StatusOr<Schedule> s = MakeSchedule(Algorithm::kKnomial, args);
        ASSERT_TRUE(s.ok()) << what;
        if (r > 0) {
          EXPECT_TRUE(IsSymmetryImage(all[0], *s, *sym)) << what << ": rank " << r;
        }
        all.push_back(*std::move(s));
      }
      // Another base n is a power of is not this schedule's symmetry: some
      // rank is not rank 0's image under it.
      for (int base : {2, 4, 8, 16}) {
        bool power = true;
        for (int m = c.n; m > 1; m /= base) power = power && m % base == 0;
        if (base == c.radix || !power) continue;
        bool all_images = true;
        for (int r = 1; r < c.n; ++r) all_images = all_images && IsSymmetryImage(all[0], all[r], Symmetry::Digits(base));
        EXPECT_FALSE(all_images) << what << " is also base-" << base << " symmetric";
      }
      StatusOr<Prediction> exact = PredictSchedules(all, p);
      StatusOr<Prediction> fast = PredictSymmetric(all[0], *sym, p);
      ASSERT_TRUE(exact.ok() && fast.ok()) << what;
      const double tol = 1e-9 * exact->seconds;
      EXPECT_NEAR(fast->seconds, exact->seconds, tol) << what;
      EXPECT_NEAR(fast->critical_path_s, exact->critical_path_s, tol) << what;
      EXPECT_NEAR(fast->resource_bound_s, exact->resource_bound_s, tol) << what;
      EXPECT_EQ(fast->total_bytes_sent, exact->total_bytes_sent) << what;
    }
  }
}

// A base below 2 is refused, not looped on.
TEST(CostModelSymmetryTest, DigitsBelowBaseTwoAreRefused) {
  EXPECT_EQ(SymmetryImage(Symmetry::Digits(1), 3, 1, 8), -1);
  EXPECT_EQ(SymmetryImage(Symmetry::Digits(0), 3, 1, 8), -1);
  CollectiveArgs args;
  args.nranks = 8;
  args.count = 64;
  StatusOr<Schedule> s0 = MakeSchedule(Algorithm::kRecursiveDoubling, args);
  ASSERT_TRUE(s0.ok());
  args.rank = 3;
  StatusOr<Schedule> s3 = MakeSchedule(Algorithm::kRecursiveDoubling, args);
  ASSERT_TRUE(s3.ok());
  EXPECT_FALSE(IsSymmetryImage(*s0, *s3, Symmetry::Digits(1)));
  EXPECT_TRUE(IsSymmetryImage(*s0, *s3, Symmetry::Digits(2)));  // xor
  StatusOr<Prediction> p = PredictSymmetric(*s0, Symmetry::Digits(1), DefaultCostParams(transport::BackendKind::kVerbs));
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
}

// PAT with bounded aggregation keeps the translation symmetry: rank 0's
// schedule alone costs what every rank's does.
TEST(CostModelSymmetryTest, BoundedPatIsSymmetric) {
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter}) {
    for (int n : {12, 64}) {
      CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
      p.chunk_bytes = 4096;
      CollectiveArgs args;
      args.collective = c;
      args.nranks = n;
      args.count = 96;
      args.aggregation = 4;
      StatusOr<Symmetry> sym = FindSymmetry(Algorithm::kPat, args);
      ASSERT_TRUE(sym.ok()) << sym.status().ToString();
      std::vector<Schedule> all;
      for (int r = 0; r < n; ++r) {
        args.rank = r;
        StatusOr<Schedule> s = MakeSchedule(Algorithm::kPat, args);
        ASSERT_TRUE(s.ok());
        all.push_back(*std::move(s));
      }
      StatusOr<Prediction> exact = PredictSchedules(all, p);
      StatusOr<Prediction> sym_pred = PredictSymmetric(all[0], *sym, p);
      ASSERT_TRUE(exact.ok() && sym_pred.ok());
      EXPECT_NEAR(sym_pred->seconds, exact->seconds, 1e-9 * exact->seconds) << CollectiveName(c) << " n " << n;
      EXPECT_EQ(sym_pred->total_bytes_sent, exact->total_bytes_sent);
    }
  }
}

// 65,536 ranks: every symmetric all-reduce is costed exactly (method
// symmetric), in well under the 60 s ciuic-sim is allowed (the bound here is
// generous for sanitizers; ciuic-sim's own timing is in perf/RESULTS.md).
TEST(CostModelSymmetryTest, SixtyFiveThousandRanks) {
  const CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kRabenseifner, Algorithm::kSwing}) {
    StatusOr<Prediction> pred = Predict(Collective::kAllReduce, a, size_t{1} << 26, 1 << 16, p);
    ASSERT_TRUE(pred.ok()) << AlgorithmName(a) << ": " << pred.status().ToString();
    EXPECT_EQ(pred->method, PredictionMethod::kSymmetric) << AlgorithmName(a);
    EXPECT_EQ(pred->max_messages_per_rank, a == Algorithm::kRing ? 2u * 65535 + 1 : 64u) << AlgorithmName(a);
    // Bandwidth-optimal: 2 (n-1)/n of the vector on the wire.
    EXPECT_NEAR(static_cast<double>(pred->max_bytes_sent_per_rank), 2.0 * (1 << 26), 0.01 * (1 << 26));
  }
  // PAT: 16 sends and 16 receives per rank (message steps), n-1 blocks of
  // 64 B each way.
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter}) {
    StatusOr<Prediction> pred = Predict(c, Algorithm::kPat, 64, 1 << 16, p);  // bytes: one block
    ASSERT_TRUE(pred.ok()) << CollectiveName(c) << ": " << pred.status().ToString();
    EXPECT_EQ(pred->method, PredictionMethod::kSymmetric) << CollectiveName(c);
    EXPECT_EQ(pred->max_messages_per_rank, 32u) << CollectiveName(c);
    EXPECT_EQ(pred->max_bytes_sent_per_rank, size_t{64} * 65535) << CollectiveName(c);
  }
}


// One machine whose cores move the bytes (CostParams::cpu_cores): four
// ranks on two cores take at least all their sending, receiving and
// reducing divided by two, and a rank's own work is serial; without the
// setting links move bytes on their own and the prediction is lower.
TEST(CostModelCoresTest, RanksOnFewCoresShareThem) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  const size_t bytes = 16 << 20;
  const double links = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 4, p);
  p.cpu_cores = 2;
  auto shared = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 4, p);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->busiest, "the machine's cores");
  // Each rank sends and receives 2 (n-1)/n of the vector.
  const double wire = 2 * 0.75 * static_cast<double>(bytes) * p.beta_s_per_byte;
  EXPECT_GT(shared->seconds, 4 * 2 * wire / 2);
  EXPECT_GT(shared->seconds, 1.5 * links);
  p.cpu_cores = 8;  // more cores than ranks: each rank's own work bounds it
  auto roomy = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 4, p);
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->busiest.find("CPU"), roomy->busiest.size() - 3) << roomy->busiest;
  EXPECT_LT(roomy->seconds, shared->seconds);
}


// Two hosts on one machine's cores (ciuic-run --hosts with a rate-limited
// link): the link's time is not the CPU's. With net_cpu_s_per_byte the
// bytes between hosts cost the cores that rate, so a slow link bounds the
// prediction as it does without cpu_cores; left 0, the link's time counts
// as CPU work too (loopback), about doubling it; and a CPU slower than the
// link bounds it again.
TEST(CostModelCoresTest, ALinksTimeIsNotTheCoresWhenTheNetworksCpuCostIsKnown) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.host_of = {0, 0, 1, 1};
  p.beta_s_per_byte = 1e-9 / 0.125;  // 1 Gb/s
  p.intra_beta_s_per_byte = 1e-9 / 20;
  const size_t bytes = 16 << 20;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHierarchical}) {
    const double alone = PredictOrDie(Collective::kAllReduce, a, bytes, 4, p);
    CostParams cores = p;
    cores.cpu_cores = 2;
    const double wire_as_cpu = PredictOrDie(Collective::kAllReduce, a, bytes, 4, cores);
    EXPECT_GT(wire_as_cpu, 1.8 * alone) << AlgorithmName(a);
    cores.net_cpu_s_per_byte = 1e-9 / 4;  // a socket's CPU cost: 4 GB/s
    auto known = Predict(Collective::kAllReduce, a, bytes, 4, cores);
    ASSERT_TRUE(known.ok()) << known.status().ToString();
    EXPECT_NEAR(known->seconds, alone, 0.02 * alone) << AlgorithmName(a);
    EXPECT_EQ(known->busiest.find("the machine's cores"), std::string::npos) << known->busiest;
    cores.net_cpu_s_per_byte = 1e-9 / 0.05;  // a CPU slower than the link
    auto slow = Predict(Collective::kAllReduce, a, bytes, 4, cores);
    ASSERT_TRUE(slow.ok()) << slow.status().ToString();
    EXPECT_GT(slow->seconds, 1.5 * alone) << AlgorithmName(a);
    EXPECT_TRUE(slow->busiest.find("CPU") != std::string::npos || slow->busiest.find("cores") != std::string::npos)
        << slow->busiest;
  }
}


// A torus routes each message over its links and shares them: the ring's
// neighbours never share one; recursive halving's 2^k-hop messages pile up
// on the links between, and Swing's shorter hops less so; a message's hops
// add their latency; dimensions that do not multiply to the rank count
// are refused.
TEST(CostModelTorusTest, MessagesShareTheLinksTheyCross) {
  CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
  p.torus_dims = {16};
  const size_t bytes = 16 << 20;
  auto ring = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 16, p);
  auto rab = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 16, p);
  auto swing = Predict(Collective::kAllReduce, Algorithm::kSwing, bytes, 16, p);
  ASSERT_TRUE(ring.ok() && rab.ok() && swing.ok());
  EXPECT_EQ(ring->contention_s, 0);
  EXPECT_GT(rab->contention_s, 0);
  EXPECT_LT(swing->contention_s, 0.75 * rab->contention_s);
  EXPECT_LT(swing->seconds, rab->seconds);
  EXPECT_NEAR(rab->critical_path_s, rab->latency_s + rab->bandwidth_s + rab->compute_s + rab->contention_s,
              1e-9 * rab->critical_path_s);
  // Without the torus the two cost the same bytes x beta and no contention.
  p.torus_dims.clear();
  auto flat = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 16, p);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->contention_s, 0);
  EXPECT_LT(flat->seconds, rab->seconds);
  // Hops: a 2-rank message across a 1-D torus of 2 has 1 hop; of latency only.
  p.torus_dims = {2, 2};
  p.hop_latency_s = 1e-6;
  auto hop = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 4, 4, p);
  p.hop_latency_s = 0;
  auto nohop = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 4, 4, p);
  ASSERT_TRUE(hop.ok() && nohop.ok());
  EXPECT_NEAR(hop->latency_s - nohop->latency_s, 2e-6, 1e-9);  // two rounds of one hop each
  // A message of many chunks pays its hops once, not per chunk.
  p.chunk_bytes = 64 << 10;
  p.hop_latency_s = 1e-6;
  auto big_hop = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 8 << 20, 4, p);
  p.hop_latency_s = 0;
  auto big_nohop = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 8 << 20, 4, p);
  ASSERT_TRUE(big_hop.ok() && big_nohop.ok());
  EXPECT_NEAR(big_hop->critical_path_s - big_nohop->critical_path_s, 2e-6, 1e-9);
  p.torus_dims = {3, 3};
  auto bad = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 8, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("torus of 9 nodes for 8 ranks"), std::string::npos) << bad.status().ToString();
}


// Selection picks the research algorithms where the model says they win and
// not elsewhere: Bruck's all-to-all for small blocks on many ranks, pairwise
// for large ones; Swing on a torus, never on a flat network (where it moves
// Rabenseifner's bytes in Rabenseifner's steps, and the earlier entry wins
// the tie).
TEST(CostModelTest, ResearchAlgorithmsWinWhereTheModelSaysSo) {
  const CostParams tcp = DefaultCostParams(transport::BackendKind::kTcp);
  for (int n : {16, 64}) {
    auto small = Select(Collective::kAllToAll, 64 * static_cast<size_t>(n), n, tcp, "");
    auto large = Select(Collective::kAllToAll, (size_t{1} << 20) * static_cast<size_t>(n), n, tcp, "");
    ASSERT_TRUE(small.ok() && large.ok());
    EXPECT_EQ(small->algorithm->id, Algorithm::kBruck) << small->reason;
    EXPECT_EQ(large->algorithm->id, Algorithm::kPairwise) << large->reason;
  }
  // PAT reduce-scatter: log-depth, so it takes small blocks on many ranks;
  // ring keeps large blocks on few.
  auto rs_small = Select(Collective::kReduceScatter, 8192, 64, tcp, "");
  auto rs_large = Select(Collective::kReduceScatter, size_t{64} << 20, 8, tcp, "");
  ASSERT_TRUE(rs_small.ok() && rs_large.ok());
  EXPECT_EQ(rs_small->algorithm->id, Algorithm::kPat) << rs_small->reason;
  EXPECT_EQ(rs_large->algorithm->id, Algorithm::kRing) << rs_large->reason;
  CostParams torus = DefaultCostParams(transport::BackendKind::kVerbs);
  torus.torus_dims = {8, 8};
  auto on_torus = Select(Collective::kAllReduce, 2 << 20, 64, torus, "");
  ASSERT_TRUE(on_torus.ok());
  EXPECT_EQ(on_torus->algorithm->id, Algorithm::kSwing) << on_torus->reason;
  // On the torus PAT's all-gather keeps its largest round between
  // neighbours where Bruck's crosses the network: less contention, and
  // faster from medium sizes on.
  for (size_t bytes : {size_t{64} << 10, size_t{1} << 20}) {
    auto pat = Predict(Collective::kAllGather, Algorithm::kPat, bytes, 64, torus);
    auto bruck = Predict(Collective::kAllGather, Algorithm::kBruck, bytes, 64, torus);
    ASSERT_TRUE(pat.ok() && bruck.ok());
    EXPECT_LT(pat->contention_s, bruck->contention_s / 2) << bytes;
    EXPECT_LT(pat->seconds, bruck->seconds) << bytes;
  }
  torus.torus_dims.clear();
  for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{2} << 20, size_t{256} << 20}) {
    auto flat = Select(Collective::kAllReduce, bytes, 64, torus, "");
    ASSERT_TRUE(flat.ok());
    EXPECT_NE(flat->algorithm->id, Algorithm::kSwing) << bytes << ": " << flat->reason;
    EXPECT_NE(flat->algorithm->id, Algorithm::kSwingLatency) << bytes << ": " << flat->reason;
  }
  // On a ring of 64 nodes Swing's latency variant takes recursive doubling's
  // six steps over 42 hops instead of 63, so it wins a tiny vector there;
  // it sends 63 vectors instead of 6, so not a large one.
  torus.torus_dims = {64};
  auto tiny = Select(Collective::kAllReduce, 8, 64, torus, "");
  auto mid = Select(Collective::kAllReduce, 256 << 10, 64, torus, "");
  ASSERT_TRUE(tiny.ok() && mid.ok());
  EXPECT_EQ(tiny->algorithm->id, Algorithm::kSwingLatency) << tiny->reason;
  EXPECT_NE(mid->algorithm->id, Algorithm::kSwingLatency) << mid->reason;
  auto lat = Predict(Collective::kAllReduce, Algorithm::kSwingLatency, 8, 64, torus);
  auto rd = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 8, 64, torus);
  ASSERT_TRUE(lat.ok() && rd.ok());
  EXPECT_NEAR(rd->latency_s - lat->latency_s, (63 - 42) * torus.hop_latency_s, 1e-9);
}


// On a torus Swing moves along one dimension a step, the dimensions in
// turn: on 8x8 its peers are 1, 1, 3 away in each, 10 hops a pass, where
// one ring of 64 ranks would take 19 (1, 1, 3, 5 and 11 and 21, which cross
// both dimensions) and recursive doubling 14 (1, 2, 4 in each).
TEST(CostModelTest, SwingSwingsThroughTheTorusDimensions) {
  CostParams torus = DefaultCostParams(transport::BackendKind::kVerbs);
  torus.torus_dims = {8, 8};
  torus.hop_latency_s = 1e-7;
  const double a = torus.alpha_s, hop = torus.hop_latency_s;
  auto swing = Predict(Collective::kAllReduce, Algorithm::kSwing, 32, 64, torus);
  auto lat = Predict(Collective::kAllReduce, Algorithm::kSwingLatency, 32, 64, torus);
  auto rd = Predict(Collective::kAllReduce, Algorithm::kRecursiveDoubling, 32, 64, torus);
  ASSERT_TRUE(swing.ok() && lat.ok() && rd.ok());
  EXPECT_NEAR(swing->latency_s, 12 * a + 20 * hop, 1e-9);  // reduce-scatter and all-gather
  EXPECT_NEAR(lat->latency_s, 6 * a + 10 * hop, 1e-9);
  EXPECT_NEAR(rd->latency_s, 6 * a + 14 * hop, 1e-9);
}

// A fat tree shares its groups' links: a ring crosses between leaves at two
// points only, recursive halving's distance-16 round sends every rank of a
// leaf up at once; oversubscription makes that worse, a full-bandwidth tree
// (oversub 1) only adds hops; a leaf of all ranks is the flat model plus
// the two hops of each message.
TEST(CostModelFatTreeTest, GroupsShareTheirUplinks) {
  CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
  p.fattree_down = 16;
  p.fattree_levels = 2;
  p.fattree_oversub = 4;
  const size_t bytes = 16 << 20;
  auto ring = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 32, p);
  auto rab = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  ASSERT_TRUE(ring.ok() && rab.ok()) << ring.status().ToString() << rab.status().ToString();
  EXPECT_EQ(ring->contention_s, 0);
  EXPECT_GT(rab->contention_s, 0);
  p.fattree_oversub = 1;
  auto full = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->contention_s, 0);
  EXPECT_LT(full->seconds, rab->seconds);
  p.fattree_levels = 0;
  auto flat = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  ASSERT_TRUE(flat.ok());
  EXPECT_GT(full->latency_s, flat->latency_s);  // the hops
  EXPECT_NEAR(full->bandwidth_s, flat->bandwidth_s, 1e-9 * flat->seconds);
  p.fattree_levels = 1;
  p.fattree_down = 1;
  auto bad = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 8, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("down must be >= 2"), std::string::npos) << bad.status().ToString();
}

// Rails: 4 hosts of 8 ranks, the i-th rank of each host on rail i. Traffic
// that keeps its local index (Rabenseifner's distance-8 and -16 rounds)
// stays on its rail's leaf; the ring's host boundaries (local 7 to local 0)
// change rail and climb to the spine, all four from rail 7's leaf, so an
// oversubscribed spine slows them and a full one does not. With a leaf per
// host every message between hosts climbs, and Rabenseifner's too.
TEST(CostModelRailTest, RailAlignedTrafficStaysOffTheSpine) {
  CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
  for (int r = 0; r < 32; ++r) p.host_of.push_back(r / 8);
  const size_t bytes = 64 << 20;
  auto hosts = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  p.rail_leaf_hosts = 4;
  p.rail_oversub = 4;
  auto ring = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 32, p);
  auto rab = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  ASSERT_TRUE(hosts.ok() && ring.ok() && rab.ok()) << ring.status().ToString() << rab.status().ToString();
  EXPECT_GT(ring->contention_s, ring->bandwidth_s);  // 4 messages on a link of 4 hosts / 4
  EXPECT_EQ(rab->contention_s, 0);
  // Every rank has its own NIC: no shared host link bounds Rabenseifner,
  // which the one-NIC hosts model makes the busiest resource.
  EXPECT_LT(rab->seconds, hosts->seconds / 2);
  EXPECT_EQ(rab->busiest, "critical path");
  p.rail_oversub = 1;
  auto full = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 32, p);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->contention_s, 0);
  EXPECT_LT(full->seconds, ring->seconds / 2);
  p.rail_oversub = 4;
  p.rail_leaf_hosts = 1;
  auto per_host = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 32, p);
  ASSERT_TRUE(per_host.ok());
  EXPECT_GT(per_host->contention_s, 0);
  EXPECT_GT(per_host->latency_s, rab->latency_s);  // two more hops per message between hosts
  p.host_of.clear();
  auto bad = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 32, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rails: need a host map"), std::string::npos) << bad.status().ToString();
}

// A dragonfly of 16 groups of 16: the ring crosses between groups at one
// rank per group boundary (no sharing); recursive halving's distance-16+
// rounds send all 16 ranks of a group over the one global link to a single
// other group, a 16-way share that wider global links relieve; Swing's
// peers (1, 3, 5, 11, ... away) spread over many groups.
TEST(CostModelDragonflyTest, GlobalLinksAreShared) {
  CostParams p = DefaultCostParams(transport::BackendKind::kVerbs);
  p.dragonfly_group = 16;
  p.max_exact_steps = 1 << 20;  // a topology is costed from every rank's schedule
  const size_t bytes = 16 << 20;
  auto ring = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 256, p);
  auto rab = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 256, p);
  auto swing = Predict(Collective::kAllReduce, Algorithm::kSwing, bytes, 256, p);
  ASSERT_TRUE(ring.ok() && rab.ok() && swing.ok()) << rab.status().ToString();
  EXPECT_EQ(ring->contention_s, 0);
  EXPECT_GT(rab->contention_s, 5 * rab->bandwidth_s);
  EXPECT_LT(swing->seconds, rab->seconds / 4);
  p.dragonfly_global = 4;
  auto wide = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 256, p);
  ASSERT_TRUE(wide.ok());
  EXPECT_LT(wide->contention_s, rab->contention_s / 3);
  // Inside one group: one hop less than between groups, no global link.
  p.dragonfly_group = 256;
  auto one = Predict(Collective::kAllReduce, Algorithm::kRabenseifner, bytes, 256, p);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->contention_s, 0);
  EXPECT_LT(one->latency_s, rab->latency_s);
  p.torus_dims = {16, 16};
  auto two = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 256, p);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("at most one of torus, fat tree, rails and dragonfly"), std::string::npos);
  p.torus_dims.clear();
  p.dragonfly_global = 0;
  auto bad = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 256, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dragonfly: group must be >= 1 and global > 0"), std::string::npos);
}

// shm's rates in cache (copy 48, beta 24, gamma 20 GB/s) and out of DRAM
// (12, 8, 6), inside a host as between; no memory curve yet.
CostParams CacheAndDramRates() {
  CostParams p = DefaultCostParams(transport::BackendKind::kShm);
  p.copy_s_per_byte = 1 / 48e9;
  p.beta_s_per_byte = p.intra_beta_s_per_byte = 1 / 24e9;
  p.gamma_s_per_byte = 1 / 20e9;
  p.dram_copy_s_per_byte = 1 / 12e9;
  p.dram_beta_s_per_byte = p.dram_intra_beta_s_per_byte = 1 / 8e9;
  p.dram_gamma_s_per_byte = 1 / 6e9;
  return p;
}

// Memory: below the curve's first working set the cache rates hold, at its
// last the DRAM ones; between, every rate moves as far toward its DRAM
// figure as the copy rate has fallen (log-linear in bytes between points).
// Predict takes a rank's input and output as the working set: a 64 MiB
// all-reduce streams from DRAM, a 16 KiB one does not.
TEST(CostModelTest, LargeWorkingSetsRunAtDramRates) {
  CostParams p = CacheAndDramRates();
  p.memory_curve = {{1 << 20, 1 / 48e9}, {4 << 20, 1 / 24e9}, {64 << 20, 1 / 12e9}};
  const CostParams small = AtWorkingSet(p, 512 << 10), large = AtWorkingSet(p, 1 << 30);
  EXPECT_DOUBLE_EQ(small.beta_s_per_byte, p.beta_s_per_byte);
  EXPECT_DOUBLE_EQ(large.beta_s_per_byte, p.dram_beta_s_per_byte);
  EXPECT_DOUBLE_EQ(large.copy_s_per_byte, p.dram_copy_s_per_byte);
  EXPECT_DOUBLE_EQ(large.gamma_s_per_byte, p.dram_gamma_s_per_byte);
  // At 4 MiB the copy rate has gone a third of the way in seconds per
  // byte (1/48 -> 1/24 of 1/48 -> 1/12): so has beta.
  const CostParams mid = AtWorkingSet(p, 4 << 20);
  const double t = (1 / 24e9 - 1 / 48e9) / (1 / 12e9 - 1 / 48e9);
  EXPECT_NEAR(mid.beta_s_per_byte, p.beta_s_per_byte + t * (p.dram_beta_s_per_byte - p.beta_s_per_byte), 1e-15);
  // 2 MiB: halfway in log(bytes) between the first two points.
  const double half = 1 / 48e9 + 0.5 * (1 / 24e9 - 1 / 48e9);
  EXPECT_NEAR(AtWorkingSet(p, 2 << 20).copy_s_per_byte,
              p.copy_s_per_byte + (half - 1 / 48e9) / (1 / 12e9 - 1 / 48e9) * (p.dram_copy_s_per_byte - p.copy_s_per_byte),
              1e-15);
  CostParams flat = p;
  flat.memory_curve.clear();
  for (size_t bytes : {size_t{16} << 10, size_t{64} << 20}) {
    auto with = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p);
    auto without = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 2, flat);
    ASSERT_TRUE(with.ok() && without.ok());
    if (bytes < (1u << 20)) {
      EXPECT_DOUBLE_EQ(with->seconds, without->seconds) << bytes;
    } else {
      EXPECT_GT(with->seconds, 2 * without->seconds) << bytes;
    }
  }
}

// Ranks sharing a machine, with the cache its cores share known: bytes
// that cross between cores (beta, exchange) slow only as the copy rate
// falls beyond it, the private caches' cliff before it not being theirs.
// Copy and gamma take that cliff at one core's ranks' working set and the
// fall beyond at all ranks'. Curve: 48 GB/s to 1 MiB, 24 in the 32 MiB
// shared cache, 12 from 128 MiB. Two ranks on two cores, no DRAM sharing
// measured: the machine's working set is twice a rank's (a core's).
TEST(CostModelCoresTest, BytesBetweenCoresSlowOnlyBeyondTheSharedCache) {
  CostParams p = CacheAndDramRates();
  p.cpu_cores = 2;
  p.exchange_s_per_byte = p.intra_exchange_s_per_byte = 1 / 30e9;
  p.dram_exchange_s_per_byte = p.dram_intra_exchange_s_per_byte = 1 / 10e9;
  p.memory_curve = {{1 << 20, 1 / 48e9}, {8 << 20, 1 / 24e9}, {32 << 20, 1 / 24e9}, {128 << 20, 1 / 12e9}};
  p.shared_cache_bytes = 32 << 20;
  auto machine = [&p](double all) { return SharingTheMachine(p, all / 2, 2); };
  const double third = (1 / 24e9 - 1 / 48e9) / (1 / 12e9 - 1 / 48e9);
  // 8 MiB of both ranks: each core's 4 MiB, two thirds (log) of the way
  // to the cliff's foot.
  EXPECT_NEAR(machine(8 << 20).copy_s_per_byte,
              p.copy_s_per_byte + 2.0 / 3 * third * (p.dram_copy_s_per_byte - p.copy_s_per_byte), 1e-20);
  for (double all : {16.0 * (1 << 20), 32.0 * (1 << 20)}) {
    const CostParams q = machine(all);
    EXPECT_NEAR(q.copy_s_per_byte, p.copy_s_per_byte + third * (p.dram_copy_s_per_byte - p.copy_s_per_byte), 1e-20);
    EXPECT_NEAR(q.gamma_s_per_byte, p.gamma_s_per_byte + third * (p.dram_gamma_s_per_byte - p.gamma_s_per_byte),
                1e-20);
    EXPECT_DOUBLE_EQ(q.beta_s_per_byte, p.beta_s_per_byte) << all;
    EXPECT_DOUBLE_EQ(q.intra_beta_s_per_byte, p.intra_beta_s_per_byte) << all;
    EXPECT_DOUBLE_EQ(q.exchange_s_per_byte, p.exchange_s_per_byte) << all;
    EXPECT_DOUBLE_EQ(q.intra_exchange_s_per_byte, p.intra_exchange_s_per_byte) << all;
  }
  // 64 MiB: halfway (log) from the shared cache's 1/24 to DRAM's 1/12, so
  // the crossing figures are halfway to theirs; copy has the cliff's third
  // (each core's 32 MiB) and half of the rest.
  const CostParams mid = machine(64 << 20);
  EXPECT_NEAR(mid.exchange_s_per_byte, (1 / 30e9 + 1 / 10e9) / 2, 1e-20);
  EXPECT_NEAR(mid.beta_s_per_byte, (1 / 24e9 + 1 / 8e9) / 2, 1e-20);
  EXPECT_NEAR(mid.copy_s_per_byte, (1 / 24e9 + 1 / 12e9) / 2, 1e-20);
  // Four ranks on the two cores: a core holds two ranks' sets, so 4 ranks x
  // 2 MiB (each core's 4 MiB) slow copy as two ranks x 4 MiB do.
  EXPECT_DOUBLE_EQ(SharingTheMachine(p, 2 << 20, 4).copy_s_per_byte, machine(8 << 20).copy_s_per_byte);
  const CostParams dram = machine(1 << 30);
  EXPECT_DOUBLE_EQ(dram.exchange_s_per_byte, p.dram_exchange_s_per_byte);
  EXPECT_DOUBLE_EQ(dram.beta_s_per_byte, p.dram_beta_s_per_byte);
  // One rank's working set (AtWorkingSet, as selection costs a call) says
  // nothing of the shared cache's contents: the whole curve.
  EXPECT_NEAR(AtWorkingSet(p, 8 << 20).exchange_s_per_byte, 1 / 30e9 + third * (1 / 10e9 - 1 / 30e9), 1e-20);
  // A shared cache larger than the curve reaches: DRAM's figures beyond it,
  // the cache's within.
  p.shared_cache_bytes = 256 << 20;
  EXPECT_DOUBLE_EQ(machine(128 << 20).exchange_s_per_byte, p.exchange_s_per_byte);
  EXPECT_DOUBLE_EQ(machine(512 << 20).exchange_s_per_byte, p.dram_exchange_s_per_byte);
  // Unknown: the whole curve at all ranks' working set, for every figure.
  p.shared_cache_bytes = 0;
  EXPECT_NEAR(machine(8 << 20).exchange_s_per_byte, 1 / 30e9 + third * (1 / 10e9 - 1 / 30e9), 1e-20);
  EXPECT_NEAR(machine(8 << 20).copy_s_per_byte, p.copy_s_per_byte + third * (p.dram_copy_s_per_byte - p.copy_s_per_byte),
              1e-20);
}

// Ranks sharing one machine (cpu_cores): their working sets add up in the
// shared cache, and DRAM's rate is shared by the cores reading it at once.
TEST(CostModelCoresTest, RanksOnOneMachineShareItsCacheAndDram) {
  CostParams p = CacheAndDramRates();
  p.memory_curve = {{1 << 20, 1 / 48e9}, {8 << 20, 1 / 48e9}, {16 << 20, 1 / 12e9}};
  // Without cpu_cores a rank's own 4 MiB is before the cliff; with it, the
  // four ranks' 16 MiB is past it.
  EXPECT_DOUBLE_EQ(SharingTheMachine(p, 4 << 20, 4).copy_s_per_byte, p.copy_s_per_byte);
  p.cpu_cores = 2;
  EXPECT_DOUBLE_EQ(SharingTheMachine(p, 4 << 20, 4).copy_s_per_byte, p.dram_copy_s_per_byte);
  EXPECT_DOUBLE_EQ(SharingTheMachine(p, 4 << 20, 1).copy_s_per_byte, p.copy_s_per_byte);
  // Each of 2 cores at once copies at 8 GB/s out of DRAM against 12 alone:
  // 1.5x the time per byte, on every DRAM figure. Two cores busy at 4 ranks
  // (min of cores and ranks); 8 cores on a machine measured at 2: DRAM's
  // total is reached, 4 times the pair's slowdown.
  p.dram_shared_cores = 2;
  p.dram_shared_copy_s_per_byte = 1 / 8e9;
  const CostParams two = SharingTheMachine(p, 4 << 20, 4);
  EXPECT_NEAR(two.copy_s_per_byte, 1.5 / 12e9, 1e-20);
  EXPECT_NEAR(two.beta_s_per_byte, 1.5 / 8e9, 1e-20);
  EXPECT_NEAR(two.intra_beta_s_per_byte, 1.5 / 8e9, 1e-20);
  EXPECT_NEAR(two.gamma_s_per_byte, 1.5 / 6e9, 1e-20);
  p.cpu_cores = 8;
  EXPECT_NEAR(SharingTheMachine(p, 4 << 20, 8).copy_s_per_byte, 6 / 12e9, 1e-20);
  // Measured on 4 cores (each at 6 GB/s: 2x alone), 3 busy: two thirds of
  // the way from one core's rate to 4 cores'.
  p.dram_shared_cores = 4;
  p.dram_shared_copy_s_per_byte = 1 / 6e9;
  EXPECT_NEAR(SharingTheMachine(p, 8 << 20, 3).copy_s_per_byte, (1 + 2.0 / 3) / 12e9, 1e-20);
  // With the cache the cores share known (8 MiB), only the part of the
  // working set beyond it contends: 8 MiB x 3 ranks, two thirds beyond,
  // two thirds of the 1.67x; 4 ranks x 4 MiB on 2 cores measured at 2, half
  // beyond, half the 1.5x slowdown.
  p.shared_cache_bytes = 8 << 20;
  EXPECT_NEAR(SharingTheMachine(p, 8 << 20, 3).copy_s_per_byte, (1 + 2.0 / 3 * 2 / 3) / 12e9, 1e-20);
  p.cpu_cores = 2;
  p.dram_shared_cores = 2;
  p.dram_shared_copy_s_per_byte = 1 / 8e9;
  EXPECT_NEAR(SharingTheMachine(p, 4 << 20, 4).copy_s_per_byte, 1.25 / 12e9, 1e-20);
  EXPECT_NEAR(SharingTheMachine(p, 4 << 20, 4).gamma_s_per_byte, 1.25 / 6e9, 1e-20);
  // Within it nothing contends: 2 ranks x 8 MiB in a 16 MiB cache, on a
  // curve that reaches DRAM's figure at 8 MiB already (each core's 8 MiB).
  CostParams early = p;
  early.memory_curve = {{1 << 20, 1 / 48e9}, {8 << 20, 1 / 12e9}};
  early.shared_cache_bytes = 16 << 20;
  EXPECT_DOUBLE_EQ(SharingTheMachine(early, 8 << 20, 2).copy_s_per_byte, p.dram_copy_s_per_byte);
  p.shared_cache_bytes = 0;
  // Predict uses it: a 4 MiB all-reduce of 4 ranks on 2 cores is slower
  // than the same ranks costed each with a machine of its own.
  p.cpu_cores = 2;
  p.dram_shared_cores = 2;
  p.dram_shared_copy_s_per_byte = 1 / 8e9;
  CostParams alone = p;
  alone.dram_shared_cores = 0;
  alone.memory_curve = {{1 << 20, 1 / 48e9}, {64 << 20, 1 / 48e9 + 1e-15}, {128 << 20, 1 / 12e9}};
  auto shared = Predict(Collective::kAllReduce, Algorithm::kRing, 4 << 20, 4, p);
  auto own = Predict(Collective::kAllReduce, Algorithm::kRing, 4 << 20, 4, alone);
  ASSERT_TRUE(shared.ok() && own.ok());
  EXPECT_GT(shared->seconds, 2 * own->seconds);
  // Hosts on this machine with the network's CPU cost known apart: the
  // link between them keeps its rate (1.5x slower had made a 1 Gbit/s
  // link's 16 MiB ring 1.65x its measured time); shm inside a host slows.
  p.host_of = {0, 0, 1, 1};
  p.net_cpu_s_per_byte = 1e-9 / 4;
  const CostParams hosts = SharingTheMachine(p, 4 << 20, 4);
  EXPECT_DOUBLE_EQ(hosts.beta_s_per_byte, p.dram_beta_s_per_byte);
  EXPECT_NEAR(hosts.intra_beta_s_per_byte, 1.5 / 8e9, 1e-20);
}

// With cpu_cores a byte a rank sends or receives costs its CPU the
// exchange's figure where measured (both ranks streaming at once), not the
// one-way stream's beta: a 2-rank ring's rank sends and receives the
// vector once each, so its bound moves by 2 x bytes x the difference; out
// of DRAM the dram figure, and inside a host the intra one.
TEST(CostModelCoresTest, ABytesCpuCostIsTheExchangesWhereMeasured) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.memory_curve.clear();
  p.cpu_cores = 2;
  p.beta_s_per_byte = 1e-9 / 4;
  const size_t bytes = 16 << 20;
  const double stream = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p);
  CostParams ex = p;
  ex.exchange_s_per_byte = 1e-9 / 3;
  auto measured = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 2, ex);
  ASSERT_TRUE(measured.ok()) << measured.status().ToString();
  EXPECT_NE(measured->busiest.find("CPU"), std::string::npos) << measured->busiest;
  const double moved = 2.0 * static_cast<double>(bytes) * (ex.exchange_s_per_byte - p.beta_s_per_byte);
  EXPECT_NEAR(measured->seconds - stream, moved, 1e-3 * moved);
  // Where the exchange's receivers copied each chunk out (ciuic-tune over
  // shm), the all-gather's received half costs no copy of its own and the
  // reduce-scatter's half, reduced, gamma less a copy: a copy less each.
  CostParams copied = ex;
  copied.exchange_copies_received = true;
  ASSERT_GT(copied.gamma_s_per_byte, copied.copy_s_per_byte);
  const double no_copy = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, copied);
  const double copy = static_cast<double>(bytes) * p.copy_s_per_byte;
  EXPECT_NEAR(measured->seconds - no_copy, copy, 1e-3 * copy);
  // A reduction faster than the copy costs nothing beyond the exchange
  // (never a negative time): only the half's reduction is gone.
  CostParams fast = copied;
  fast.gamma_s_per_byte = fast.copy_s_per_byte / 2;
  CostParams fast_plain = ex;
  fast_plain.gamma_s_per_byte = fast.gamma_s_per_byte;
  const double reduce = static_cast<double>(bytes) / 2 * fast.gamma_s_per_byte;
  EXPECT_NEAR(PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, fast_plain) -
                  PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, fast),
              copy / 2 + reduce, 1e-3 * copy);
  // Without cpu_cores links move the bytes: the exchange plays no part.
  ex.cpu_cores = 0;
  p.cpu_cores = 0;
  EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, ex),
                   PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p));
  // Out of DRAM: the dram figure, not slowed again for the cores sharing
  // DRAM (the pair streamed at once when it was measured).
  ex.cpu_cores = 2;
  ex.memory_curve = {{1 << 20, 1 / 48e9}, {16 << 20, 1 / 12e9}};
  ex.dram_exchange_s_per_byte = 1e-9 / 2;
  ex.dram_copy_s_per_byte = 1 / 12e9;
  ex.dram_shared_cores = 2;
  ex.dram_shared_copy_s_per_byte = 1 / 8e9;
  EXPECT_DOUBLE_EQ(AtWorkingSet(ex, 64 << 20).exchange_s_per_byte, ex.dram_exchange_s_per_byte);
  EXPECT_DOUBLE_EQ(SharingTheMachine(ex, 64 << 20, 2).exchange_s_per_byte, ex.dram_exchange_s_per_byte);
  EXPECT_DOUBLE_EQ(SharingTheMachine(ex, 256 << 10, 2).exchange_s_per_byte, ex.exchange_s_per_byte);
  // Inside a host (two levels): the intra figures, taken with the shm
  // backend's others.
  CostParams shm = DefaultCostParams(transport::BackendKind::kShm);
  shm.beta_s_per_byte = 1e-9 / 4;
  shm.exchange_s_per_byte = 1e-9 / 3;
  shm.dram_exchange_s_per_byte = 1e-9 / 2;
  CostParams host = DefaultCostParams(transport::BackendKind::kTcp);
  host.memory_curve.clear();
  host.cpu_cores = 2;
  host.host_of = {0, 0};
  TakeIntraFrom(shm, &host);
  EXPECT_DOUBLE_EQ(host.intra_alpha_s, shm.alpha_s);
  EXPECT_DOUBLE_EQ(host.intra_beta_s_per_byte, shm.beta_s_per_byte);
  EXPECT_DOUBLE_EQ(host.dram_intra_exchange_s_per_byte, shm.dram_exchange_s_per_byte);
  const double intra = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, host);
  host.intra_exchange_s_per_byte = 0;
  EXPECT_NEAR(intra - PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, host), moved, 1e-3 * moved);
}

// A lone step that fits the transport's buffers runs faster than the
// stream (exchange_steps): a step of B bytes costs the CPU, and its wire,
// the factor at B; a 2-rank ring of 1 MiB moves 512K steps, 2 MiB sent and
// received per rank, so halving its steps' cost saves 1 MiB x exchange.
TEST(CostModelCoresTest, AStepCostsTheExchangeStepCurvesFactorAtItsSize) {
  const std::vector<std::pair<double, double>> curve = {{64 << 10, 0.5}, {512 << 10, 0.5}, {4 << 20, 1.0}};
  EXPECT_DOUBLE_EQ(ExchangeStepFactor({}, 1 << 20), 1);
  EXPECT_DOUBLE_EQ(ExchangeStepFactor(curve, 4096), 0.5);
  EXPECT_DOUBLE_EQ(ExchangeStepFactor(curve, 256 << 10), 0.5);
  EXPECT_NEAR(ExchangeStepFactor(curve, 2 << 20), 0.5 + 0.5 * 2.0 / 3.0, 1e-12);  // log-linear, 2M of 512K..4M
  EXPECT_DOUBLE_EQ(ExchangeStepFactor(curve, 64 << 20), 1.0);
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  p.memory_curve.clear();
  p.cpu_cores = 2;
  p.beta_s_per_byte = 1e-9 / 4;
  p.exchange_s_per_byte = 1e-9 / 3;
  const size_t bytes = 1 << 20;
  auto stream = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p);
  CostParams lone = p;
  lone.exchange_steps = curve;
  auto fast = Predict(Collective::kAllReduce, Algorithm::kRing, bytes, 2, lone);
  ASSERT_TRUE(stream.ok() && fast.ok());
  EXPECT_NE(fast->busiest.find("CPU"), std::string::npos) << fast->busiest;
  const double saved = 0.5 * 2.0 * static_cast<double>(bytes) * p.exchange_s_per_byte;
  EXPECT_NEAR(stream->seconds - fast->seconds, saved, 1e-3 * saved);
  // The critical path's wire too: with the CPU's bound lifted, beta's time
  // of each step halves.
  p.exchange_s_per_byte = lone.exchange_s_per_byte = 1e-12;
  const double path = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p);
  const double quick = PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, lone);
  const double wire = 0.5 * 2.0 * (512 << 10) * p.beta_s_per_byte;  // two 512K steps on the path
  EXPECT_NEAR(path - quick, wire, 1e-3 * wire);
  // On a topology the links' sharing is costed at beta: the wire keeps it.
  CostParams ring_net = p, ring_lone = lone;
  ring_net.torus_dims = ring_lone.torus_dims = {2};
  EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, ring_lone),
                   PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, ring_net));
  // Without cpu_cores links move the bytes: the curve plays no part.
  p.cpu_cores = lone.cpu_cores = 0;
  EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, lone),
                   PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p));
  // Nor between hosts whose link has a rate of its own (net_cpu).
  p.cpu_cores = lone.cpu_cores = 2;
  p.host_of = lone.host_of = {0, 1};
  p.net_cpu_s_per_byte = lone.net_cpu_s_per_byte = 1e-9 / 5;
  EXPECT_DOUBLE_EQ(PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, lone),
                   PredictOrDie(Collective::kAllReduce, Algorithm::kRing, bytes, 2, p));
}

// Review findings: an estimate shares the machine's cores like the other
// methods; Swing's reflection is a symmetry for even rank counts only.
TEST(CostModelSymmetryTest, EstimatesShareTheCoresAndSwingNeedsEvenRanks) {
  CostParams p = DefaultCostParams(transport::BackendKind::kTcp);
  auto alone = Predict(Collective::kAllToAll, Algorithm::kBruck, 4096, 256, p);
  p.cpu_cores = 4;
  auto shared = Predict(Collective::kAllToAll, Algorithm::kBruck, 4096, 256, p);
  ASSERT_TRUE(alone.ok() && shared.ok());
  ASSERT_EQ(shared->method, PredictionMethod::kEstimate);
  EXPECT_GT(shared->seconds, 30 * alone->seconds);  // 256 ranks' work on 4 cores
  CollectiveArgs a;
  a.nranks = 5;
  a.count = 50;
  auto s0 = MakeSchedule(Algorithm::kRing, a);
  a.rank = 2;
  auto s2 = MakeSchedule(Algorithm::kRing, a);
  ASSERT_TRUE(s0.ok() && s2.ok());
  EXPECT_TRUE(IsSymmetryImage(*s0, *s2, Symmetry::kTranslation));
  EXPECT_FALSE(IsSymmetryImage(*s0, *s2, Symmetry::kSwing));  // 2 + x is Swing's map for q = 2, but n is odd
}

}  // namespace
}  // namespace ciuic::collectives
