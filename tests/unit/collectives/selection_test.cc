// The registry and selection: the table is consistent, CIUIC_ALGO parses
// into it, and Select picks forced > tuned > cheapest, with the
// shared-memory family chosen wherever it can run a call on one host (what
// the communicator did before it was a registry entry).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "collectives/registry.h"
#include "collectives/schedule_builder.h"
#include "collectives/selection.h"

namespace ciuic::collectives {
namespace {

using transport::BackendKind;

TEST(RegistryTest, EveryEntryIsWhole) {
  std::set<std::pair<int, int>> seen;
  for (const AlgorithmInfo& e : Registry()) {
    SCOPED_TRACE(std::string(CollectiveName(e.collective)) + "/" + e.name());
    EXPECT_TRUE(seen.emplace(static_cast<int>(e.collective), static_cast<int>(e.id)).second) << "listed twice";
    EXPECT_NE(std::string(e.name()), "?");
    EXPECT_FALSE(std::string(e.summary).empty());
    EXPECT_NE(e.transports, 0);
    if (e.kind == AlgorithmKind::kSchedule) {
      EXPECT_NE(e.generate, nullptr);
      EXPECT_EQ(e.applies, nullptr);
      EXPECT_EQ(e.transports, kAnyTransport);
    } else {
      EXPECT_EQ(e.generate, nullptr);
      EXPECT_NE(e.applies, nullptr);
      EXPECT_NE(e.cost, nullptr);
      EXPECT_EQ(e.transports, kShmOnly);
    }
  }
  // Every collective can run on every transport.
  for (Collective c : AllCollectives()) {
    EXPECT_FALSE(AlgorithmsFor(c).empty()) << CollectiveName(c) << " has no schedule";
    EXPECT_EQ(*ParseCollective(CollectiveName(c)), c);
  }
  // One meaning per name: an id has one name, a name one id.
  std::set<std::string> names;
  for (int a = 0; a < kNumAlgorithms; ++a) names.insert(AlgorithmName(static_cast<Algorithm>(a)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kNumAlgorithms));
  EXPECT_EQ(AlgorithmNames().size(), static_cast<size_t>(kNumAlgorithms));
  EXPECT_EQ(AlgorithmNamesFor(Collective::kBroadcast), "direct, ring, binomial, hier, knomial");
}

// collectives/README.md's table lists exactly the registry's entries, with
// their kinds, transports and summaries.
TEST(RegistryTest, TheReadmeTableIsTheRegistry) {
  std::ifstream f(std::string(CIUIC_SOURCE_DIR) + "/collectives/README.md");
  ASSERT_TRUE(f.good());
  std::set<std::string> rows;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("| ", 0) == 0 && line.find(" | ") != std::string::npos && line.find("---") == std::string::npos) {
      rows.insert(line);
    }
  }
  std::set<std::string> want;
  for (const AlgorithmInfo& e : Registry()) {
    const std::string transports = e.transports == kAnyTransport ? "all" : "shm";
    want.insert("| " + std::string(CollectiveName(e.collective)) + " | " + e.name() + " | " +
                AlgorithmKindName(e.kind) + " | " + transports + " | " + e.summary + " |");
  }
  for (const std::string& w : want) EXPECT_EQ(rows.count(w), 1u) << "missing from collectives/README.md: " << w;
  size_t algorithm_rows = 0;
  for (const std::string& r : rows) {
    if (r.find(" | schedule | ") != std::string::npos || r.find(" | exchange | ") != std::string::npos ||
        r.find(" | shm-direct | ") != std::string::npos) {
      ++algorithm_rows;
      EXPECT_EQ(want.count(r), 1u) << "not in the registry: " << r;
    }
  }
  EXPECT_EQ(algorithm_rows, want.size());
}

