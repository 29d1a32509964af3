// Tuning files: parse/format round trip, every error naming its line,
// rule lookup at boundaries, ApplyTuning, LoadTuningFile, and PlanCall
// following a rule.
#include "collectives/tuning.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/plan.h"

namespace ciuic::collectives {
namespace {

using transport::BackendKind;

constexpr const char* kSample =
    "# written by hand\n"
    "\n"
    "ciuic-tuning 1\n"
    "meta host  node17   # spacing inside the text is kept\n"
    "meta cpu AMD EPYC 9B45\n"
    "backend shm alpha_us 0.35 beta_gbps 14.2 copy_gbps 30.1\n"
    "backend\ttcp\talpha_us 12 beta_gbps 1.25\n"
    "gamma f32 sum 21.5\n"
    "gamma bf16 sum 9.75\n"
    "rule allreduce shm ranks 2 from 0 recdoubling\n"
    "rule allreduce shm ranks 2 from 64K ring\n"
    "rule allreduce shm ranks 2 from 1048576 direct\n"
    "rule allreduce tcp ranks 4 from 1024 rabenseifner\n"
    "rule broadcast shm ranks 2 from 0 binomial\n";

Tuning ParseOrDie(const std::string& text) {
  StatusOr<Tuning> t = ParseTuning(text, "t.txt");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Tuning{};
}

// `t` formats with `line` in it and parses back to the same text.
void ExpectRoundTrip(const Tuning& t, const std::string& line) {
  const std::string text = FormatTuning(t);
  EXPECT_NE(text.find(line), std::string::npos) << text;
  EXPECT_EQ(FormatTuning(ParseOrDie(text)), text);
}

TEST(TuningTest, ParsesEveryStatement) {
  const Tuning t = ParseOrDie(kSample);
  EXPECT_EQ(t.origin, "t.txt");
  ASSERT_EQ(t.meta.size(), 2u);
  EXPECT_EQ(t.meta[0].first, "host");
  EXPECT_EQ(t.meta[0].second, "node17");
  EXPECT_EQ(t.meta[1].second, "AMD EPYC 9B45");
  ASSERT_EQ(t.backends.size(), 2u);
  EXPECT_EQ(t.backends[0].backend, BackendKind::kShm);
  EXPECT_DOUBLE_EQ(*t.backends[0].alpha_us, 0.35);
  EXPECT_DOUBLE_EQ(*t.backends[0].beta_gbps, 14.2);
  EXPECT_DOUBLE_EQ(*t.backends[0].copy_gbps, 30.1);
  EXPECT_EQ(t.backends[0].line, 6);
  EXPECT_EQ(t.backends[1].backend, BackendKind::kTcp);
  EXPECT_FALSE(t.backends[1].copy_gbps.has_value());
  ASSERT_EQ(t.gammas.size(), 2u);
  EXPECT_EQ(t.gammas[1].dtype, DataType::kBFloat16);
  EXPECT_EQ(t.gammas[1].op, ReduceOp::kSum);
  EXPECT_DOUBLE_EQ(t.gammas[1].gbps, 9.75);
  ASSERT_EQ(t.rules.size(), 5u);
  EXPECT_EQ(t.rules[1].from_bytes, 65536u);  // 64K
  EXPECT_EQ(t.rules[1].algorithm, "ring");
  EXPECT_EQ(t.rules[1].line, 11);
  EXPECT_EQ(t.rules[2].algorithm, "direct");
  EXPECT_EQ(t.rules[3].backend, BackendKind::kTcp);
  EXPECT_EQ(t.rules[3].nranks, 4);
  EXPECT_EQ(t.rules[4].collective, Collective::kBroadcast);
}

TEST(TuningTest, FormatRoundTrips) {
  const Tuning t = ParseOrDie(kSample);
  const std::string text = FormatTuning(t);
  const Tuning back = ParseOrDie(text);
  EXPECT_EQ(FormatTuning(back), text);
  EXPECT_EQ(back.meta, t.meta);
  ASSERT_EQ(back.rules.size(), t.rules.size());
  for (size_t i = 0; i < t.rules.size(); ++i) EXPECT_EQ(FormatRule(back.rules[i]), FormatRule(t.rules[i]));
  EXPECT_NE(text.find("rule allreduce shm ranks 2 from 65536 ring\n"), std::string::npos) << text;
  EXPECT_NE(text.find("backend tcp alpha_us 12 beta_gbps 1.25\n"), std::string::npos) << text;
  EXPECT_TRUE(CheckTuning(t).ok());
}

TEST(TuningTest, NumbersRoundTripExactly) {
  Tuning t;
  BackendTuning b;
  b.backend = BackendKind::kVerbs;
  b.alpha_us = 0.1 + 0.2;  // 0.30000000000000004
  b.beta_gbps = 1.0 / 3.0;
  t.backends.push_back(b);
  GammaTuning g;
  g.dtype = DataType::kFloat64;
  g.op = ReduceOp::kMax;
  g.gbps = 123456.789e-3;
  t.gammas.push_back(g);
  const Tuning back = ParseOrDie(FormatTuning(t));
  ASSERT_EQ(back.backends.size(), 1u);
  EXPECT_EQ(*back.backends[0].alpha_us, *b.alpha_us);
  EXPECT_EQ(*back.backends[0].beta_gbps, *b.beta_gbps);
  ASSERT_EQ(back.gammas.size(), 1u);
  EXPECT_EQ(back.gammas[0].gbps, g.gbps);
  EXPECT_EQ(back.gammas[0].op, ReduceOp::kMax);
}

struct BadCase {
  const char* line;     // the offending statement
  const char* problem;  // a part of the message
};

TEST(TuningTest, EveryErrorNamesFileLineAndProblem) {
  const BadCase kCases[] = {
      {"ciuic-tuning 1", "'ciuic-tuning' again"},
      {"alpha 3", "unknown statement 'alpha'"},
      {"backend", "backend needs a name"},
      {"backend ib alpha_us 1", "unknown backend 'ib' (valid: shm, tcp, verbs)"},
      {"backend shm", "needs at least one of alpha_us, beta_gbps, copy_gbps"},
      {"backend shm alfa_us 1", "unknown key 'alfa_us' in backend shm"},
      {"backend shm alpha_us 1 beta_gbps", "field 'beta_gbps' has no value"},
      {"backend shm alpha_us 1 alpha_us 2", "alpha_us given twice"},
      {"backend shm alpha_us 1.2.3", "alpha_us '1.2.3' is not a positive number"},
      {"backend shm alpha_us 0", "'0' is not a positive number"},
      {"backend shm alpha_us -1", "'-1' is not a positive number"},
      {"backend shm beta_gbps nan", "'nan' is not a positive number"},
      {"backend shm beta_gbps inf", "'inf' is not a positive number"},
      {"backend shm beta_gbps 1e999", "'1e999' is not a positive number"},
      {"backend shm copy_gbps 5GB", "'5GB' is not a positive number"},
      {"backend tcp alpha_us 2", "backend tcp given twice (first on line 3)"},
      {"backend shm between_hosts alpha_us 2", "shared memory does not reach between hosts"},
      {"backend tcp between_hosts", "backend tcp between_hosts needs at least one of alpha_us"},
      {"backend tcp between_hosts alpha_us 1 beta_gbps", "backend tcp between_hosts: field 'beta_gbps' has no value"},
      {"backend tcp between_hosts alpha_us 1 between_hosts 2", "unknown key 'between_hosts' in backend tcp between_hosts"},
      {"backend verbs alpha_us 1 between_hosts", "field 'between_hosts' has no value"},
      {"backend verbs pair_cores 3", "backend verbs: pair_cores '3' is not 1 or 2"},
      {"backend verbs pair_cores 1 pair_cores 2", "backend verbs: pair_cores given twice"},
      {"gamma f32 sum", "gamma takes a dtype, an op and GB/s"},
      {"gamma f128 sum 1", "unknown dtype 'f128' (valid: i8, u8"},
      {"gamma f32 xor 1", "unknown op 'xor' (valid: sum, prod, min, max, avg, band, bor, bxor, premul_sum)"},
      {"gamma f32 sum fast", "'fast' is not a positive number"},
      {"gamma f32 sum 20 dram", "then optionally dram and GB/s"},
      {"gamma f32 sum 20 ddr 5", "then optionally dram and GB/s"},
      {"gamma f32 sum 20 dram 0", "gamma f32 sum: dram '0' is not a positive number"},
      {"backend shm beta_dram_gbps -2", "beta_dram_gbps '-2' is not a positive number"},
      {"backend verbs exchange_gbps 0", "backend verbs: exchange_gbps '0' is not a positive number"},
      {"backend verbs exchange_dram_gbps 2 exchange_dram_gbps 3", "backend verbs: exchange_dram_gbps given twice"},
      {"exchange_steps shm 64K 70", "exchange_steps shm: no backend shm line before it"},
      {"exchange_steps tcp between_hosts 64K 7", "exchange_steps tcp between_hosts: no backend tcp between_hosts line"},
      {"exchange_steps ib 64K 7", "unknown backend 'ib'"},
      {"exchange_steps tcp", "exchange_steps tcp takes pairs of a step's bytes each way and GB/s"},
      {"exchange_steps tcp 64K 7 1M", "exchange_steps tcp takes pairs"},
      {"exchange_steps tcp 64K fast", "exchange_steps tcp 64K: 'fast' is not a positive number"},
      {"exchange_steps tcp 64K 0", "exchange_steps tcp 64K: '0' is not a positive number"},
      {"exchange_steps tcp 0 7", "exchange_steps tcp: a step of 0 bytes"},
      {"exchange_steps tcp 1M 7 64K 5", "exchange_steps tcp: step sizes must increase ('64K' after 1048576)"},
      {"memory 512K 40", "memory takes pairs of a working set in bytes and GB/s, at least two"},
      {"memory 512K 40 128M", "memory takes pairs"},
      {"memory 512K 40 128M slow", "memory 128M: 'slow' is not a positive number"},
      {"memory 128M 40 512K 6", "memory: working sets must increase ('512K' after 134217728)"},
      {"memory 512Q 40 128M 6", "memory '512Q'"},
      {"memory 0 40 128M 6", "memory: a working set of 0 bytes"},
      {"memory_shared 2", "memory_shared takes a core count and GB/s"},
      {"memory_shared 1 4.7", "memory_shared '1' is not a core count of 2 or more"},
      {"memory_shared two 4.7", "memory_shared 'two' is not a core count"},
      {"memory_shared 2 0", "memory_shared 2: '0' is not a positive number"},
      {"memory_shared 2 4.7 beyond", "memory_shared takes a core count and GB/s, then optionally beyond BYTES"},
      {"memory_shared 2 4.7 above 32M", "memory_shared takes a core count"},
      {"memory_shared 2 4.7 beyond 32Q", "memory_shared beyond '32Q'"},
      {"memory_shared 2 4.7 beyond 0", "memory_shared beyond: a cache of 0 bytes"},
      {"gamma i8 max 1", "gamma i8 max given twice (first on line 4)"},
      {"meta host", "meta needs a key and a text"},
      {"meta Host x", "meta key 'Host' is not [a-z0-9_]+"},
      {"meta git abc", "meta git given twice"},
      {"rule allreduce shm 2 from 0 ring", "expected 'rule COLLECTIVE BACKEND ranks N [hosts H] from BYTES ALGORITHM'"},
      {"rule allreduce shm ranks 2 from 0", "expected 'rule COLLECTIVE"},
      {"rule allreduce shm ranks 2 to 0 ring", "expected 'rule COLLECTIVE"},
      {"rule allreducee shm ranks 2 from 0 ring", "unknown collective 'allreducee' (valid: allreduce, broadcast"},
      {"rule allreduce rdma ranks 2 from 0 ring", "unknown backend 'rdma'"},
      {"rule allreduce shm ranks 0 from 0 ring", "ranks '0' is not a rank count"},
      {"rule allreduce shm ranks two from 0 ring", "ranks 'two' is not a rank count"},
      {"rule allreduce shm ranks 2 from 12Q ring", "from '12Q': '12Q': unknown unit 'Q'"},
      {"rule allreduce shm ranks 2 from -1 ring", "from '-1'"},
      {"rule allreduce shm ranks 2 from 0 fast",
       "unknown algorithm 'fast' for allreduce; valid: direct, ring, tree, rabenseifner, recdoubling"},
      {"rule broadcast shm ranks 2 from 0 recdoubling", "unknown algorithm 'recdoubling' for broadcast; valid: direct, ring, binomial, hier, knomial"},
      {"rule allreduce tcp ranks 2 from 0 direct", "'direct' for allreduce runs through one host's shared memory: only with backend shm"},
      {"rule reduce tcp ranks 2 from 0 direct", "'direct' for reduce runs through one host's shared memory: only with backend shm"},
      {"rule allgatherv shm ranks 2 from 0 direct", "unknown algorithm 'direct' for allgatherv"},
      {"rule broadcast tcp ranks 2 from 0 direct", "'direct' for broadcast runs through one host's shared memory: only with backend shm"},
      {"rule allreduce shm ranks 2 from 4096 tree", "duplicate rule for allreduce shm ranks 2 from 4096 (line 5)"},
      {"rule allreduce shm ranks 2 from 100 tree", "rules for allreduce shm ranks 2 are not sorted: from 100 after from 4096 (line 5)"},
  };
  // Lines 1-5: what the duplicates collide with; line 6: the case.
  const std::string preamble =
      "ciuic-tuning 1\n"
      "meta git abc\n"
      "backend tcp alpha_us 1\n"
      "gamma i8 max 2\n"
      "rule allreduce shm ranks 2 from 4096 ring  # a comment\n";
  for (const BadCase& c : kCases) {
    StatusOr<Tuning> t = ParseTuning(preamble + c.line + "\n", "dir/t.txt");
    ASSERT_FALSE(t.ok()) << c.line;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.status().message().rfind("dir/t.txt:6: ", 0), 0u) << c.line << " -> " << t.status().message();
    EXPECT_NE(t.status().message().find(c.problem), std::string::npos)
        << c.line << " -> " << t.status().message();
  }
  // The preamble alone is fine.
  EXPECT_TRUE(ParseTuning(preamble, "dir/t.txt").ok());
}

// The DRAM figures: backend fields, a gamma's dram rate and the memory
// curve, written back as read and applied to the model's parameters.
TEST(TuningTest, DramFiguresRoundTripAndApply) {
  const Tuning t = ParseOrDie(
      "ciuic-tuning 1\n"
      "backend shm alpha_us 0.4 beta_gbps 25 copy_gbps 48 beta_dram_gbps 8.5 copy_dram_gbps 11 pair_cores 1\n"
      "gamma f32 sum 21.5 dram 7.5\n"
      "memory 512K 47 2M 27.5 128M 11\n"
      "memory_shared 2 8.25\n");
  ASSERT_EQ(t.backends.size(), 1u);
  EXPECT_DOUBLE_EQ(*t.backends[0].beta_dram_gbps, 8.5);
  EXPECT_DOUBLE_EQ(*t.backends[0].copy_dram_gbps, 11);
  ASSERT_EQ(t.gammas.size(), 1u);
  EXPECT_DOUBLE_EQ(*t.gammas[0].dram_gbps, 7.5);
  ASSERT_EQ(t.memory.size(), 3u);
  EXPECT_EQ(t.memory[1].first, size_t{2} << 20);
  EXPECT_DOUBLE_EQ(t.memory[1].second, 27.5);
  const std::string text = FormatTuning(t);
  EXPECT_EQ(t.backends[0].pair_cores, 1);
  EXPECT_NE(text.find("beta_dram_gbps 8.5 copy_dram_gbps 11 pair_cores 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gamma f32 sum 21.5 dram 7.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("memory 524288 47 2097152 27.5 134217728 11\n"), std::string::npos) << text;
  EXPECT_NE(text.find("memory_shared 2 8.25\n"), std::string::npos) << text;
  EXPECT_EQ(FormatTuning(ParseOrDie(text)), text);
  EXPECT_NE(ParseTuning(text + "memory 1K 1 2K 1\n", "t").status().message().find("memory given twice"),
            std::string::npos);
  EXPECT_NE(ParseTuning(text + "memory_shared 4 3\n", "t").status().message().find("memory_shared given twice"),
            std::string::npos);
  CostParams p = DefaultCostParams(BackendKind::kShm);
  ApplyTuning(t, BackendKind::kShm, &p);
  EXPECT_DOUBLE_EQ(p.dram_beta_s_per_byte, 1 / 8.5e9);
  EXPECT_DOUBLE_EQ(p.dram_copy_s_per_byte, 1 / 11e9);
  EXPECT_DOUBLE_EQ(p.dram_gamma_s_per_byte, 1 / 7.5e9);
  ASSERT_EQ(p.memory_curve.size(), 3u);
  EXPECT_DOUBLE_EQ(p.memory_curve[2].first, 128.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(p.memory_curve[2].second, 1 / 11e9);
  EXPECT_EQ(p.dram_shared_cores, 2);
  EXPECT_DOUBLE_EQ(p.dram_shared_copy_s_per_byte, 1 / 8.25e9);
  EXPECT_DOUBLE_EQ(p.shared_cache_bytes, 0);
  // The cache the cores share, where ciuic-tune found it: round trips and
  // becomes the model's.
  const std::string shared = "ciuic-tuning 1\nmemory_shared 2 8.25 beyond 32M\n";
  const Tuning b = ParseOrDie(shared);
  EXPECT_EQ(b.memory_shared_beyond, size_t{32} << 20);
  const std::string again = FormatTuning(b);
  EXPECT_NE(again.find("memory_shared 2 8.25 beyond 33554432\n"), std::string::npos) << again;
  EXPECT_EQ(FormatTuning(ParseOrDie(again)), again);
  ApplyTuning(b, BackendKind::kShm, &p);
  EXPECT_DOUBLE_EQ(p.shared_cache_bytes, 32.0 * (1 << 20));
}

// The exchange figures (both ranks of the pair streaming at once) round
// trip and become the model's CPU cost per byte sent or received; a pair
// that shared one core took turns, so each rank's own cost is half.
TEST(TuningTest, ExchangeFiguresRoundTripAndApply) {
  const Tuning t = ParseOrDie(
      "ciuic-tuning 1\n"
      "backend tcp alpha_us 9 beta_gbps 4.5 exchange_gbps 3 exchange_dram_gbps 2.5 pair_cores 2\n"
      "backend shm alpha_us 0.7 beta_gbps 25 exchange_gbps 40 exchange_dram_gbps 18 pair_cores 1\n");
  ASSERT_EQ(t.backends.size(), 2u);
  EXPECT_DOUBLE_EQ(*t.backends[0].exchange_gbps, 3);
  EXPECT_DOUBLE_EQ(*t.backends[0].exchange_dram_gbps, 2.5);
  ExpectRoundTrip(t, "beta_gbps 4.5 exchange_gbps 3 exchange_dram_gbps 2.5 pair_cores 2\n");
  CostParams tcp = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(t, BackendKind::kTcp, &tcp);
  EXPECT_DOUBLE_EQ(tcp.exchange_s_per_byte, 1 / 3e9);
  EXPECT_DOUBLE_EQ(tcp.dram_exchange_s_per_byte, 1 / 2.5e9);
  CostParams shm = DefaultCostParams(BackendKind::kShm);
  ApplyTuning(t, BackendKind::kShm, &shm);
  EXPECT_DOUBLE_EQ(shm.exchange_s_per_byte, 0.5 / 40e9);
  EXPECT_DOUBLE_EQ(shm.dram_exchange_s_per_byte, 0.5 / 18e9);
  // A file without them leaves the model on the stream's beta.
  CostParams plain = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(ParseOrDie("ciuic-tuning 1\nbackend tcp beta_gbps 4\n"), BackendKind::kTcp, &plain);
  EXPECT_EQ(plain.exchange_s_per_byte, 0);
  EXPECT_EQ(plain.dram_exchange_s_per_byte, 0);
}

// The exchange-step curve round trips after its backend line and becomes
// factors on the stream's CPU cost per byte, each point's alpha taken out:
// alpha + the step's bytes both ways x exchange x factor is the point's
// own time.
TEST(TuningTest, ExchangeStepsRoundTripAndBecomeFactors) {
  const Tuning t = ParseOrDie(
      "ciuic-tuning 1\n"
      "meta shm_exchange copies_received\n"
      "backend tcp alpha_us 4 exchange_gbps 8 pair_cores 2\n"
      "exchange_steps tcp 64K 2 512K 16 16M 8\n"
      "backend shm alpha_us 0.5 exchange_gbps 100 pair_cores 1\n"
      "exchange_steps shm 64K 50\n");
  ASSERT_EQ(t.backends.size(), 2u);
  ASSERT_EQ(t.backends[0].exchange_steps.size(), 3u);
  EXPECT_EQ(t.backends[0].exchange_steps[1].first, 524288u);
  EXPECT_DOUBLE_EQ(t.backends[0].exchange_steps[1].second, 16);
  ExpectRoundTrip(t, "pair_cores 2\nexchange_steps tcp 65536 2 524288 16 16777216 8\n");
  CostParams tcp = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(t, BackendKind::kTcp, &tcp);
  ASSERT_EQ(tcp.exchange_steps.size(), 3u);
  // 512K each way at 16 GB/s: 65.536 us, less alpha 4 = 61.536 against
  // 131.072 us streamed at 8.
  EXPECT_DOUBLE_EQ(tcp.exchange_steps[1].first, 524288);
  EXPECT_NEAR(tcp.exchange_steps[1].second, 61.536 / 131.072, 1e-12);
  // The stream's own rate at 16M: less its one alpha, as the model charges
  // a step one (4 us of 4194.3).
  EXPECT_NEAR(tcp.exchange_steps[2].second, 1 - 4e-6 / (2.0 * 16777216 / 8e9), 1e-12);
  // 64K at 2 GB/s: slower than the stream, 65.536 - 4 us against 16.384.
  EXPECT_NEAR(tcp.exchange_steps[0].second, (65.536 - 4) / 16.384, 1e-12);
  // A pair on one core took turns: each rank's share is half the time.
  CostParams shm = DefaultCostParams(BackendKind::kShm);
  ApplyTuning(t, BackendKind::kShm, &shm);
  ASSERT_EQ(shm.exchange_steps.size(), 1u);
  EXPECT_NEAR(shm.exchange_steps[0].second, (0.5 * 2.62144 - 0.5) / (0.5 * 1.31072), 1e-12);
  // ciuic-tune's shm receivers copy each chunk out of the peer's memory;
  // tcp's chunks are the receiver's own.
  EXPECT_TRUE(shm.exchange_copies_received);
  EXPECT_FALSE(tcp.exchange_copies_received);
  CostParams two_levels = DefaultCostParams(BackendKind::kTcp);
  TakeIntraFrom(shm, &two_levels);
  EXPECT_TRUE(two_levels.intra_exchange_copies_received);
  EXPECT_FALSE(two_levels.exchange_copies_received);
  // A file without the meta (ciuic-tune before it) measured no copy out.
  const Tuning old = ParseOrDie("ciuic-tuning 1\nbackend shm alpha_us 0.5 exchange_gbps 100\n");
  CostParams old_shm = DefaultCostParams(BackendKind::kShm);
  ApplyTuning(old, BackendKind::kShm, &old_shm);
  EXPECT_FALSE(old_shm.exchange_copies_received);
  // An alpha above a point's time leaves the floor, not a free step.
  CostParams slow = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(ParseOrDie("ciuic-tuning 1\nbackend tcp alpha_us 500 exchange_gbps 8\nexchange_steps tcp 64K 2\n"),
              BackendKind::kTcp, &slow);
  ASSERT_EQ(slow.exchange_steps.size(), 1u);
  EXPECT_DOUBLE_EQ(slow.exchange_steps[0].second, 0.1);
  // Without exchange_gbps there is no stream to scale: no curve.
  CostParams bare = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(ParseOrDie("ciuic-tuning 1\nbackend tcp alpha_us 4\nexchange_steps tcp 64K 2\n"), BackendKind::kTcp,
              &bare);
  EXPECT_TRUE(bare.exchange_steps.empty());
  // Inside a host of a two-level job: shm's curve.
  TakeIntraFrom(shm, &tcp);
  EXPECT_EQ(tcp.intra_exchange_steps, shm.exchange_steps);
  // Between hosts: its own line's curve, round trip included; once only.
  const Tuning between = ParseOrDie(
      "ciuic-tuning 1\nbackend tcp alpha_us 4 exchange_gbps 8\nbackend tcp between_hosts alpha_us 40 exchange_gbps 2\n"
      "exchange_steps tcp between_hosts 1M 1\n");
  ExpectRoundTrip(between, "backend tcp between_hosts alpha_us 40 exchange_gbps 2\nexchange_steps tcp between_hosts 1048576 1\n");
  CostParams net = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(between, BackendKind::kTcp, &net, DataType::kFloat32, ReduceOp::kSum, TuningLevel::kBetweenHosts);
  ASSERT_EQ(net.exchange_steps.size(), 1u);
  EXPECT_NEAR(net.exchange_steps[0].second, (2097.152 - 40) / 1048.576, 1e-12);  // one alpha, the step's
  CostParams loop = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(between, BackendKind::kTcp, &loop);
  EXPECT_TRUE(loop.exchange_steps.empty());  // the plain line has none
  StatusOr<Tuning> twice = ParseTuning(
      "ciuic-tuning 1\nbackend tcp alpha_us 4\nexchange_steps tcp 64K 7\nexchange_steps tcp 1M 6\n", "t.txt");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), "t.txt:4: exchange_steps tcp given twice");
}

// Between hosts ciuic-tune measures the machine's CPU time per byte
// (cpu_gbps): it round trips and becomes the model's CPU cost of a byte
// between hosts, apart from the link's rate.
TEST(TuningTest, MachineCpuBetweenHostsRoundTripsAndApplies) {
  const Tuning t = ParseOrDie(
      "ciuic-tuning 1\n"
      "meta hosts 2\n"
      "backend tcp between_hosts alpha_us 10 beta_gbps 1.2 exchange_gbps 2.4 cpu_gbps 2.5 pair_cores 2\n");
  ASSERT_EQ(t.backends.size(), 1u);
  EXPECT_DOUBLE_EQ(*t.backends[0].cpu_gbps, 2.5);
  ExpectRoundTrip(t, "exchange_gbps 2.4 cpu_gbps 2.5 pair_cores 2\n");
  CostParams p = DefaultCostParams(BackendKind::kTcp);
  ApplyTuning(t, BackendKind::kTcp, &p, DataType::kFloat32, ReduceOp::kSum, TuningLevel::kBetweenHosts);
  EXPECT_DOUBLE_EQ(p.net_cpu_s_per_byte, 1 / 2.5e9);
  EXPECT_DOUBLE_EQ(p.beta_s_per_byte, 1 / 1.2e9);
  EXPECT_NE(ParseTuning("ciuic-tuning 1\nbackend tcp between_hosts cpu_gbps -1\n", "t").status().message().find(
                "backend tcp between_hosts: cpu_gbps '-1' is not a positive number"),
            std::string::npos);
}

TEST(TuningTest, HeaderErrors) {
  struct Case {
    const char* text;
    const char* message;
  } kCases[] = {
      {"", "t.txt:1: no 'ciuic-tuning 1' line: not a tuning file"},
      {"# only a comment\n\n", "t.txt:3: no 'ciuic-tuning 1' line"},
      {"\nbackend shm alpha_us 1\n", "t.txt:2: expected 'ciuic-tuning 1' first, got 'backend'"},
      {"ciuic-tuning 2\n", "t.txt:1: unsupported format version '2' (this build reads 1)"},
      {"ciuic-tuning\n", "t.txt:1: ciuic-tuning takes one field, the format version"},
  };
  for (const Case& c : kCases) {
    StatusOr<Tuning> t = ParseTuning(c.text, "t.txt");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().message();
  }
}

TEST(TuningTest, RuleLookupAtBoundaries) {
  const Tuning t = ParseOrDie(kSample);
  auto algo = [&](size_t bytes, int n = 2, BackendKind b = BackendKind::kShm,
                  Collective c = Collective::kAllReduce) {
    return TunedAlgorithm(t, c, b, n, bytes).value_or("none");
  };
  EXPECT_EQ(algo(0), "recdoubling");
  EXPECT_EQ(algo(65535), "recdoubling");
  EXPECT_EQ(algo(65536), "ring");
  EXPECT_EQ(algo(1048575), "ring");
  EXPECT_EQ(algo(1048576), "direct");
  EXPECT_EQ(algo(SIZE_MAX), "direct");
  // Exactly that rank count, backend and collective.
  EXPECT_EQ(algo(65536, 3), "none");
  EXPECT_EQ(algo(65536, 2, BackendKind::kTcp), "none");
  EXPECT_EQ(algo(65536, 2, BackendKind::kShm, Collective::kReduce), "none");
  EXPECT_EQ(algo(65536, 2, BackendKind::kShm, Collective::kBroadcast), "binomial");
  // Below the first rule of a group: no rule.
  EXPECT_EQ(algo(1023, 4, BackendKind::kTcp), "none");
  EXPECT_EQ(algo(1024, 4, BackendKind::kTcp), "rabenseifner");
  const TuningRule* r = FindRule(t, Collective::kAllReduce, BackendKind::kShm, 2, 70000);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->line, 11);
  EXPECT_EQ(FormatRule(*r), "rule allreduce shm ranks 2 from 65536 ring");
}

// Rules may name a host count: a call on that many hosts takes them first,
// then the rules without one; another count's rules never apply.
TEST(TuningTest, RulesOfAHostCountWinOverThoseWithout) {
  const Tuning t = ParseOrDie(
      "ciuic-tuning 1\n"
      "rule allreduce tcp ranks 4 from 0 recdoubling\n"
      "rule allreduce tcp ranks 4 from 1M ring\n"
      "rule allreduce tcp ranks 4 hosts 2 from 256K hier\n"
      "rule allreduce tcp ranks 4 hosts 4 from 0 tree\n"
      "rule allgather tcp ranks 6 hosts 3 from 0 hier\n");
  auto algo = [&](size_t bytes, int hosts, int n = 4, Collective c = Collective::kAllReduce) {
    return TunedAlgorithm(t, c, BackendKind::kTcp, n, bytes, hosts).value_or("none");
  };
  EXPECT_EQ(algo(8, 1), "recdoubling");
  EXPECT_EQ(algo(2 << 20, 1), "ring");
  EXPECT_EQ(algo(8, 2), "recdoubling");       // below hosts 2's first rule: the general ones
  EXPECT_EQ(algo(256 << 10, 2), "hier");
  EXPECT_EQ(algo(2 << 20, 2), "hier");        // hosts 2's rule runs on past the general 1M
  EXPECT_EQ(algo(8, 4), "tree");
  EXPECT_EQ(algo(8, 3), "recdoubling");
  EXPECT_EQ(algo(64, 3, 6, Collective::kAllGather), "hier");
  EXPECT_EQ(algo(64, 2, 6, Collective::kAllGather), "none");  // no rule without hosts
  EXPECT_EQ(FormatRule(*FindRule(t, Collective::kAllReduce, BackendKind::kTcp, 4, 1 << 20, 2)),
            "rule allreduce tcp ranks 4 hosts 2 from 262144 hier");
  // Round trip through the text, and each host count its own sorted group.
  const Tuning back = ParseOrDie(FormatTuning(t));
  ASSERT_EQ(back.rules.size(), t.rules.size());
  for (size_t i = 0; i < t.rules.size(); ++i) EXPECT_EQ(back.rules[i].nhosts, t.rules[i].nhosts);
  EXPECT_TRUE(CheckTuning(t).ok());
  Tuning negative = t;
  negative.rules[2].nhosts = -1;
  EXPECT_EQ(CheckTuning(negative).code(), StatusCode::kInvalidArgument);
  negative.rules[2].nhosts = 5;  // more hosts than ranks: the parser's check
  EXPECT_EQ(CheckTuning(negative).code(), StatusCode::kInvalidArgument);
  const std::pair<const char*, const char*> bad[] = {
      {"rule allreduce tcp ranks 4 hosts 0 from 0 ring", "hosts '0' is not a host count"},
      {"rule allreduce tcp ranks 4 hosts x from 0 ring", "hosts 'x' is not a host count"},
      {"rule allreduce tcp ranks 4 hosts 5 from 0 ring", "hosts 5 is more than ranks 4"},
      {"rule allreduce tcp ranks 4 hosts 2 ring", "expected 'rule COLLECTIVE BACKEND ranks N [hosts H] from"},
      {"rule allreduce tcp ranks 4 hosts 2 hosts 2 from 0 ring", "expected 'rule"},
  };
  for (const auto& [line, want] : bad) {
    auto r = ParseTuning(std::string("ciuic-tuning 1\n") + line + "\n", "t.txt");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << line;
    EXPECT_NE(r.status().message().find(std::string("t.txt:2: ") + want), std::string::npos) << r.status().ToString();
  }
  auto unsorted = ParseTuning(
      "ciuic-tuning 1\nrule allreduce tcp ranks 4 hosts 2 from 1M ring\n"
      "rule allreduce tcp ranks 4 from 0 ring\nrule allreduce tcp ranks 4 hosts 2 from 0 hier\n",
      "t.txt");
  EXPECT_NE(unsorted.status().message().find("t.txt:4: rules for allreduce tcp ranks 4 hosts 2 are not sorted"),
            std::string::npos)
      << unsorted.status().ToString();
}

TEST(TuningTest, MeasuredOnOneMachineIsWhatMetaHostsSays) {
  auto one = ParseTuning("ciuic-tuning 1\nmeta host vm\nmeta hosts 1\n", "t");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_TRUE(MeasuredOnOneMachine(*one));
  auto two = ParseTuning("ciuic-tuning 1\nmeta hosts 2\n", "t");
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(MeasuredOnOneMachine(*two));
  auto old = ParseTuning("ciuic-tuning 1\nmeta host vm\n", "t");  // files before the key: not known
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(MeasuredOnOneMachine(*old));
}

TEST(TuningTest, ApplyTuningOverridesWhatTheFileHas) {
  const Tuning t = ParseOrDie(kSample);
  const CostParams base = DefaultCostParams(BackendKind::kTcp);
  CostParams p = base;
  ApplyTuning(t, BackendKind::kTcp, &p);
  EXPECT_DOUBLE_EQ(p.alpha_s, 12e-6);
  EXPECT_DOUBLE_EQ(p.beta_s_per_byte, 1 / 1.25e9);
  EXPECT_DOUBLE_EQ(p.copy_s_per_byte, base.copy_s_per_byte);  // not in the tcp line
  EXPECT_DOUBLE_EQ(p.gamma_s_per_byte, 1 / 21.5e9);           // f32 sum
  EXPECT_EQ(p.chunk_bytes, base.chunk_bytes);
  p = base;
  ApplyTuning(t, BackendKind::kShm, &p, DataType::kBFloat16, ReduceOp::kAvg);  // avg: sum's gamma
  EXPECT_DOUBLE_EQ(p.alpha_s, 0.35e-6);
  EXPECT_DOUBLE_EQ(p.copy_s_per_byte, 1 / 30.1e9);
  EXPECT_DOUBLE_EQ(p.gamma_s_per_byte, 1 / 9.75e9);
  p = base;
  ApplyTuning(t, BackendKind::kVerbs, &p, DataType::kFloat64, ReduceOp::kSum);  // nothing for either
  EXPECT_DOUBLE_EQ(p.alpha_s, base.alpha_s);
  EXPECT_DOUBLE_EQ(p.beta_s_per_byte, base.beta_s_per_byte);
  EXPECT_DOUBLE_EQ(p.gamma_s_per_byte, base.gamma_s_per_byte);
}

// One line per (backend, level): a job across hosts takes the between_hosts
// line for its network, one machine the plain line.
TEST(TuningTest, BackendLinesPerLevel) {
  const std::string text =
      "ciuic-tuning 1\n"
      "backend shm alpha_us 0.5 beta_gbps 10\n"
      "backend tcp alpha_us 13 beta_gbps 5 copy_gbps 30\n"
      "backend tcp between_hosts alpha_us 48.25 beta_gbps 0.118\n";
  const Tuning t = ParseOrDie(text);
  ASSERT_EQ(t.backends.size(), 3u);
  EXPECT_FALSE(t.backends[1].between_hosts);
  EXPECT_TRUE(t.backends[2].between_hosts);
  EXPECT_EQ(t.backends[2].line, 4);
  // Round trip keeps the word and the order.
  const std::string formatted = FormatTuning(t);
  EXPECT_NE(formatted.find("backend tcp between_hosts alpha_us 48.25 beta_gbps 0.118\n"), std::string::npos)
      << formatted;
  EXPECT_EQ(FormatTuning(ParseOrDie(formatted)), formatted);
  EXPECT_TRUE(CheckTuning(t).ok());
  // The same level twice is an error naming the level and the first line.
  StatusOr<Tuning> twice = ParseTuning(text + "backend tcp between_hosts alpha_us 50\n", "t");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("t:5: backend tcp between_hosts given twice (first on line 4)"),
            std::string::npos)
      << twice.status().ToString();

