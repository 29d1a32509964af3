// Every generator, simulated for every rank and compared with a reference:
// collective x algorithm x nranks x count x channels x chunk size x link
// slots x in-place. Built twice: the `unit` binary runs a reduced matrix,
// the `slow` one (CIUIC_COLLECTIVES_FULL_MATRIX) the full one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"
#include "reference.h"

namespace ciuic::collectives::testing {
namespace {

// The two binaries get different suite names, so CTest sees distinct tests.
#ifdef CIUIC_COLLECTIVES_FULL_MATRIX
constexpr bool kFull = true;
#define CIUIC_ALGORITHMS_SUITE AlgorithmsFullMatrixTest
#else
constexpr bool kFull = false;
#define CIUIC_ALGORITHMS_SUITE AlgorithmsTest
#endif

struct Pair {
  Collective collective;
  Algorithm algorithm;
};

std::vector<Pair> AllPairs() {
  std::vector<Pair> p;
  for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                       Collective::kAllGatherv, Collective::kReduceScatter, Collective::kReduceScatterv,
                       Collective::kAllToAll, Collective::kBarrier, Collective::kGather, Collective::kScatter,
                       Collective::kAllToAllv}) {
    for (Algorithm a : AlgorithmsFor(c)) p.push_back({c, a});
  }
  return p;
}

std::vector<int> RankCounts() { return {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}; }

// Host maps for the hierarchical algorithms, by variant: hosts of 2, of 3,
// n-1 + 1, interleaved (ranks 0,2,4.. on host 0), one host, none (every rank
// its own host), 1 + n-1 (a lone rank first), uneven interleaved (ranks
// 0,3,6.. on host 0, the rest on host 1).
std::vector<int> HostLayout(int n, int variant) {
  if (variant % 8 == 5) return {};
  std::vector<int> h(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    switch (variant % 8) {
      case 0: h[static_cast<size_t>(r)] = r / 2; break;
      case 1: h[static_cast<size_t>(r)] = r / 3; break;
      case 2: h[static_cast<size_t>(r)] = r == n - 1 && n > 1 ? 1 : 0; break;
      case 3: h[static_cast<size_t>(r)] = r % 2; break;
      case 6: h[static_cast<size_t>(r)] = r == 0 ? 0 : 1; break;
      case 7: h[static_cast<size_t>(r)] = r % 3 == 0 ? 0 : 1; break;
      default: h[static_cast<size_t>(r)] = 0; break;
    }
  }
  return h;
}

// Small chunks pipeline every message over several chunks; large ones
// send most messages in one chunk.
size_t SmallChunkBytes(size_t count, size_t elem) { return (count <= 1000 ? 3 : 1000) * elem; }
constexpr size_t kLargeChunkBytes = 1 << 20;