TEST(AlgoKnobTest, NamesListsAndErrors) {
  auto k = AlgoKnob::Parse("auto");
  ASSERT_TRUE(k.ok());
  for (Collective c : AllCollectives()) EXPECT_EQ(k->For(c), nullptr);
  // A name forces every collective that has it; the others stay auto.
  k = AlgoKnob::Parse("ring");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->For(Collective::kAllReduce)->id, Algorithm::kRing);
  EXPECT_EQ(k->For(Collective::kBroadcast)->id, Algorithm::kRing);
  EXPECT_EQ(k->For(Collective::kBarrier), nullptr);
  k = AlgoKnob::Parse("tree");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->For(Collective::kAllReduce)->id, Algorithm::kTree);
  EXPECT_EQ(k->For(Collective::kBroadcast), nullptr);  // "tree" is only the double binary tree
  // Per collective, winning over a plain name in the same list.
  k = AlgoKnob::Parse("ring,broadcast:binomial,reduce:binomial");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  EXPECT_EQ(k->For(Collective::kAllReduce)->id, Algorithm::kRing);
  EXPECT_EQ(k->For(Collective::kBroadcast)->id, Algorithm::kBinomial);
  EXPECT_EQ(k->For(Collective::kReduce)->id, Algorithm::kBinomial);
  k = AlgoKnob::Parse("direct");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->For(Collective::kBarrier)->kind, AlgorithmKind::kExchange);
  EXPECT_TRUE(k->CheckTransport(BackendKind::kShm).ok());
  Status tcp = k->CheckTransport(BackendKind::kTcp);
  EXPECT_EQ(tcp.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tcp.message().find("CIUIC_ALGO"), std::string::npos) << tcp.ToString();
  for (const char* bad : {"butterfly", "allreduce:binomial", "bcast:ring", "ring,,tree", "broadcast:"}) {
    auto b = AlgoKnob::Parse(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find(std::string("CIUIC_ALGO='") + bad + "'"), std::string::npos)
        << b.status().ToString();
  }
  EXPECT_NE(AlgoKnob::Parse("butterfly").status().message().find("known: direct, ring, tree"), std::string::npos);
}

CallShape Shape(Collective c, size_t count, size_t es, int n) {
  CallShape s;
  s.collective = c;
  s.count = count;
  s.elem_size = es;
  s.nranks = n;
  s.backend = BackendKind::kShm;
  const size_t bytes = count * es;
  switch (c) {
    case Collective::kAllGather:
      s.input_bytes = bytes;
      s.bytes = bytes * static_cast<size_t>(n);
      break;
    case Collective::kReduceScatter:
    case Collective::kAllToAll: s.bytes = s.input_bytes = bytes * static_cast<size_t>(n); break;
    default: s.bytes = s.input_bytes = bytes;
  }
  return s;
}