  const CostParams base = DefaultCostParams(BackendKind::kTcp);
  CostParams one = base, between = base;
  ApplyTuning(t, BackendKind::kTcp, &one);
  ApplyTuning(t, BackendKind::kTcp, &between, DataType::kFloat32, ReduceOp::kSum, TuningLevel::kBetweenHosts);
  EXPECT_DOUBLE_EQ(one.alpha_s, 13e-6);
  EXPECT_DOUBLE_EQ(one.beta_s_per_byte, 1 / 5e9);
  EXPECT_DOUBLE_EQ(one.copy_s_per_byte, 1 / 30e9);
  EXPECT_DOUBLE_EQ(between.alpha_s, 48.25e-6);
  EXPECT_DOUBLE_EQ(between.beta_s_per_byte, 1 / 0.118e9);
  EXPECT_DOUBLE_EQ(between.copy_s_per_byte, base.copy_s_per_byte);  // not in the between_hosts line
  EXPECT_EQ(FindBackendLine(t, BackendKind::kTcp, TuningLevel::kBetweenHosts), &t.backends[2]);
  EXPECT_EQ(FindBackendLine(t, BackendKind::kShm, TuningLevel::kBetweenHosts), &t.backends[0]);
  EXPECT_EQ(FindBackendLine(t, BackendKind::kVerbs, TuningLevel::kBetweenHosts), nullptr);
}