std::vector<Case> Matrix(const Pair& pair) {
  std::vector<Case> cases;
  const std::vector<size_t> counts = pair.collective == Collective::kBarrier
                                         ? std::vector<size_t>{0}
                                         : std::vector<size_t>{0, 1, 7, 1000, 65539};
  for (int n : RankCounts()) {
    for (size_t count : counts) {
      for (int nch : {1, 2}) {
        for (bool small : {true, false}) {
          for (int slots : {1, 4}) {
            for (bool in_place : {false, true}) {
              // The reduced matrix keeps every dimension but not every
              // combination of the expensive ones.
              if (!kFull && count == 65539 && (n % 4 != 1 || slots == 4 || nch == 2)) continue;
              if (!kFull && count == 1000 && (n % 2 == 0) == (slots == 4) && nch == 2) continue;
              Case c;
              c.collective = pair.collective;
              c.algorithm = pair.algorithm;
              c.nranks = n;
              c.count = count;
              c.nchannels = nch;
              c.chunk_bytes = small ? SmallChunkBytes(count, sizeof(int32_t)) : kLargeChunkBytes;
              c.slots = slots;
              c.in_place = in_place;
              c.root = (nch + slots + (in_place ? 1 : 0) + static_cast<int>(count)) % n;
              if (pair.algorithm == Algorithm::kHierarchical) c.host_of = HostLayout(n, static_cast<int>(cases.size()));
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

class CIUIC_ALGORITHMS_SUITE : public ::testing::TestWithParam<Pair> {};

TEST_P(CIUIC_ALGORITHMS_SUITE, MatchesReferenceInt32Sum) {
  int failures = 0;
  const std::vector<Case> cases = Matrix(GetParam());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string err = Check<int32_t>(cases[i], Op::kSum, static_cast<uint32_t>(i) + 1);
    if (!err.empty()) {
      ADD_FAILURE() << err;
      if (++failures >= 5) break;
    }
  }
}

#ifndef CIUIC_COLLECTIVES_FULL_MATRIX  // the slow binary runs the matrix only

// Every element type and op on a smaller matrix (the combining order does
// not matter for these exact values, the dtype handling and op plumbing do).
TEST_P(CIUIC_ALGORITHMS_SUITE, EveryTypeAndOp) {
  const Pair pair = GetParam();
  if (pair.collective == Collective::kBarrier) GTEST_SKIP() << "a barrier moves no data";
  int failures = 0;
  uint32_t seed = 11;
  for (int n : {1, 3, 4, 7}) {
    for (size_t count : {size_t{1}, size_t{13}, size_t{100}}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.collective = pair.collective;
        c.algorithm = pair.algorithm;
        c.nranks = n;
        c.count = count;
        c.nchannels = 2;
        c.chunk_bytes = 40;
        c.slots = 1;
        c.in_place = in_place;
        c.root = n - 1;
        if (pair.algorithm == Algorithm::kHierarchical) c.host_of = HostLayout(n, static_cast<int>(count) + n);
        for (Op op : {Op::kSum, Op::kProd, Op::kMin, Op::kMax}) {
          for (const std::string& err :
               {Check<float>(c, op, ++seed), Check<double>(c, op, ++seed), Check<int32_t>(c, op, ++seed),
                Check<int64_t>(c, op, ++seed), Check<uint8_t>(c, op, ++seed)}) {
            if (!err.empty()) {
              ADD_FAILURE() << err;
              if (++failures >= 5) return;
            }
          }
        }
      }
    }
  }
}

// Non-integer floats: every rank must end with byte-identical results (the
// combining order of each element is the same everywhere), close to a
// double-precision reference.
class DeterminismTest : public ::testing::TestWithParam<Pair> {};

TEST_P(DeterminismTest, ByteIdenticalOnEveryRank) {
  const Pair pair = GetParam();
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int n : {2, 3, 5, 6, 7, 8, 9, 16}) {
    for (size_t count : {size_t{7}, size_t{1000}, size_t{4099}}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.collective = pair.collective;
        c.algorithm = pair.algorithm;
        c.nranks = n;
        c.count = count;
        c.nchannels = 2;
        c.chunk_bytes = 256;
        c.slots = 1;
        c.in_place = in_place;
        if (pair.algorithm == Algorithm::kHierarchical) c.host_of = HostLayout(n, n + (in_place ? 1 : 0));
        std::vector<std::vector<float>> x(n, std::vector<float>(count));
        for (auto& v : x) {
          for (auto& e : v) e = dist(rng);
        }
        auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        for (int r = 1; r < n; ++r) {
          ASSERT_EQ(0, std::memcmp((*got)[0].data(), (*got)[r].data(), count * sizeof(float)))
              << c.Name() << ": rank " << r << " differs from rank 0";
        }
        for (size_t i = 0; i < count; ++i) {
          double want = 0;
          for (int r = 0; r < n; ++r) want += x[r][i];
          ASSERT_NEAR((*got)[0][i], want, 1e-4) << c.Name() << " element " << i;
        }
        // Run again: the same bytes (the simulator and the schedules are
        // deterministic).
        auto again = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
        ASSERT_TRUE(again.ok());
        ASSERT_EQ((*got)[0], (*again)[0]);
      }
    }
  }
}

// A barrier's point: no rank finishes before every rank has arrived. In
// the happens-before graph of all ranks' steps (deps, and each send before
// its matching receive), some step of every rank r must be reachable from
// every other rank's steps.
TEST(BarrierTest, NoRankFinishesBeforeEveryRankArrived) {
  for (Algorithm a : AlgorithmsFor(Collective::kBarrier)) {
    for (int n : {2, 3, 5, 6, 8, 9}) {
      for (int variant = 0; variant < 8; ++variant) {
        std::vector<Schedule> all;
        for (int r = 0; r < n; ++r) {
          CollectiveArgs args;
          args.collective = Collective::kBarrier;
          args.nranks = n;
          args.rank = r;
          if (a == Algorithm::kHierarchical) args.host_of = HostLayout(n, variant);
          auto s = MakeSchedule(a, args);
          ASSERT_TRUE(s.ok()) << s.status().ToString();
          all.push_back(std::move(*s));
        }
        std::vector<size_t> base(static_cast<size_t>(n) + 1, 0);
        for (int r = 0; r < n; ++r) base[r + 1] = base[r] + all[r].steps.size();
        std::vector<std::vector<size_t>> succ(base[n]);
        std::map<std::tuple<int, int, int>, std::vector<size_t>> sends, recvs;
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < all[r].steps.size(); ++i) {
            const Step& st = all[r].steps[i];
            for (int d : st.deps) succ[base[r] + static_cast<size_t>(d)].push_back(base[r] + i);
            if (StepSends(st.op)) sends[{r, st.send_peer, st.channel}].push_back(base[r] + i);
            if (StepReceives(st.op)) recvs[{st.recv_peer, r, st.channel}].push_back(base[r] + i);
          }
        }
        for (const auto& [k, ids] : sends) {
          const auto& rv = recvs[k];
          ASSERT_EQ(ids.size(), rv.size());
          for (size_t m = 0; m < ids.size(); ++m) succ[ids[m]].push_back(rv[m]);
        }
        for (int q = 0; q < n; ++q) {
          std::vector<bool> seen(base[n], false);
          std::vector<size_t> stack;
          for (size_t v = base[q]; v < base[q + 1]; ++v) stack.push_back(v);
          while (!stack.empty()) {
            const size_t v = stack.back();
            stack.pop_back();
            if (seen[v]) continue;
            seen[v] = true;
            for (size_t w : succ[v]) stack.push_back(w);
          }
          for (int r = 0; r < n; ++r) {
            bool waits = false;
            for (size_t v = base[r]; v < base[r + 1]; ++v) waits |= seen[v];
            EXPECT_TRUE(waits) << AlgorithmName(a) << " n=" << n << " layout " << variant << ": rank " << r
                               << " can finish before rank " << q << " arrives";
          }
        }
      }
    }
  }
}

// On hosts of equal size each rank stands for exactly one block of every
// other host (all-gather and reduce-scatter hier spread the traffic between
// hosts over every local rank), however the ranks are numbered.
TEST(HostGroupsTest, AgentsPairLocalIndicesOnAnyNumbering) {
  for (const std::vector<int>& host_of : std::vector<std::vector<int>>{
           {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 0, 1, 0, 1, 0, 1}, {0, 1, 2, 0, 1, 2}, {0, 0, 0, 1, 1, 1}}) {
    CollectiveArgs a;
    a.nranks = static_cast<int>(host_of.size());
    a.host_of = host_of;
    const generators::HostGroups g(a);
    std::vector<int> stands_for(host_of.size(), 0);
    for (int h = 0; h < g.nhosts; ++h) {
      for (int r = 0; r < a.nranks; ++r) {
        const int who = g.Agent(h, r);
        ASSERT_EQ(g.HostOf(who), h);
        if (g.HostOf(r) == h) {
          EXPECT_EQ(who, r);
        } else {
          EXPECT_EQ(generators::IndexOf(g.On(h), who), generators::IndexOf(g.On(g.HostOf(r)), r));
          ++stands_for[static_cast<size_t>(who)];
        }
      }
    }
    for (size_t r = 0; r < stands_for.size(); ++r) EXPECT_EQ(stands_for[r], g.nhosts - 1) << "rank " << r;
  }
}

// Large vectors on hosts of several ranks run hier as pipelined pieces
// (2, 3 or 4 by size; the host's all-gather on channel 1): exact results on
// even, uneven, interleaved and lone-rank hosts, in and out of place; small
// vectors and one-rank hosts stay one piece on channel 0.
TEST(HierPipelineTest, LargeVectorsRunInPiecesWithExactResults) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 0, 0, 1}, {0, 1, 0, 1},
                                                 {0, 1, 1, 1}, {0, 0, 1, 1, 2, 2, 2}};
  uint32_t seed = 1;
  for (size_t count : {(size_t{1} << 19) + 5, 3 * (size_t{1} << 18) + 7, (size_t{1} << 21) + 3}) {
    for (const std::vector<int>& host_of : layouts) {
      for (bool in_place : {false, true}) {
        Case c;
        c.algorithm = Algorithm::kHierarchical;
        c.nranks = static_cast<int>(host_of.size());
        c.count = count;
        c.chunk_bytes = in_place ? kLargeChunkBytes : (64u << 10);
        c.slots = 2;
        c.in_place = in_place;
        c.host_of = host_of;
        const std::string err = Check<int32_t>(c, Op::kSum, seed++);
        EXPECT_TRUE(err.empty()) << c.Name() << ": " << err;
      }
    }
  }
  // Several channels, each pipelined on its own: 3 x 2^19 - 1 on 3
  // channels is one part run whole and two of 2 pieces (all-gathers on
  // channels 4 and 5); 2 channels of 2^20 + 1, 4 pieces each.
  for (const auto& [count, nch] : std::vector<std::pair<size_t, int>>{{(size_t{3} << 19) - 1, 3},
                                                                      {(size_t{1} << 21) + 2, 2}}) {
    for (const std::vector<int>& host_of : {layouts[0], layouts[4]}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.algorithm = Algorithm::kHierarchical;
        c.nranks = static_cast<int>(host_of.size());
        c.count = count;
        c.nchannels = nch;
        c.chunk_bytes = 64u << 10;
        c.slots = 2;
        c.in_place = in_place;
        c.host_of = host_of;
        const std::string err = Check<int32_t>(c, Op::kSum, seed++);
        EXPECT_TRUE(err.empty()) << c.Name() << ": " << err;
      }
    }
  }
  // The pieces: channel 1 carries the all-gather of a large vector on 2x2
  // hosts, not of a small one, nor on hosts of one rank each.
  auto uses_channel_1 = [](size_t count, std::vector<int> host_of) {
    CollectiveArgs a;
    a.nranks = static_cast<int>(host_of.size());
    a.count = count;
    a.host_of = std::move(host_of);
    StatusOr<Schedule> s = MakeSchedule(Algorithm::kHierarchical, a);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    bool one = false;
    for (const Step& st : s->steps) one = one || st.channel == 1;
    return one;
  };
  EXPECT_TRUE(uses_channel_1(size_t{1} << 20, {0, 0, 1, 1}));
  EXPECT_FALSE(uses_channel_1(size_t{1} << 17, {0, 0, 1, 1}));
  EXPECT_FALSE(uses_channel_1(size_t{1} << 20, {0, 1}));
}