// On one host with the default model, the shared-memory family wins every
// call it can run, as it did when the communicator chose it by its limits
// alone; beyond the exchanges' limits the schedules run. The one exception
// is the model's: a reduce of 128 KiB or more on 8 or more ranks that each
// have a CPU, where the ring may win, spreading the reduction over every rank while
// the exchange's root reduces all n inputs alone (the limits were measured
// with 2 and 4 ranks on 2 CPUs; oversubscribed ranks keep the exchange).
TEST(SelectionTest, TheSharedMemoryFamilyWinsWhereverItAppliesByDefault) {
  SelectionContext ctx;
  ctx.backend = BackendKind::kShm;
  ctx.params = DefaultCostParams(BackendKind::kShm);
  const DirectLimits& l = ctx.limits;
  for (bool oversubscribed : {false, true}) {
    ctx.params.ranks_outnumber_cpus = oversubscribed;
    for (Collective c : {Collective::kAllReduce, Collective::kBroadcast, Collective::kReduce, Collective::kAllGather,
                         Collective::kReduceScatter, Collective::kAllToAll, Collective::kBarrier}) {
      for (int n : {2, 3, 4, 5, 7, 8, 9, 16}) {
        SelectionCache cache;
        for (size_t es : {size_t{2}, size_t{4}}) {
          for (size_t bytes = es; bytes <= (size_t{64} << 20); bytes = bytes * 2 + (bytes % 3 == 0 ? es : 0)) {
            const size_t count = c == Collective::kBarrier ? 0 : bytes / es;
            const CallShape call = Shape(c, count, es, n);
            const AlgorithmInfo* direct = FindEntry(c, Algorithm::kShmDirect);
            std::string why;
            const bool applies = direct->applies(call, l, &why);
            auto sel = Select(call, es == 2 ? DataType::kBFloat16 : DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
            ASSERT_TRUE(sel.ok()) << sel.status().ToString();
            const bool model_prefers_ring = c == Collective::kReduce && !oversubscribed && n >= 8 &&
                                            call.bytes >= (size_t{128} << 10);
            if (applies && model_prefers_ring) {
              EXPECT_TRUE(sel->algorithm == direct || sel->algorithm->id == Algorithm::kRing) << sel->reason;
            } else if (applies) {
              EXPECT_EQ(sel->algorithm, direct) << (oversubscribed ? "oversubscribed " : "") << CollectiveName(c) << " " << call.bytes << " B, " << n
                                                << " ranks: " << sel->reason;
            } else {
              ASSERT_EQ(sel->algorithm->kind, AlgorithmKind::kSchedule) << sel->reason;
            }
            if (c == Collective::kBarrier) break;
          }
        }
      }
    }
  }
}

TEST(SelectionTest, ExchangesStopAtTheirLimits) {
  const DirectLimits l;
  const AlgorithmInfo* reduce = FindEntry(Collective::kReduce, Algorithm::kShmDirect);
  const AlgorithmInfo* gather = FindEntry(Collective::kAllGather, Algorithm::kShmDirect);
  std::string why;
  EXPECT_TRUE(reduce->applies(Shape(Collective::kReduce, l.exchange_reduce_max_bytes / 4, 4, 4), l, &why));
  EXPECT_FALSE(reduce->applies(Shape(Collective::kReduce, l.exchange_reduce_max_bytes / 4 + 1, 4, 4), l, &why));
  EXPECT_NE(why.find("over the exchange's 262144 B"), std::string::npos) << why;
  EXPECT_TRUE(gather->applies(Shape(Collective::kAllGather, l.exchange_move_max_bytes / 4, 4, 4), l, &why));
  EXPECT_FALSE(gather->applies(Shape(Collective::kAllGather, l.exchange_move_max_bytes / 4 + 1, 4, 4), l, &why));
  EXPECT_FALSE(reduce->applies(Shape(Collective::kReduce, 0, 4, 4), l, &why));
  EXPECT_EQ(why, "nothing to move");
  EXPECT_FALSE(reduce->applies(Shape(Collective::kReduce, 8, 4, 1), l, &why));
  CallShape overlap = Shape(Collective::kAllReduce, 1000, 4, 2);
  overlap.partial_overlap = true;
  EXPECT_FALSE(FindEntry(Collective::kAllReduce, Algorithm::kShmDirect)->applies(overlap, l, &why));
}

TEST(SelectionTest, ForcedThenTunedThenTheModel) {
  SelectionContext ctx;
  ctx.backend = BackendKind::kShm;
  ctx.params = DefaultCostParams(BackendKind::kShm);
  SelectionCache cache;
  const CallShape call = Shape(Collective::kAllReduce, 1 << 18, 4, 4);
  auto model = Select(call, DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(model->algorithm->id, Algorithm::kShmDirect) << model->reason;
  EXPECT_EQ(model->predicted_s.size(), 8u);  // direct and the seven schedules

  StatusOr<Tuning> t = ParseTuning("ciuic-tuning 1\nrule allreduce shm ranks 4 from 0 rabenseifner\n", "t.txt");
  ASSERT_TRUE(t.ok());
  ctx.tuning = &*t;
  auto tuned = Select(call, DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
  ASSERT_TRUE(tuned.ok());
  EXPECT_EQ(tuned->algorithm->id, Algorithm::kRabenseifner);
  EXPECT_NE(tuned->reason.find("tuned: rule allreduce shm ranks 4 from 0 rabenseifner (t.txt:2)"), std::string::npos);
  EXPECT_NE(tuned->reason.find("model's choice: direct"), std::string::npos) << tuned->reason;

  ctx.algo = *AlgoKnob::Parse("ring");
  auto forced = Select(call, DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->algorithm->id, Algorithm::kRing);
  EXPECT_EQ(forced->reason.rfind("forced by CIUIC_ALGO", 0), 0u) << forced->reason;

  // A forced algorithm that cannot run the call leaves it to the rest.
  ctx.tuning = nullptr;
  ctx.algo = *AlgoKnob::Parse("direct");
  auto big = Select(Shape(Collective::kReduce, 1 << 20, 4, 4), DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->algorithm->kind, AlgorithmKind::kSchedule);
  EXPECT_NE(big->reason.find("CIUIC_ALGO's direct cannot run it (an input of 4194304 B"), std::string::npos)
      << big->reason;
  // Over a link transport the family is not a candidate at all.
  ctx.algo = AlgoKnob();
  ctx.backend = BackendKind::kTcp;
  ctx.params = DefaultCostParams(BackendKind::kTcp);
  SelectionCache tcp_cache;
  auto tcp = Select(Shape(Collective::kAllReduce, 2, 4, 2), DataType::kFloat32, ReduceOp::kSum, ctx, &tcp_cache);
  ASSERT_TRUE(tcp.ok());
  EXPECT_EQ(tcp->algorithm->kind, AlgorithmKind::kSchedule);
  EXPECT_EQ(tcp->predicted_s.size(), 7u);
  // The hierarchical schedule is a candidate only across hosts with
  // several ranks on one; forced, it runs anywhere.
  ctx.host_of = {0, 0, 1, 1};
  SelectionCache hosts_cache;
  auto two_hosts = Select(Shape(Collective::kAllReduce, 2, 4, 2), DataType::kFloat32, ReduceOp::kSum, ctx, &hosts_cache);
  ASSERT_TRUE(two_hosts.ok());
  EXPECT_EQ(two_hosts->predicted_s.size(), 8u);
  EXPECT_TRUE(std::any_of(two_hosts->predicted_s.begin(), two_hosts->predicted_s.end(),
                          [](const auto& c) { return c.first == "hier"; }));
  ctx.host_of = {0, 1, 2, 3};
  auto spread = Select(Shape(Collective::kAllReduce, 2, 4, 2), DataType::kFloat32, ReduceOp::kSum, ctx, &hosts_cache);
  ASSERT_TRUE(spread.ok());
  EXPECT_EQ(spread->predicted_s.size(), 7u);
  ctx.host_of.clear();
  ctx.algo = *AlgoKnob::Parse("hier");
  auto forced_hier = Select(Shape(Collective::kAllReduce, 2, 4, 2), DataType::kFloat32, ReduceOp::kSum, ctx, &hosts_cache);
  ASSERT_TRUE(forced_hier.ok());
  EXPECT_EQ(forced_hier->algorithm->id, Algorithm::kHierarchical);
}

// The cached predictions of a rooted collective are the root's: where a
// root on a host of its own costs differently from a root among the others
// (uneven hosts), a second root must not be answered from the first's.
TEST(SelectionTest, RootedCollectivesArePredictedPerRoot) {
  SelectionContext ctx;
  ctx.backend = BackendKind::kTcp;
  ctx.params = DefaultCostParams(BackendKind::kTcp);
  ctx.host_of = {0, 1, 0, 1, 1, 2};
  ctx.params.host_of = ctx.host_of;
  const CostParams shm = DefaultCostParams(BackendKind::kShm);
  ctx.params.intra_alpha_s = shm.alpha_s;
  ctx.params.intra_beta_s_per_byte = shm.beta_s_per_byte;
  for (Collective c : {Collective::kBroadcast, Collective::kReduce}) {
    CallShape a = Shape(c, 1 << 18, 4, 6), b = a;
    a.backend = b.backend = BackendKind::kTcp;
    a.root = 0;
    b.root = 5;
    SelectionCache fresh_a, fresh_b, shared;
    auto want_a = Select(a, DataType::kFloat32, ReduceOp::kSum, ctx, &fresh_a);
    auto want_b = Select(b, DataType::kFloat32, ReduceOp::kSum, ctx, &fresh_b);
    ASSERT_TRUE(want_a.ok() && want_b.ok());
    // The layout makes the roots differ (else this test could not fail).
    ASSERT_NE(want_a->predicted_s, want_b->predicted_s) << CollectiveName(c);
    auto got_a = Select(a, DataType::kFloat32, ReduceOp::kSum, ctx, &shared);
    auto got_b = Select(b, DataType::kFloat32, ReduceOp::kSum, ctx, &shared);
    ASSERT_TRUE(got_a.ok() && got_b.ok());
    EXPECT_EQ(got_a->predicted_s, want_a->predicted_s) << CollectiveName(c);
    EXPECT_EQ(got_b->predicted_s, want_b->predicted_s) << CollectiveName(c) << ": root 5 answered from root 0's";
  }
}

// A cache answers for one shape of communicator: used for another rank
// count, backend or host layout, it must predict what a fresh one does.
TEST(SelectionTest, ACacheIsNotReusedForAnotherShape) {
  const CostParams shm = DefaultCostParams(BackendKind::kShm);
  auto context = [&](BackendKind kind, const std::vector<int>& host_of) {
    SelectionContext ctx;
    ctx.backend = kind;
    ctx.params = DefaultCostParams(kind);
    ctx.host_of = host_of;
    ctx.params.host_of = host_of;
    ctx.params.intra_alpha_s = shm.alpha_s;
    ctx.params.intra_beta_s_per_byte = shm.beta_s_per_byte;
    return ctx;
  };
  struct Case {
    SelectionContext ctx;
    int nranks;
  };
  const std::vector<Case> cases = {{context(BackendKind::kTcp, {0, 0, 1, 1}), 4},
                                   {context(BackendKind::kTcp, {0, 1, 0, 1}), 4},
                                   {context(BackendKind::kTcp, {}), 4},
                                   {context(BackendKind::kVerbs, {}), 4},
                                   {context(BackendKind::kTcp, {}), 8},
                                   {context(BackendKind::kTcp, {0, 0, 1, 1}), 4}};
  SelectionCache shared;
  std::vector<std::vector<std::pair<std::string, double>>> seen;
  for (const Case& c : cases) {
    CallShape call = Shape(Collective::kAllReduce, 1 << 16, 4, c.nranks);
    call.backend = c.ctx.backend;
    SelectionCache fresh;
    auto want = Select(call, DataType::kFloat32, ReduceOp::kSum, c.ctx, &fresh);
    auto got = Select(call, DataType::kFloat32, ReduceOp::kSum, c.ctx, &shared);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->predicted_s, want->predicted_s) << "case " << seen.size();
    EXPECT_EQ(shared.entries.size(), 1u) << "case " << seen.size();
    seen.push_back(want->predicted_s);
  }
  // Each shape predicts differently (else this test could not fail), and the
  // last, a shape seen before, as it did then.
  for (size_t i = 1; i + 1 < seen.size(); ++i) EXPECT_NE(seen[i], seen[i - 1]) << i;
  EXPECT_EQ(seen.back(), seen.front());
}

TEST(SelectionTest, PredictCallCostsBothKinds) {
  const CostParams p = DefaultCostParams(BackendKind::kShm);
  const DirectLimits l;
  const CallShape small = Shape(Collective::kAllReduce, 2, 4, 2);
  const CallShape large = Shape(Collective::kAllReduce, 1 << 20, 4, 2);
  for (const AlgorithmInfo* e : EntriesFor(Collective::kAllReduce)) {
    auto a = PredictCall(*e, small, p, l);
    auto b = PredictCall(*e, large, p, l);
    ASSERT_TRUE(a.ok() && b.ok()) << e->name();
    EXPECT_GT(*a, 0) << e->name();
    EXPECT_GT(*b, *a) << e->name();
  }
  // The n-ary reduction reads every input once: 2 inputs cost one pass.
  EXPECT_DOUBLE_EQ(NaryReduceSeconds(1000, 2, p), 1000 * p.gamma_s_per_byte);
  EXPECT_DOUBLE_EQ(NaryReduceSeconds(1000, 5, p), 2000 * p.gamma_s_per_byte);
}

}  // namespace
}  // namespace ciuic::collectives