// Without a between_hosts line a job across hosts falls back to the plain
// line, unless the file was measured on one machine (loopback: defaults).
TEST(TuningTest, BetweenHostsFallsBackToThePlainLineUnlessMeasuredOnOneMachine) {
  const std::string lines = "backend tcp alpha_us 13 beta_gbps 5\n";
  const Tuning any = ParseOrDie("ciuic-tuning 1\n" + lines);
  const Tuning one = ParseOrDie("ciuic-tuning 1\nmeta hosts 1\n" + lines);
  const Tuning two = ParseOrDie("ciuic-tuning 1\nmeta hosts 2\n" + lines);
  const CostParams base = DefaultCostParams(BackendKind::kTcp);
  for (const Tuning* t : {&any, &two}) {
    CostParams p = base;
    ApplyTuning(*t, BackendKind::kTcp, &p, DataType::kFloat32, ReduceOp::kSum, TuningLevel::kBetweenHosts);
    EXPECT_DOUBLE_EQ(p.alpha_s, 13e-6);
  }
  CostParams p = base;
  ApplyTuning(one, BackendKind::kTcp, &p, DataType::kFloat32, ReduceOp::kSum, TuningLevel::kBetweenHosts);
  EXPECT_DOUBLE_EQ(p.alpha_s, base.alpha_s);
  EXPECT_DOUBLE_EQ(p.beta_s_per_byte, base.beta_s_per_byte);
  EXPECT_EQ(FindBackendLine(one, BackendKind::kTcp, TuningLevel::kBetweenHosts), nullptr);
  // A between_hosts line alone leaves the one-machine level at the defaults.
  const Tuning only = ParseOrDie("ciuic-tuning 1\nbackend tcp between_hosts alpha_us 40\n");
  p = base;
  ApplyTuning(only, BackendKind::kTcp, &p);
  EXPECT_DOUBLE_EQ(p.alpha_s, base.alpha_s);
}