// CIUIC_NCHANNELS reaches the hierarchical schedules: with 3 channels every
// rank's bytes on the wire split over channels 0-2 (a third each, within a
// chunk's rounding), for every collective with data; the pipelined
// all-reduce's all-gathers take channels 3-5. Exactness on several channels
// is the matrix's (nchannels 1 and 2, every host layout).
TEST(HierChannelsTest, EveryHierarchicalCollectiveUsesTheChannelsAskedFor) {
  for (Collective coll : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce,
                          Collective::kAllGather, Collective::kReduceScatter}) {
    for (int rank = 0; rank < 4; ++rank) {
      CollectiveArgs a;
      a.collective = coll;
      a.rank = rank;
      a.nranks = 4;
      a.count = 3000;
      a.root = 1;
      a.nchannels = 3;
      a.host_of = {0, 0, 1, 1};
      StatusOr<Schedule> s = MakeSchedule(Algorithm::kHierarchical, a);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_EQ(s->nchannels, 3) << CollectiveName(coll);
      std::vector<size_t> sent(3, 0);
      size_t total = 0;
      for (const Step& st : s->steps) {
        if (st.send_peer < 0) continue;
        ASSERT_LT(st.channel, 3) << CollectiveName(coll);
        sent[static_cast<size_t>(st.channel)] += st.src.count;
        total += st.src.count;
      }
      if (total == 0) continue;  // e.g. the broadcast's last rank of a chain
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(sent[static_cast<size_t>(c)], total / 3) << CollectiveName(coll) << " rank " << rank << " channel " << c;
      }
    }
  }
  CollectiveArgs big;
  big.nranks = 4;
  big.count = size_t{3} << 20;
  big.nchannels = 3;
  big.host_of = {0, 0, 1, 1};
  StatusOr<Schedule> s = MakeSchedule(Algorithm::kHierarchical, big);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->nchannels, 6);
  std::vector<bool> used(6, false);
  for (const Step& st : s->steps) used[static_cast<size_t>(st.channel)] = true;
  EXPECT_EQ(used, std::vector<bool>(6, true));
}

// The k-nomial family at every radix from 2 (binomial, recursive doubling)
// to above the rank count, on powers of the radix and not (extras fold
// onto proxies), every root, in and out of place; and the determinism the
// all-reduce promises, at radices other than the default.
// A case of the research algorithms' matrices: 2 channels for the large
// count, small chunks, 1-2 slots and in place by `seed`.
Case MatrixCase(Collective coll, Algorithm algo, int n, size_t count, uint32_t seed) {
  Case c;
  c.collective = coll;
  c.algorithm = algo;
  c.nranks = n;
  c.count = count;
  c.nchannels = count == 1003 ? 2 : 1;
  c.chunk_bytes = 64 * sizeof(int32_t);
  c.slots = 1 + static_cast<int>(seed % 2);
  c.in_place = seed % 3 == 0;
  return c;
}

TEST(KnomialTest, EveryRadixMatchesTheReference) {
  uint32_t seed = 7;
  for (Collective coll : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce}) {
    for (int radix : {2, 3, 5, 8, 17}) {
      for (int n : {2, 3, 4, 5, 8, 9, 10, 16, 17, 25, 27}) {
        for (size_t count : {size_t{1}, size_t{5}, size_t{1003}}) {
          Case c = MatrixCase(coll, Algorithm::kKnomial, n, count, seed);
          c.radix = radix;
          c.root = static_cast<int>(seed % static_cast<uint32_t>(n));
          const std::string err = Check<int32_t>(c, Op::kSum, seed++);
          EXPECT_TRUE(err.empty()) << c.Name() << ": " << err;
        }
      }
    }
  }
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int radix : {3, 5}) {
    for (int n : {9, 11, 27}) {
      Case c;
      c.algorithm = Algorithm::kKnomial;
      c.radix = radix;
      c.nranks = n;
      c.count = 333;
      c.chunk_bytes = 256;
      std::vector<std::vector<float>> x(n, std::vector<float>(c.count));
      for (auto& v : x) {
        for (auto& e : v) e = dist(rng);
      }
      auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (int r = 1; r < n; ++r) {
        EXPECT_EQ(0, std::memcmp((*got)[0].data(), (*got)[r].data(), c.count * sizeof(float)))
            << c.Name() << ": rank " << r << " differs from rank 0";
      }
    }
  }
}

// The radix is what it says: a broadcast from the root sends to k-1
// children per digit, and the all-reduce of k^m ranks runs m rounds of
// k-1 messages each way.
TEST(KnomialTest, RoundsAndFanOutFollowTheRadix) {
  auto messages = [](Collective coll, int rank, int n, int radix) {
    CollectiveArgs a;
    a.collective = coll;
    a.rank = rank;
    a.nranks = n;
    a.count = 64;
    a.radix = radix;
    StatusOr<Schedule> s = MakeSchedule(Algorithm::kKnomial, a);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    size_t sends = 0;
    for (const Step& st : s->steps) sends += StepSends(st.op) ? 1 : 0;
    return sends;
  };
  EXPECT_EQ(messages(Collective::kBroadcast, 0, 64, 4), 9u);   // 3 digits x 3 children
  EXPECT_EQ(messages(Collective::kBroadcast, 0, 64, 2), 6u);   // binomial
  EXPECT_EQ(messages(Collective::kAllReduce, 5, 64, 4), 9u);   // 3 rounds x 3 peers
  EXPECT_EQ(messages(Collective::kAllReduce, 5, 64, 8), 14u);  // 2 rounds x 7 peers
  EXPECT_EQ(messages(Collective::kAllReduce, 5, 64, 2), 6u);   // recursive doubling
  // Scratch: min(k, n) vectors on the ranks that reduce, none on extras
  // (radix 64 on 3 ranks: rank 0 reduces for ranks 1 and 2).
  for (int r : {0, 2}) {
    CollectiveArgs a;
    a.rank = r;
    a.nranks = 3;
    a.count = 100;
    a.radix = 64;
    StatusOr<Schedule> s = MakeSchedule(Algorithm::kKnomial, a);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->scratch_count, r == 0 ? 300u : 0u) << "rank " << r;
  }
  CollectiveArgs extra;
  extra.rank = 5;
  extra.nranks = 6;
  extra.count = 100;
  extra.radix = 4;
  StatusOr<Schedule> e = MakeSchedule(Algorithm::kKnomial, extra);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->scratch_count, 0u);
  CollectiveArgs bad;
  bad.nranks = 4;
  bad.count = 4;
  bad.radix = 1;
  StatusOr<Schedule> s = MakeSchedule(Algorithm::kKnomial, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("radix 1 not in [2, 64]"), std::string::npos) << s.status().ToString();
}