TEST(TuningTest, CheckTuningRejectsWhatCannotBeWritten) {
  Tuning t = ParseOrDie(kSample);
  EXPECT_TRUE(CheckTuning(t).ok());
  Tuning unsorted = t;
  std::swap(unsorted.rules[0], unsorted.rules[1]);
  EXPECT_NE(CheckTuning(unsorted).message().find("not sorted"), std::string::npos);
  Tuning hash = t;
  hash.meta.emplace_back("note", "a # b");
  EXPECT_FALSE(CheckTuning(hash).ok());
  Tuning nan = t;
  nan.gammas[0].gbps = std::nan("");
  EXPECT_NE(CheckTuning(nan).message().find("is not a positive number"), std::string::npos);
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/ciuic-tuning-test-XXXXXX";
    const int fd = mkstemp(tmpl);
    path_ = tmpl;
    if (fd >= 0) {
      const ssize_t w = write(fd, text.data(), text.size());
      EXPECT_EQ(w, static_cast<ssize_t>(text.size()));
      close(fd);
    }
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(TuningTest, LoadTuningFile) {
  TempFile good(kSample);
  StatusOr<Tuning> t = LoadTuningFile(good.path());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->origin, good.path());
  EXPECT_EQ(t->rules.size(), 5u);

  TempFile bad("ciuic-tuning 1\nbackend shm alpha_us x\n");
  t = LoadTuningFile(bad.path());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message().rfind("CIUIC_TUNING_FILE: " + bad.path() + ":2: ", 0), 0u)
      << t.status().message();

  t = LoadTuningFile("/nonexistent/ciuic-tuning.txt");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("CIUIC_TUNING_FILE=/nonexistent/ciuic-tuning.txt"), std::string::npos)
      << t.status().message();
}