// Swing's structure (Di Girolamo et al., NSDI 2024): each step pairs ranks
// (the peer's peer is the rank), the peers are +-1, 3, 5, 11, ... away, every
// rank's block order is a permutation (each block reduced at exactly one
// owner), and on a ring the hops are shorter in total than recursive
// halving's 1 + 2 + ... + p/2.
TEST(SwingTest, PeersPairAndBlockOrdersArePermutations) {
  for (int p = 2; p <= (1 << 12); p *= 2) {
    int steps = 0;
    while ((1 << steps) < p) ++steps;
    long long swing_hops = 0, halving_hops = 0;
    for (int s = 0; s < steps; ++s) {
      for (int r = 0; r < p; ++r) {
        const int q = generators::SwingPeer(r, s, p);
        ASSERT_NE(q, r) << "p " << p << " step " << s;
        ASSERT_EQ(generators::SwingPeer(q, s, p), r) << "p " << p << " step " << s << " rank " << r;
      }
      const int d = generators::SwingPeer(0, s, p);
      swing_hops += std::min(d, p - d);
      halving_hops += std::min(1 << s, p - (1 << s));
    }
    if (p >= 8) {
      EXPECT_LT(swing_hops, halving_hops) << "p " << p;
    }
    for (int r : {0, 1, p / 2 - 1, p - 1}) {
      std::vector<int> order = generators::SwingBlockOrder(r, p);
      ASSERT_EQ(order.size(), static_cast<size_t>(p));
      EXPECT_EQ(order[0], r);
      std::sort(order.begin(), order.end());
      for (int i = 0; i < p; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i) << "p " << p << " rank " << r;
    }
  }
  EXPECT_EQ(generators::SwingPeer(0, 0, 64), 1);
  EXPECT_EQ(generators::SwingPeer(0, 1, 64), 63);  // rho(1) = -1
  EXPECT_EQ(generators::SwingPeer(0, 2, 64), 3);
  EXPECT_EQ(generators::SwingPeer(0, 3, 64), 59);  // rho(3) = -5
  EXPECT_EQ(generators::SwingPeer(0, 4, 64), 11);
  EXPECT_EQ(generators::SwingPeer(1, 4, 64), 54);  // odd ranks go the other way
}

// The ranks of a torus of `dims`.
int Cells(const std::vector<int>& dims) {
  int p = 1;
  for (int d : dims) p *= d;
  return p;
}

// Swing's schedule for rank r of n (count 1000) and how many of its steps do `op`.
Schedule SwingSchedule(int n, int r) {
  CollectiveArgs a;
  a.nranks = n;
  a.rank = r;
  a.count = 1000;
  StatusOr<Schedule> s = MakeSchedule(Algorithm::kSwing, a);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *std::move(s) : Schedule{};
}
long CountSteps(const Schedule& s, StepOp op) {
  return static_cast<long>(
      std::count_if(s.steps.begin(), s.steps.end(), [op](const Step& st) { return st.op == op; }));
}

// Up to kSwingRankOrderRanks ranks Swing keeps its vector in rank order: no
// scratch and no copies, and at most two messages a reduce-scatter step on
// average; beyond, the rank-order runs would exceed that, so it permutes.
// Counts that are not powers of two work in rank order at any size.
TEST(SwingTest, SmallCountsWorkInRankOrderLargerOnesPermute) {
  EXPECT_EQ(generators::SwingRuns(2), 1);
  EXPECT_EQ(generators::SwingRuns(4), 3);
  EXPECT_EQ(generators::SwingRuns(8), 6);
  EXPECT_GT(generators::SwingRuns(16), 2 * 4);
  EXPECT_GT(generators::SwingRuns(2 * generators::kSwingRankOrderRanks), 2 * 4);
  for (int n : {2, 4, 8, 16, 32}) {
    const int p = n;
    int steps = 0;
    while ((1 << steps) < p) ++steps;
    for (int r = 0; r < n; ++r) {
      const Schedule sch = SwingSchedule(n, r);
      const long copies = CountSteps(sch, StepOp::kCopy), sends = CountSteps(sch, StepOp::kSend);
      if (p <= generators::kSwingRankOrderRanks) {
        EXPECT_EQ(sch.scratch_count, 0u) << "n " << n << " rank " << r;
        EXPECT_EQ(copies, 0) << "n " << n << " rank " << r;
        EXPECT_LE(sends, 2 * 2 * steps) << "n " << n << " rank " << r;
      } else {
        EXPECT_EQ(sch.scratch_count, 1000u) << "n " << n << " rank " << r;
        EXPECT_GT(copies, 0) << "n " << n << " rank " << r;
      }
    }
  }
  // Beyond 2 x kSwingRankOrderRanks a step's runs go packed, one message.
  for (int n : {3, 5, 6, 7, 9, 12, 17, 24, 34, 35}) {
    const int m = n - n % 2;
    int steps = 0;
    while ((1 << steps) < m) ++steps;
    for (int r = 0; r < m; ++r) {
      const Schedule sch = SwingSchedule(n, r);
      const long sends = CountSteps(sch, StepOp::kSend);
      const int fold = n != m && r == m - 1 ? 1 : 0;
      if (m <= 2 * generators::kSwingRankOrderRanks) {
        EXPECT_EQ(sch.scratch_count, 0u) << "n " << n << " rank " << r;
      } else {
        EXPECT_EQ(sch.scratch_count, 2000u) << "n " << n << " rank " << r;
        EXPECT_EQ(sends, 2 * steps + fold) << "n " << n << " rank " << r;
      }
    }
  }
}

// What a rank receives in a step is what the step's peer sends: Swing's
// schedule takes it as the mirror of the rank's own sends (the coordinate
// the two differ in reflected) instead of computing the peer's sends.
TEST(SwingTest, ReceivesAreTheMirrorOfSends) {
  std::vector<std::vector<int>> shapes;
  for (int p = 2; p <= 130; p += 2) shapes.push_back({p});
  for (std::vector<int> d : std::vector<std::vector<int>>{{6, 4}, {4, 6}, {6, 6}, {10, 6}, {6, 4, 2}, {2, 6, 6}, {8, 8}}) {
    shapes.push_back(d);
  }
  for (const auto& dims : shapes) {
    const int p = Cells(dims);
    const generators::SwingPeers peers(p, dims);
    for (int x = 0; x < p; ++x) {
      const auto sends = generators::SwingSends(x, peers);
      const auto recvs = generators::SwingRecvs(x, sends, peers);
      ASSERT_EQ(recvs.size(), static_cast<size_t>(peers.steps()));
      for (int s = 0; s < peers.steps(); ++s) {
        const int q = peers.Peer(x, s);
        if (dims.size() == 1) {
          EXPECT_EQ(q, generators::SwingPeer(x, s, p));
        }
        EXPECT_EQ(peers.Mirror(x, x, q), q);
        EXPECT_EQ(recvs[static_cast<size_t>(s)], generators::SwingSends(q, peers)[static_cast<size_t>(s)])
            << "p " << p << " dims " << dims.size() << " rank " << x << " step " << s;
      }
    }
  }
}