// PlanCall for a `coll` of `bytes` on 4 ranks over shm (a fresh selection
// cache unless one is given).
StatusOr<CallPlan> PlanFor(size_t bytes, const Tuning* tuning, BackendKind backend = BackendKind::kShm,
                           const std::string& algo = "auto", SelectionCache* shared = nullptr,
                           Collective coll = Collective::kAllReduce) {
  OpDesc op;
  op.coll = coll;
  op.count = bytes / 4;
  SelectionCache cache;
  SelectionContext ctx;
  ctx.backend = backend;
  ctx.params = DefaultCostParams(backend);
  ctx.tuning = tuning;
  CIUIC_ASSIGN_OR_RETURN(ctx.algo, AlgoKnob::Parse(algo));
  return PlanCall(op, 0, 4, ctx, shared ? shared : &cache);
}

std::string FirstWord(const std::string& s) { return s.substr(0, s.find(' ')); }

// Selection takes the host count from the context's host map.
TEST(TuningTest, PlanCallFollowsARuleOfItsHostCount) {
  const Tuning t = ParseOrDie("ciuic-tuning 1\nrule allreduce tcp ranks 4 hosts 2 from 0 ring\n"
                              "rule allreduce tcp ranks 4 from 0 recdoubling\n");
  for (const auto& [host_of, want] : std::vector<std::pair<std::vector<int>, std::string>>{
           {{0, 0, 1, 1}, "ring"}, {{}, "recdoubling"}, {{0, 1, 2, 2}, "recdoubling"}}) {
    OpDesc op;
    op.coll = Collective::kAllReduce;
    op.count = 1 << 18;
    SelectionCache cache;
    SelectionContext ctx;
    ctx.backend = BackendKind::kTcp;
    ctx.params = DefaultCostParams(BackendKind::kTcp);
    ctx.tuning = &t;
    ctx.host_of = host_of;
    ctx.params.host_of = host_of;
    StatusOr<CallPlan> plan = PlanCall(op, 0, 4, ctx, &cache);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(FirstWord(plan->why), want) << plan->why;
    EXPECT_NE(plan->why.find("tuned: "), std::string::npos) << plan->why;
  }
}

// CIUIC_KNOMIAL_RADIX and CIUIC_PAT_AGGREGATION reach the generators
// through CostParams: rank 0's messages show the radix and the aggregation.
TEST(TuningTest, PlanCallPassesTheRadixAndTheAggregation) {
  auto plan = [](Collective coll, const char* algo, int radix, int aggregation) {
    OpDesc op;
    op.coll = coll;
    op.count = 1024;
    SelectionCache cache;
    SelectionContext ctx;
    ctx.backend = BackendKind::kTcp;
    ctx.params = DefaultCostParams(BackendKind::kTcp);
    ctx.params.radix = radix;
    ctx.params.aggregation = aggregation;
    ctx.algo = *AlgoKnob::Parse(algo);
    StatusOr<CallPlan> p = PlanCall(op, 0, 16, ctx, &cache);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    size_t sends = 0, largest = 0;
    for (const Step& st : p->schedule.steps) {
      if (st.send_peer < 0) continue;
      ++sends;
      largest = std::max(largest, st.src.count);
    }
    return std::make_pair(sends, largest);
  };
  // The root of a radix-16 tree on 16 ranks sends to all 15; radix 2, to 4.
  EXPECT_EQ(plan(Collective::kBroadcast, "broadcast:knomial", 16, 0).first, 15u);
  EXPECT_EQ(plan(Collective::kBroadcast, "broadcast:knomial", 2, 0).first, 4u);
  // PAT on 16 ranks: one message carries 8 blocks with full aggregation,
  // at most 2 with aggregation 2.
  EXPECT_EQ(plan(Collective::kAllGather, "allgather:pat", 0, 0).second, 8u * 1024);
  EXPECT_EQ(plan(Collective::kAllGather, "allgather:pat", 0, 2).second, 2u * 1024);
}