// A packed step's receive waits for what the step's copies overwrite; the
// copies out of the staging area then name only that receive. Naming the
// step's readers again on every run made rank 0's schedule quadratic in the
// ranks (2.7 GB in ciuic-sim at 16,000 ranks; 65,534 ran out of memory).
TEST(SwingTest, PackedSchedulesGrowLinearlyWithTheRanks) {
  auto deps = [](const Schedule& s) {
    size_t d = 0;
    for (const Step& st : s.steps) d += st.deps.size();
    return d;
  };
  for (int n : {1022, 4094}) {
    CollectiveArgs a;
    a.nranks = n;
    a.count = static_cast<size_t>(n) * 4;
    for (int r : {0, 1, n / 2, n - 1}) {
      a.rank = r;
      StatusOr<Schedule> s = MakeSchedule(Algorithm::kSwing, a);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      // A run of blocks is at most a copy, a reduce and their two deps on
      // each side: about 4 deps a step plus the joins' fan-in.
      EXPECT_LE(deps(*s), 4 * s->steps.size()) << "n " << n << " rank " << r;
      EXPECT_GT(s->steps.size(), static_cast<size_t>(n) / 4) << "n " << n << " rank " << r;
    }
  }
}

// Counts that are not powers of two, as the Swing authors' library handles
// them: an even n takes ceil(log2 n) steps with the peers mod n, and a rank
// sends each block in the last step whose tree reaches it. Every block then
// travels once along one tree to its owner: the peers pair, each rank's
// sends are a partition of the other blocks (n - 1 in all, the bandwidth
// optimum, where Rabenseifner's fold moves the whole vector twice more),
// and a symbolic reduce-scatter leaves each owner with every contribution
// exactly once. On 2^k they are the halves of the block order. Real runs
// (even and odd n, tori of even dimensions, in and out of place, uneven
// counts, one and two channels) are byte-identical and within 1e-4 of the
// sum; with an even n each rank's
// all-gather receives each other block once, and all ranks together send
// 2(n - 1) x count elements, the optimum.
TEST(SwingTest, NonPowersOfTwoSendEveryBlockOnceWithoutAFold) {
  std::vector<std::vector<int>> shapes;
  for (int p = 2; p <= 96; p += 2) shapes.push_back({p});
  for (std::vector<int> d : std::vector<std::vector<int>>{{6, 4}, {4, 6}, {6, 6}, {10, 6}, {6, 4, 2}, {2, 6, 6}}) {
    shapes.push_back(d);
  }
  for (const std::vector<int>& dims : shapes) {
    const int p = Cells(dims);
    const generators::SwingPeers peers(p, dims);
    ASSERT_EQ(peers.dims(), dims);
    int steps = 0;
    for (int d : dims) {
      int k = 0;
      while ((1 << k) < d) ++k;
      steps += k;
    }
    ASSERT_EQ(peers.steps(), steps);
    std::vector<std::vector<std::vector<int>>> sends;
    for (int r = 0; r < p; ++r) {
      sends.push_back(generators::SwingSends(r, peers));
      std::vector<int> all = {r};
      for (int st = 0; st < steps; ++st) {
        const int q = peers.Peer(r, st);
        ASSERT_NE(q, r);
        ASSERT_EQ(peers.Peer(q, st), r) << "p " << p << " step " << st;
        for (int x : sends.back()[static_cast<size_t>(st)]) all.push_back(x);
      }
      std::sort(all.begin(), all.end());
      ASSERT_EQ(all.size(), static_cast<size_t>(p)) << "p " << p << " rank " << r;
      for (int i = 0; i < p; ++i) ASSERT_EQ(all[static_cast<size_t>(i)], i) << "p " << p << " rank " << r;
    }
    // have[r][b]: the contributions rank r holds for block b.
    std::vector<std::vector<std::vector<bool>>> have(
        static_cast<size_t>(p), std::vector<std::vector<bool>>(static_cast<size_t>(p), std::vector<bool>(static_cast<size_t>(p), false)));
    for (int r = 0; r < p; ++r) {
      for (int b = 0; b < p; ++b) have[static_cast<size_t>(r)][static_cast<size_t>(b)][static_cast<size_t>(r)] = true;
    }
    for (int st = 0; st < steps; ++st) {
      auto next = have;
      for (int r = 0; r < p; ++r) {
        const int q = peers.Peer(r, st);
        for (int b : sends[static_cast<size_t>(r)][static_cast<size_t>(st)]) {
          for (int k = 0; k < p; ++k) {
            if (!have[static_cast<size_t>(r)][static_cast<size_t>(b)][static_cast<size_t>(k)]) continue;
            ASSERT_FALSE(next[static_cast<size_t>(q)][static_cast<size_t>(b)][static_cast<size_t>(k)])
                << "p " << p << ": rank " << k << "'s part of block " << b << " reaches rank " << q << " twice";
            next[static_cast<size_t>(q)][static_cast<size_t>(b)][static_cast<size_t>(k)] = true;
          }
        }
      }
      have = std::move(next);
    }
    for (int r = 0; r < p; ++r) {
      for (int k = 0; k < p; ++k) {
        ASSERT_TRUE(have[static_cast<size_t>(r)][static_cast<size_t>(r)][static_cast<size_t>(k)])
            << "p " << p << ": rank " << r << " lacks rank " << k << "'s part of its block";
      }
    }
    if ((p & (p - 1)) == 0) {
      const std::vector<int> order = generators::SwingBlockOrder(0, peers);
      for (int st = 0, w = p; st < steps; ++st, w /= 2) {
        std::vector<int> half(order.begin() + w / 2, order.begin() + w);
        std::sort(half.begin(), half.end());
        EXPECT_EQ(sends[0][static_cast<size_t>(st)], half) << "p " << p << " step " << st;
      }
    }
  }
  struct Shape {
    int n;
    std::vector<int> dims;
  };
  for (const Shape& sh : std::vector<Shape>{
           {3, {}}, {5, {}}, {6, {}}, {7, {}}, {10, {}}, {12, {6, 2}}, {12, {2, 6}}, {14, {}}, {24, {6, 4}}, {35, {}}}) {
    for (size_t count : {size_t{1}, size_t{5}, size_t{1000}}) {
      if (sh.n % 2 == 0) {
        size_t sent = 0;
        for (int r = 0; r < sh.n; ++r) {
          CollectiveArgs a;
          a.nranks = sh.n;
          a.rank = r;
          a.count = count;
          a.torus_dims = sh.dims;
          StatusOr<Schedule> s = MakeSchedule(Algorithm::kSwing, a);
          ASSERT_TRUE(s.ok()) << s.status().ToString();
          size_t gathered = 0;
          for (const Step& st : s->steps) {
            if (st.op == StepOp::kSend) sent += st.src.count;
            if (st.op == StepOp::kRecv) gathered += st.dst.count;
          }
          const size_t own = EvenSplitOffset(count, sh.n, r + 1) - EvenSplitOffset(count, sh.n, r);
          if (sh.n <= 2 * generators::kSwingRankOrderRanks) {  // unpacked: each Recv lands in the output
            EXPECT_EQ(gathered, count - own) << "n " << sh.n << " rank " << r << " count " << count;
          }
        }
        EXPECT_EQ(sent, 2 * (static_cast<size_t>(sh.n) - 1) * count) << "n " << sh.n << " count " << count;
      }
      for (bool in_place : {false, true}) {
        Case c;
        c.algorithm = Algorithm::kSwing;
        c.nranks = sh.n;
        c.count = count;
        c.nchannels = count == 1000 ? 2 : 1;
        c.chunk_bytes = 256;
        c.in_place = in_place;
        c.torus_dims = sh.dims;
        std::mt19937 rng(static_cast<unsigned>(sh.n * 7 + count));
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<std::vector<float>> x(static_cast<size_t>(sh.n), std::vector<float>(count));
        for (auto& v : x) {
          for (auto& e : v) e = dist(rng);
        }
        auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
        ASSERT_TRUE(got.ok()) << c.Name() << ": " << got.status().ToString();
        for (int r = 1; r < sh.n; ++r) {
          ASSERT_EQ(0, std::memcmp((*got)[0].data(), (*got)[static_cast<size_t>(r)].data(), count * sizeof(float)))
              << c.Name() << ": rank " << r;
        }
        for (size_t i = 0; i < count; ++i) {
          double want = 0;
          for (int r = 0; r < sh.n; ++r) want += x[static_cast<size_t>(r)][i];
          ASSERT_NEAR((*got)[0][i], want, 1e-4) << c.Name() << " element " << i;
        }
      }
    }
  }
}