TEST(TuningTest, PlanCallFollowsARule) {
  const size_t bytes = 1 << 20;
  StatusOr<CallPlan> model = PlanFor(bytes, nullptr);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::string model_algo = FirstWord(model->why);
  // A rule for an algorithm the model does not choose here.
  const std::string other = model_algo == "tree" ? "ring" : "tree";
  const Tuning t = ParseOrDie("ciuic-tuning 1\nrule allreduce shm ranks 4 from 4096 " + other + "\n");
  StatusOr<CallPlan> tuned = PlanFor(bytes, &t);
  ASSERT_TRUE(tuned.ok()) << tuned.status().ToString();
  EXPECT_EQ(FirstWord(tuned->why), other) << tuned->why;
  EXPECT_NE(tuned->why.find("tuned: rule allreduce shm ranks 4 from 4096 " + other + " (t.txt:2)"), std::string::npos)
      << tuned->why;
  EXPECT_NE(tuned->why.find("model predicts "), std::string::npos) << tuned->why;
  EXPECT_NE(tuned->why.find("model's choice: " + model_algo), std::string::npos) << tuned->why;
  CollectiveArgs args;
  args.rank = 0;
  args.nranks = 4;
  args.count = bytes / 4;
  StatusOr<Schedule> expect = MakeSchedule(*ParseAlgorithm(Collective::kAllReduce, other), args);
  ASSERT_TRUE(expect.ok());
  EXPECT_EQ(tuned->schedule.steps.size(), expect->steps.size());

  // Below the rule, on another backend, or forced by CIUIC_ALGO: not tuned.
  StatusOr<CallPlan> below = PlanFor(2048, &t);
  ASSERT_TRUE(below.ok());
  EXPECT_EQ(below->why.find("tuned"), std::string::npos) << below->why;
  StatusOr<CallPlan> tcp = PlanFor(bytes, &t, BackendKind::kTcp);
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->why.find("tuned"), std::string::npos) << tcp->why;
  StatusOr<CallPlan> forced = PlanFor(bytes, &t, BackendKind::kShm, "recdoubling");
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(FirstWord(forced->why), "recdoubling");
  EXPECT_NE(forced->why.find("forced by CIUIC_ALGO"), std::string::npos);
}