// Swing's latency-optimal variant gathers: after log2(p) steps with Swing's
// peers every rank holds each rank's vector exactly once (its own first),
// having sent one message a step, 2^s vectors in step s.
TEST(SwingTest, TheLatencyVariantGathersEveryVectorOnceInLogSteps) {
  for (int p = 2; p <= (1 << 12); p *= 2) {
    for (int r : {0, 1, p / 2 - 1, p / 2, p - 1}) {
      std::vector<int> order = generators::SwingGatherOrder(r, p);
      ASSERT_EQ(order.size(), static_cast<size_t>(p));
      EXPECT_EQ(order[0], r);
      std::sort(order.begin(), order.end());
      for (int i = 0; i < p; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i) << "p " << p << " rank " << r;
    }
  }
  for (int n : {2, 4, 6, 8, 16, 100}) {
    const int p = internal::FloorPow2(n);
    int steps = 0;
    while ((1 << steps) < p) ++steps;
    CollectiveArgs a;
    a.nranks = n;
    a.rank = n - 1;  // never folded out
    a.count = 10;
    StatusOr<Schedule> s = MakeSchedule(Algorithm::kSwingLatency, a);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->scratch_count, 10u * static_cast<size_t>(p));
    std::vector<size_t> sent;
    for (const Step& st : s->steps) {
      if (st.op == StepOp::kSend) sent.push_back(st.src.count);
    }
    ASSERT_EQ(sent.size(), static_cast<size_t>(steps)) << "n " << n;
    for (int k = 0; k < steps; ++k) EXPECT_EQ(sent[static_cast<size_t>(k)], 10u << k) << "n " << n << " step " << k;
  }
}

// Swing on a torus: each step's peer differs from the rank in one
// coordinate, by Swing's distance in that dimension, the dimensions in turn;
// peers pair up, both block orders are permutations, and both variants are
// exact and byte-identical on every rank (in and out of place, uneven
// counts). Dimensions that do not multiply to the rank count, or are odd,
// give the one-ring peers.
TEST(SwingTest, OnATorusEachStepMovesAlongOneDimension) {
  const std::vector<std::vector<int>> shapes = {{2, 2}, {4, 2}, {2, 4}, {4, 4}, {8, 4}, {2, 2, 2}, {4, 2, 2}, {16, 16}};
  for (const std::vector<int>& dims : shapes) {
    const int p = Cells(dims);
    const generators::SwingPeers peers(p, dims);
    ASSERT_EQ(peers.dims(), dims);
    int steps = 0;
    while ((1 << steps) < p) ++steps;
    ASSERT_EQ(peers.steps(), steps);
    std::vector<int> per_dim(dims.size(), 0);
    for (int s = 0; s < steps; ++s) {
      int moved_dim = -1;
      for (int r = 0; r < p; ++r) {
        const int q = peers.Peer(r, s);
        ASSERT_EQ(peers.Peer(q, s), r);
        int changed = 0;
        for (size_t d = 0, stride = static_cast<size_t>(p); d < dims.size(); ++d) {
          stride /= static_cast<size_t>(dims[d]);
          const int cr = static_cast<int>(r / stride % dims[d]), cq = static_cast<int>(q / stride % dims[d]);
          if (cr != cq) {
            ++changed;
            if (r == 0) moved_dim = static_cast<int>(d);
          }
        }
        ASSERT_EQ(changed, 1) << "step " << s << " rank " << r;
      }
      ASSERT_GE(moved_dim, 0);
      // Rank 0's coordinate moves by Swing's rho of that dimension's own step.
      size_t stride = 1;
      for (size_t d = dims.size(); d-- > static_cast<size_t>(moved_dim) + 1;) stride *= static_cast<size_t>(dims[d]);
      const int len = dims[static_cast<size_t>(moved_dim)];
      EXPECT_EQ(static_cast<int>(static_cast<size_t>(peers.Peer(0, s)) / stride),
                generators::SwingPeer(0, per_dim[static_cast<size_t>(moved_dim)], len))
          << "step " << s;
      ++per_dim[static_cast<size_t>(moved_dim)];
    }
    for (int r : {0, 1, p / 2, p - 1}) {
      for (std::vector<int> order : {generators::SwingBlockOrder(r, peers), generators::SwingGatherOrder(r, peers)}) {
        ASSERT_EQ(order.size(), static_cast<size_t>(p));
        std::sort(order.begin(), order.end());
        for (int i = 0; i < p; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i) << "rank " << r;
      }
    }
    if (p > 16) continue;
    for (Algorithm algo : {Algorithm::kSwing, Algorithm::kSwingLatency}) {
      for (size_t count : {size_t{3}, size_t{1000}}) {
        for (bool in_place : {false, true}) {
          Case c;
          c.algorithm = algo;
          c.nranks = p;
          c.count = count;
          c.nchannels = 2;
          c.chunk_bytes = 256;
          c.in_place = in_place;
          c.torus_dims = dims;
          std::mt19937 rng(static_cast<unsigned>(p + count));
          std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
          std::vector<std::vector<float>> x(static_cast<size_t>(p), std::vector<float>(count));
          for (auto& v : x) {
            for (auto& e : v) e = dist(rng);
          }
          auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
          ASSERT_TRUE(got.ok()) << c.Name() << ": " << got.status().ToString();
          for (int r = 1; r < p; ++r) {
            ASSERT_EQ(0, std::memcmp((*got)[0].data(), (*got)[static_cast<size_t>(r)].data(), count * sizeof(float)))
                << c.Name() << ": rank " << r;
          }
          for (size_t i = 0; i < count; ++i) {
            double want = 0;
            for (int r = 0; r < p; ++r) want += x[static_cast<size_t>(r)][i];
            ASSERT_NEAR((*got)[0][i], want, 1e-4) << c.Name() << " element " << i;
          }
        }
      }
    }
  }
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{3, 4}, {4, 4}, {}}) {
    const generators::SwingPeers peers(8, bad);  // 12 or 16 cells, or none, for 8 ranks
    EXPECT_EQ(peers.dims(), std::vector<int>{8});
    for (int s = 0; s < 3; ++s) EXPECT_EQ(peers.Peer(5, s), generators::SwingPeer(5, s, 8));
  }
  EXPECT_EQ(generators::SwingPeers(12, {3, 4}).dims(), std::vector<int>{12});  // an odd ring cannot pair
  EXPECT_EQ(generators::SwingPeers(12, {6, 2}).dims(), (std::vector<int>{6, 2}));
}

// Bruck all-to-all sends ceil(log2 n) messages per rank (pairwise: n-1),
// each at most half the blocks.
TEST(BruckTest, AllToAllSendsLogMessages) {
  for (int n : {2, 3, 5, 8, 13, 16, 33}) {
    CollectiveArgs a;
    a.collective = Collective::kAllToAll;
    a.rank = n / 2;
    a.nranks = n;
    a.count = 10;
    StatusOr<Schedule> s = MakeSchedule(Algorithm::kBruck, a);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    size_t sends = 0, rounds = 0;
    for (int d = 1; d < n; d *= 2) ++rounds;
    for (const Step& st : s->steps) {
      if (!StepSends(st.op)) continue;
      ++sends;
      EXPECT_LE(StepCount(st), static_cast<size_t>((n + 1) / 2) * a.count) << "n " << n;
    }
    EXPECT_EQ(sends, rounds) << "n " << n;
  }
}

// PAT (docs/design/pat.md): ceil(log2 n) messages each way per channel;
// the all-gather goes far first (rank - 2^(k-1) gets one block, rank - 1
// the most) and the reduce-scatter near first, each message across
// dimension e carrying ceil((n - 2^e) / 2^(e+1)) blocks; packing copies
// and landing reduces only off powers of two, at most two per message.
TEST(PatTest, LogMessagesFarFirstAndPackingOffPowersOfTwo) {
  for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter}) {
    for (int n : {2, 3, 5, 6, 8, 13, 16, 33, 100}) {
      int k = 0;
      while ((1 << k) < n) ++k;
      for (int r : {0, n / 2, n - 1}) {
        CollectiveArgs a;
        a.collective = coll;
        a.rank = r;
        a.nranks = n;
        a.count = 10;
        StatusOr<Schedule> s = MakeSchedule(Algorithm::kPat, a);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        const bool gather = coll == Collective::kAllGather;
        std::vector<int> to, from;
        std::vector<size_t> sent, got;
        size_t extra = 0;  // packing copies (all-gather) or landing reduces (reduce-scatter)
        for (const Step& st : s->steps) {
          if (StepSends(st.op)) {
            to.push_back(st.send_peer);
            sent.push_back(StepCount(st) / a.count);
          }
          if (StepReceives(st.op)) {
            from.push_back(st.recv_peer);
            got.push_back(StepCount(st) / a.count);
          }
          const bool pack = st.op == StepOp::kCopy && st.src.buf == BufKind::kScratch &&
                            st.dst.buf == BufKind::kScratch && st.src.count > 0;
          extra += (gather ? pack : st.op == StepOp::kReduce) ? 1 : 0;
        }
        const std::string at = std::string(CollectiveName(coll)) + " n " + std::to_string(n) + " rank " +
                               std::to_string(r);
        ASSERT_EQ(to.size(), static_cast<size_t>(k)) << at;
        ASSERT_EQ(from.size(), static_cast<size_t>(k)) << at;
        size_t total = 0;
        for (int i = 0; i < k; ++i) {
          const int e = gather ? k - 1 - i : i, d = 1 << e;
          const size_t m = static_cast<size_t>((n - d + 2 * d - 1) / (2 * d));
          EXPECT_EQ(to[i], gather ? internal::Mod(r - d, n) : internal::Mod(r + d, n)) << at << " message " << i;
          EXPECT_EQ(from[i], gather ? internal::Mod(r + d, n) : internal::Mod(r - d, n)) << at << " message " << i;
          EXPECT_EQ(sent[i], m) << at << " message " << i;
          EXPECT_EQ(got[i], m) << at << " message " << i;
          total += got[i];
        }
        EXPECT_EQ(total, static_cast<size_t>(n - 1)) << at;
        EXPECT_EQ(sent[gather ? 0 : k - 1], 1u) << at << ": the farthest peer gets one block";
        if ((n & (n - 1)) == 0) {
          EXPECT_EQ(extra, 0u) << at;
        } else {
          EXPECT_LE(extra, 2u * static_cast<size_t>(k)) << at;
        }
        EXPECT_LE(s->scratch_count, (static_cast<size_t>(n) + static_cast<size_t>(n) / 2) * a.count) << at;
      }
    }
  }
}

// PAT's reduce-scatter sums each block at its owner along one binomial
// tree: acc(t) after dimension e adds acc(t + 2^e) of the rank 2^e below
// when t is a multiple of 2^(e+1). Floats of mixed magnitudes make the
// order visible; the bytes must be exactly that order's, whatever the
// channels, chunks, slots or placement.
TEST(PatTest, ReduceScatterSumsAlongTheTree) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int n : {2, 5, 6, 8, 13}) {
    int k = 0;
    while ((1 << k) < n) ++k;
    const size_t count = 301;
    std::vector<std::vector<float>> x(n, std::vector<float>(count * static_cast<size_t>(n)));
    for (auto& v : x) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(dist(rng), static_cast<int>(i % 7) * 4 - 12);
    }
    std::vector<std::vector<float>> want(n, std::vector<float>(count));
    bool order_matters = false;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        // p[t]: the partial of block r held by rank r - t.
        std::vector<float> p(n);
        for (int t = 0; t < n; ++t) p[t] = x[internal::Mod(r - t, n)][static_cast<size_t>(r) * count + i];
        float chain = p[0];
        for (int t = 1; t < n; ++t) chain += p[t];
        for (int e = 0; e < k; ++e) {
          for (int t = 0; t + (1 << e) < n; t += 2 << e) p[t] = p[t] + p[t + (1 << e)];
        }
        want[r][i] = p[0];
        order_matters = order_matters || chain != p[0];
      }
    }
    if (n > 2) {
      EXPECT_TRUE(order_matters) << "n " << n << ": the inputs do not tell the orders apart";
    }
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      c.collective = Collective::kReduceScatter;
      c.algorithm = Algorithm::kPat;
      c.nranks = n;
      c.count = count;
      c.nchannels = 1 + variant % 2;
      c.chunk_bytes = variant < 2 ? 64 : 4096;
      c.slots = 1 + variant / 2;
      c.in_place = variant == 1 || variant == 2;
      auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(0, std::memcmp((*got)[r].data(), want[r].data(), count * sizeof(float)))
            << c.Name() << ": rank " << r << " is not the tree's sum";
      }
    }
  }
}