TEST(TuningTest, PlanCallAppliesRulesAtTheExactSize) {
  // 40000 B is inside the size class (32 KiB, 64 KiB]: the rule boundary
  // holds anyway, and the selection cache shared by the calls (as in a
  // communicator) does not carry one size's rule over to another.
  const Tuning t = ParseOrDie("ciuic-tuning 1\nrule allreduce shm ranks 4 from 0 ring\n"
                              "rule allreduce shm ranks 4 from 40000 tree\n");
  SelectionCache cache;
  for (size_t bytes : {39996, 40000, 39996, 65536, 36000}) {
    StatusOr<CallPlan> plan = PlanFor(bytes, &t, BackendKind::kShm, "auto", &cache);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(FirstWord(plan->why), bytes >= 40000 ? "tree" : "ring") << bytes << ": " << plan->why;
  }
}

// A rule naming the shared-memory family runs it where it can run the
// call, and leaves the call to the model where it cannot (a reduce over the
// one-exchange limit).
TEST(TuningTest, PlanCallFollowsADirectRuleWhereItApplies) {
  const size_t bytes = 1 << 20;
  const Tuning t = ParseOrDie("ciuic-tuning 1\nrule allreduce shm ranks 4 from 0 tree\n"
                              "rule allreduce shm ranks 4 from 65536 direct\nrule reduce shm ranks 4 from 0 direct\n");
  ASSERT_EQ(TunedAlgorithm(t, Collective::kAllReduce, BackendKind::kShm, 4, bytes).value_or(""), "direct");
  StatusOr<CallPlan> plan = PlanFor(bytes, &t);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->algorithm->kind, AlgorithmKind::kShmDirect) << plan->why;
  EXPECT_NE(plan->why.find("tuned: rule allreduce shm ranks 4 from 65536 direct"), std::string::npos) << plan->why;
  StatusOr<CallPlan> small = PlanFor(4096, &t);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(FirstWord(small->why), "tree") << small->why;
  StatusOr<CallPlan> reduce = PlanFor(bytes, &t, BackendKind::kShm, "auto", nullptr, Collective::kReduce);
  ASSERT_TRUE(reduce.ok()) << reduce.status().ToString();
  EXPECT_EQ(reduce->algorithm->kind, AlgorithmKind::kSchedule) << reduce->why;
  EXPECT_EQ(reduce->why.find("tuned"), std::string::npos) << reduce->why;
  StatusOr<CallPlan> small_reduce = PlanFor(4096, &t, BackendKind::kShm, "auto", nullptr, Collective::kReduce);
  ASSERT_TRUE(small_reduce.ok());
  EXPECT_EQ(small_reduce->algorithm->kind, AlgorithmKind::kExchange) << small_reduce->why;
}

TEST(TuningTest, PlanCallUsesTheFilesGammaForTheModel) {
  // With reductions made very slow, the model stops choosing algorithms
  // that reduce more bytes per rank (recursive doubling reduces the whole
  // vector on every rank; ring and Rabenseifner a 1/n share).
  const size_t bytes = 1 << 10;
  const Tuning slow = ParseOrDie("ciuic-tuning 1\ngamma f32 sum 0.00001\n");
  StatusOr<CallPlan> plan = PlanFor(bytes, &slow, BackendKind::kTcp);
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(FirstWord(plan->why), "recdoubling") << plan->why;
  StatusOr<CallPlan> fast = PlanFor(bytes, nullptr, BackendKind::kTcp);
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(FirstWord(fast->why), "recdoubling") << fast->why;
}

}  // namespace
}  // namespace ciuic::collectives