// Bounded aggregation: the same results for every A, at most A blocks per
// message, log2(nA) + min(D, n) - 1 messages (nA = ceil(n / D), D = N / A),
// and scratch that grows with log2(n / A), not with n.
TEST(PatTest, BoundedAggregationMatchesTheReference) {
  uint32_t seed = 11;
  for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter}) {
    for (int n : {2, 3, 5, 6, 8, 9, 13, 16, 17, 33}) {
      for (int agg : {1, 2, 4, 8}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{1003}}) {
          Case c = MatrixCase(coll, Algorithm::kPat, n, count, seed);
          c.aggregation = agg;
          const std::string err = Check<int32_t>(c, Op::kSum, seed++);
          EXPECT_TRUE(err.empty()) << c.Name() << ": " << err;
        }
      }
    }
  }
}

TEST(PatTest, BoundedAggregationBoundsMessagesAndScratch) {
  for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter}) {
    for (int agg : {1, 2, 4, 16}) {
      size_t scratch_64 = 0;
      for (int n : {8, 13, 64, 100, 1024, 4096}) {
        int k = 0;
        while ((1 << k) < n) ++k;
        const int groups = std::max(1, (1 << k) / agg);
        int d = 0;
        while ((1 << d) < groups) ++d;
        const int na = (n + groups - 1) / groups;
        int ka = 0;
        while ((1 << ka) < na) ++ka;
        CollectiveArgs a;
        a.collective = coll;
        a.rank = n / 3;
        a.nranks = n;
        a.count = 10;
        a.aggregation = agg;
        StatusOr<Schedule> s = MakeSchedule(Algorithm::kPat, a);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        const std::string at = std::string(CollectiveName(coll)) + " n " + std::to_string(n) + " A " +
                               std::to_string(agg);
        size_t sends = 0;
        for (const Step& st : s->steps) {
          if (!StepSends(st.op)) continue;
          ++sends;
          EXPECT_LE(StepCount(st), static_cast<size_t>(agg) * a.count) << at;
        }
        EXPECT_EQ(sends, static_cast<size_t>(ka + std::min(groups, n) - 1)) << at;
        EXPECT_LE(s->scratch_count, static_cast<size_t>(na) * static_cast<size_t>(d + 2) * a.count) << at;
        if (n == 64) scratch_64 = s->scratch_count;
        if (n == 4096) {
          EXPECT_LE(s->scratch_count, 3 * scratch_64) << at << ": grows with n";
        }
      }
    }
  }
  CollectiveArgs bad;
  bad.collective = Collective::kAllGather;
  bad.nranks = 4;
  bad.count = 4;
  bad.aggregation = 3;
  StatusOr<Schedule> s = MakeSchedule(Algorithm::kPat, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("aggregation 3 is not a power of two"), std::string::npos)
      << s.status().ToString();
}

// Aggregation 0: full while n blocks fit 16 Mi elements of scratch per
// channel (ceil(log2 n) sends), else bounded to fit (1024 ranks of 2^18
// elements: A = 4, 2 top rounds + 255 groups).
TEST(PatTest, AutomaticAggregationCapsScratch) {
  for (Collective coll : {Collective::kAllGather, Collective::kReduceScatter}) {
    for (size_t count : {size_t{1} << 10, size_t{1} << 18}) {
      CollectiveArgs a;
      a.collective = coll;
      a.rank = 5;
      a.nranks = 1024;
      a.count = count;
      StatusOr<Schedule> s = MakeSchedule(Algorithm::kPat, a);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      size_t sends = 0;
      for (const Step& st : s->steps) sends += StepSends(st.op) ? 1 : 0;
      EXPECT_EQ(sends, count < (size_t{1} << 14) ? 10u : 257u) << count;
      EXPECT_LE(s->scratch_count, size_t{1} << 24) << count;
    }
  }
}

// n = 8, A = 2 (docs/design/pat.md): groups 3, 2, 1, then the top
// dimension; rank r's block sums as ((x_r + (x_{r-2} + x_{r-3})) + x_{r-1})
// + ((x_{r-4} + (x_{r-6} + x_{r-7})) + x_{r-5}), whatever the channels,
// chunks or placement.
TEST(PatTest, BoundedReduceScatterSumsInItsOrder) {
  const int n = 8;
  const size_t count = 257;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> x(n, std::vector<float>(count * n));
  for (auto& v : x) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(dist(rng), static_cast<int>(i % 7) * 4 - 12);
  }
  for (int variant = 0; variant < 3; ++variant) {
    Case c;
    c.collective = Collective::kReduceScatter;
    c.algorithm = Algorithm::kPat;
    c.aggregation = 2;
    c.nranks = n;
    c.count = count;
    c.nchannels = 1 + variant % 2;
    c.chunk_bytes = variant == 2 ? 4096 : 64;
    c.in_place = variant == 1;
    auto got = ::ciuic::collectives::testing::Run<float>(c, Op::kSum, x);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        auto v = [&](int back) { return x[internal::Mod(r - back, n)][static_cast<size_t>(r) * count + i]; };
        const float want = ((v(0) + (v(2) + v(3))) + v(1)) + ((v(4) + (v(6) + v(7))) + v(5));
        ASSERT_EQ(0, std::memcmp(&(*got)[r][i], &want, sizeof(float))) << c.Name() << " rank " << r << " element " << i;
      }
    }
  }
}

std::vector<Pair> AllReducePairs() {
  std::vector<Pair> p;
  for (Algorithm a : AlgorithmsFor(Collective::kAllReduce)) p.push_back({Collective::kAllReduce, a});
  return p;
}

#endif  // CIUIC_COLLECTIVES_FULL_MATRIX

std::string PairName(const ::testing::TestParamInfo<Pair>& info) {
  return std::string(CollectiveName(info.param.collective)) + "_" + AlgorithmName(info.param.algorithm);
}

INSTANTIATE_TEST_SUITE_P(All, CIUIC_ALGORITHMS_SUITE, ::testing::ValuesIn(AllPairs()), PairName);
#ifndef CIUIC_COLLECTIVES_FULL_MATRIX
// Only all-reduce replicates a reduction on every rank.
INSTANTIATE_TEST_SUITE_P(AllReduce, DeterminismTest, ::testing::ValuesIn(AllReducePairs()), PairName);
#endif

}  // namespace
}  // namespace ciuic::collectives::testing
