// The schedule format (Dump, ValidateSchedule, CheckMessageMatching) and
// the simulator's error detection on hand-made schedules.
#include "collectives/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/simulator.h"
#include "reference.h"

namespace ciuic::collectives {
namespace {

using testing::MakeReduce;
using testing::Op;

Range In(size_t o, size_t c) { return Range{BufKind::kInput, o, c}; }
Range Out(size_t o, size_t c) { return Range{BufKind::kOutput, o, c}; }
Range Scr(size_t o, size_t c) { return Range{BufKind::kScratch, o, c}; }

Step SendStep(int peer, Range src, int ch = 0) {
  Step s;
  s.op = StepOp::kSend;
  s.send_peer = peer;
  s.src = src;
  s.channel = ch;
  return s;
}
Step RecvStep(int peer, Range dst, int ch = 0) {
  Step s;
  s.op = StepOp::kRecv;
  s.recv_peer = peer;
  s.dst = dst;
  s.channel = ch;
  return s;
}
Schedule Make(int rank, int n, std::vector<Step> steps, size_t scratch = 0) {
  Schedule s;
  s.algorithm = "test/handmade";
  s.rank = rank;
  s.nranks = n;
  s.nchannels = 2;
  s.scratch_count = scratch;
  s.steps = std::move(steps);
  return s;
}
BufferLayout Layout(size_t in, size_t out) {
  BufferLayout l;
  l.input_count = in;
  l.output_count = out;
  return l;
}


// One rank's schedule through MakeSchedule (the registry's generator).
StatusOr<Schedule> Gen(Algorithm a, Collective c, int rank, int n, size_t count, int nch, int root = 0) {
  CollectiveArgs args;
  args.collective = c;
  args.rank = rank;
  args.nranks = n;
  args.count = count;
  args.nchannels = nch;
  args.root = root;
  return MakeSchedule(a, args);
}
StatusOr<Schedule> GenV(Collective c, int rank, int n, std::vector<size_t> counts, int nch) {
  CollectiveArgs args;
  args.collective = c;
  args.rank = rank;
  args.nranks = n;
  args.counts = std::move(counts);
  args.nchannels = nch;
  return MakeSchedule(Algorithm::kRing, args);
}
StatusOr<Schedule> P2p(Collective c, int rank, int n, size_t count, int peer) {
  CollectiveArgs args;
  args.collective = c;
  args.rank = rank;
  args.nranks = n;
  args.count = count;
  args.peer = peer;
  return MakeSchedule(Algorithm::kPointToPoint, args);
}

TEST(ScheduleTest, DumpNamesAlgorithmAndEveryStep) {
  for (Algorithm a : AlgorithmsFor(Collective::kAllReduce)) {
    auto s = MakeSchedule(a, CollectiveArgs{Collective::kAllReduce, 1, 5, 100, {}, 0, -1, 2});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const std::string d = s->Dump();
    EXPECT_NE(d.find(std::string("allreduce/") + AlgorithmName(a)), std::string::npos) << d;
    EXPECT_NE(d.find("rank 1/5"), std::string::npos) << d;
    // One line per step plus the header.
    EXPECT_EQ(static_cast<size_t>(std::count(d.begin(), d.end(), '\n')), s->steps.size() + 1) << d;
  }
  auto ring = Gen(Algorithm::kRing, Collective::kAllReduce, 1, 4, 100, 1);
  ASSERT_TRUE(ring.ok());
  const std::string d = ring->Dump();
  EXPECT_NE(d.find("#0 send ->2 ch0 src=in[25..50)"), std::string::npos) << d;
  EXPECT_NE(d.find("recv_reduce_send <-0 ->2 ch0 src=in[0..25) dst=out[0..25)"), std::string::npos) << d;
  EXPECT_NE(d.find("deps=0"), std::string::npos) << d;
  auto tree = Gen(Algorithm::kTree, Collective::kAllReduce, 2, 8, 100, 1);
  ASSERT_TRUE(tree.ok());
  EXPECT_NE(tree->Dump().find("per-chunk"), std::string::npos) << tree->Dump();
}

TEST(ScheduleTest, ValidateRejectsBadStructure) {
  const BufferLayout l = Layout(10, 10);
  auto code = [&](const Schedule& s) { return ValidateSchedule(s, l).code(); };
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, {SendStep(1, In(0, 10))}), l).ok());
  EXPECT_EQ(code(Make(0, 2, {SendStep(0, In(0, 10))})), StatusCode::kInvalidArgument);  // to itself
  EXPECT_EQ(code(Make(0, 2, {SendStep(2, In(0, 10))})), StatusCode::kInvalidArgument);  // no such rank
  EXPECT_EQ(code(Make(0, 2, {SendStep(1, In(0, 10), 2)})), StatusCode::kInvalidArgument);  // channel
  EXPECT_EQ(code(Make(0, 2, {SendStep(1, In(5, 10))})), StatusCode::kInvalidArgument);  // out of bounds
  EXPECT_EQ(code(Make(0, 2, {RecvStep(1, Scr(0, 1))})), StatusCode::kInvalidArgument);  // no scratch
  Step dep = SendStep(1, In(0, 10));
  dep.deps = {0};
  EXPECT_EQ(code(Make(0, 2, {dep})), StatusCode::kInvalidArgument);  // dep on itself
  Step chunked = SendStep(1, In(0, 5));
  chunked.deps = {0};
  chunked.dep_mode = DepMode::kPerChunk;
  EXPECT_EQ(code(Make(0, 2, {SendStep(1, In(0, 10)), chunked})), StatusCode::kInvalidArgument);  // counts differ
  Step reduce;
  reduce.op = StepOp::kReduce;
  reduce.dst = Out(0, 4);
  reduce.inputs = {In(0, 4), Out(2, 4)};  // dst partially overlaps inputs[1]
  EXPECT_EQ(code(Make(0, 2, {reduce})), StatusCode::kInvalidArgument);
  reduce.inputs = {Out(0, 4), In(0, 4)};  // dst == inputs[0]: fine
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, {reduce}), l).ok());
  reduce.inputs = {In(0, 4), Out(0, 4)};  // dst == inputs[1]: not supported by kernels
  EXPECT_EQ(code(Make(0, 2, {reduce})), StatusCode::kInvalidArgument);
  Step odd = SendStep(1, In(0, 10));
  odd.recv_peer = 1;
  EXPECT_EQ(code(Make(0, 2, {odd})), StatusCode::kInvalidArgument);
}

TEST(ScheduleTest, ValidateFindsHazardsWithInPlaceAliasing) {
  // Send input, receive into output: fine out-of-place, a race in-place
  // unless the receive depends on the send.
  const std::vector<Step> racy = {SendStep(1, In(0, 10)), RecvStep(1, Out(0, 10))};
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, racy), Layout(10, 10)).ok());
  BufferLayout in_place = Layout(10, 10);
  in_place.alias = BufferLayout::Alias::kInputInOutput;
  const Status st = ValidateSchedule(Make(0, 2, racy), in_place);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("may run at the same time"), std::string::npos) << st.ToString();
  std::vector<Step> ordered = racy;
  ordered[1].deps = {0};
  ordered[1].dep_mode = DepMode::kPerChunk;  // identical ranges: chunk order suffices
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, ordered), in_place).ok());
  // Chunk order is not enough for shifted ranges.
  std::vector<Step> shifted = {SendStep(1, In(0, 8)), RecvStep(1, Out(2, 8))};
  shifted[1].deps = {0};
  shifted[1].dep_mode = DepMode::kPerChunk;
  EXPECT_EQ(ValidateSchedule(Make(0, 2, shifted), in_place).code(), StatusCode::kInvalidArgument);
  shifted[1].dep_mode = DepMode::kWhole;
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, shifted), in_place).ok());
  // Transitive: a kWhole edge after a kPerChunk path orders everything.
  Step mid = SendStep(1, In(0, 8), 1);
  mid.deps = {0};
  mid.dep_mode = DepMode::kPerChunk;
  Step last = RecvStep(1, Out(2, 8));
  last.deps = {1};
  EXPECT_TRUE(ValidateSchedule(Make(0, 2, {SendStep(1, In(0, 8)), mid, last}), in_place).ok());
  // Write-write between unordered steps.
  EXPECT_EQ(ValidateSchedule(Make(0, 3, {RecvStep(1, Out(0, 5)), RecvStep(2, Out(4, 5))}), Layout(0, 10)).code(),
            StatusCode::kInvalidArgument);
  // The layout itself must be consistent.
  BufferLayout bad = Layout(10, 5);
  bad.alias = BufferLayout::Alias::kInputInOutput;
  EXPECT_EQ(ValidateSchedule(Make(0, 2, {}), bad).code(), StatusCode::kInvalidArgument);
}

TEST(ScheduleTest, MessageMatching) {
  std::vector<Schedule> ok = {Make(0, 2, {SendStep(1, In(0, 4)), RecvStep(1, Out(0, 3), 1)}),
                              Make(1, 2, {RecvStep(0, Out(0, 4)), SendStep(0, In(0, 3), 1)})};
  EXPECT_TRUE(CheckMessageMatching(ok).ok());
  auto count = ok;
  count[1].steps[0].dst.count = 5;
  Status st = CheckMessageMatching(count);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("count mismatch"), std::string::npos) << st.ToString();
  auto lost = ok;
  lost[1].steps.erase(lost[1].steps.begin());
  st = CheckMessageMatching(lost);
  EXPECT_NE(st.message().find("never received"), std::string::npos) << st.ToString();
  auto phantom = ok;
  phantom[0].steps.erase(phantom[0].steps.begin());
  st = CheckMessageMatching(phantom);
  EXPECT_NE(st.message().find("never sent"), std::string::npos) << st.ToString();
  auto channel = ok;
  channel[0].steps[0].channel = 1;  // the receiver expects channel 0
  EXPECT_FALSE(CheckMessageMatching(channel).ok());
  auto ranks = ok;
  ranks[1].rank = 0;
  EXPECT_FALSE(CheckMessageMatching(ranks).ok());
}

// Simulates hand-made schedules of int32 elements with the given inputs.
StatusOr<SimResult> Sim(const std::vector<Schedule>& s, const std::vector<BufferLayout>& layouts, const SimOptions& opt = {}) {
  std::vector<SimRankInput> in(s.size());
  for (size_t r = 0; r < s.size(); ++r) {
    in[r].layout = layouts[r];
    std::vector<int32_t> v(layouts[r].input_count);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(100 * r + i);
    in[r].input = testing::Bytes(v);
  }
  return Simulate(s, in, sizeof(int32_t), MakeReduce<int32_t>(Op::kSum), opt);
}

TEST(SimulatorTest, MovesDataChunkByChunk) {
  Step rr;
  rr.op = StepOp::kRecvReduce;
  rr.recv_peer = 0;
  rr.src = In(0, 10);
  rr.dst = Out(0, 10);
  const std::vector<Schedule> s = {Make(0, 2, {SendStep(1, In(0, 10))}), Make(1, 2, {rr})};
  SimOptions opt;
  opt.chunk_bytes = 12;  // 3 elements: 4 chunks
  opt.slots_per_link = 1;
  auto res = Sim(s, {Layout(10, 0), Layout(10, 10)}, opt);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  const int32_t* out = reinterpret_cast<const int32_t*>(res->outputs[1].data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i], i + (100 + i));
  EXPECT_EQ(res->stats.chunks, 4u);
  EXPECT_EQ(res->stats.messages, 1u);
  EXPECT_EQ(res->stats.bytes, 40u);
  EXPECT_EQ(res->stats.max_link_occupancy, 1u);
  // Untouched output keeps the poison pattern.
  auto partial = Make(1, 2, {RecvStep(0, Out(0, 10))});
  auto res2 = Sim({s[0], partial}, {Layout(10, 0), Layout(0, 12)});
  ASSERT_TRUE(res2.ok());
  EXPECT_EQ(res2->outputs[1][10 * 4], kSimPoison);
}

TEST(SimulatorTest, DetectsDeadlock) {
  // Both ranks receive before they send, with a dep that forbids sending first.
  Step send = SendStep(1, In(0, 4));
  send.deps = {0};
  Step send0 = SendStep(0, In(0, 4));
  send0.deps = {0};
  const std::vector<Schedule> s = {Make(0, 2, {RecvStep(1, Out(0, 4)), send}),
                                   Make(1, 2, {RecvStep(0, Out(0, 4)), send0})};
  auto res = Sim(s, {Layout(4, 4), Layout(4, 4)});
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(res.status().message().find("deadlock"), std::string::npos) << res.status().ToString();
  EXPECT_NE(res.status().message().find("waits for dep #0"), std::string::npos) << res.status().ToString();
}

TEST(SimulatorTest, DetectsHeadOfLineDeadlockUnderBoundedSlots) {
  // Rank 0 sends two 3-chunk messages on channel 0, then (after the second)
  // one on channel 1; rank 1 takes the channel-0 messages only after the
  // channel-1 one. With one slot per link the second message is stuck
  // behind the first, which nobody drains: a deadlock that only bounded
  // links show.
  std::vector<Schedule> s = {
      Make(0, 2, {SendStep(1, In(0, 9)), SendStep(1, In(0, 9)), SendStep(1, In(0, 3), 1)}),
      Make(1, 2, {RecvStep(0, Out(0, 3), 1), RecvStep(0, Out(3, 9)), RecvStep(0, Out(12, 9))})};
  s[0].steps[2].deps = {1};
  s[1].steps[1].deps = {0};
  SimOptions opt;
  opt.chunk_bytes = 12;  // 3 elements
  opt.slots_per_link = 1;
  const std::vector<BufferLayout> layouts = {Layout(9, 0), Layout(0, 21)};
  auto res = Sim(s, layouts, opt);
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("deadlock"), std::string::npos) << res.status().ToString();
  EXPECT_NE(res.status().message().find("is full"), std::string::npos) << res.status().ToString();
  EXPECT_NE(res.status().message().find("waits behind step #0"), std::string::npos) << res.status().ToString();
  // With room for both messages it completes.
  opt.slots_per_link = 6;
  res = Sim(s, layouts, opt);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stats.max_link_occupancy, 6u);
}

TEST(SimulatorTest, DetectsMismatchesAtRunTimeAndOutOfBounds) {
  const std::vector<Schedule> s = {Make(0, 2, {SendStep(1, In(0, 4))}), Make(1, 2, {RecvStep(0, Out(0, 5))})};
  auto res = Sim(s, {Layout(4, 0), Layout(0, 5)});
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);  // static check
  SimOptions opt;
  opt.check_matching = false;
  res = Sim(s, {Layout(4, 0), Layout(0, 5)}, opt);
  EXPECT_EQ(res.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(res.status().message().find("expects message #0 of 5 elements"), std::string::npos)
      << res.status().ToString();
  const std::vector<Schedule> lost = {Make(0, 2, {SendStep(1, In(0, 4))}), Make(1, 2, {})};
  res = Sim(lost, {Layout(4, 0), Layout(0, 5)}, opt);
  EXPECT_NE(res.status().message().find("never received"), std::string::npos) << res.status().ToString();
  // Out of bounds is always checked (memory safety).
  const std::vector<Schedule> oob = {Make(0, 2, {SendStep(1, In(2, 4))}), Make(1, 2, {RecvStep(0, Out(0, 4))})};
  opt.check_hazards = false;
  res = Sim(oob, {Layout(4, 0), Layout(0, 4)}, opt);
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("out of bounds"), std::string::npos) << res.status().ToString();
  // Argument errors.
  EXPECT_EQ(Simulate(s, {}, 4, MakeReduce<int32_t>(Op::kSum), {}).status().code(), StatusCode::kInvalidArgument);
  SimOptions zero;
  zero.slots_per_link = 0;
  EXPECT_EQ(Sim(s, {Layout(4, 0), Layout(0, 4)}, zero).status().code(), StatusCode::kInvalidArgument);
}

TEST(SimulatorTest, PointToPointAndZeroCountMessages) {
  for (size_t count : {0, 1, 1000}) {
    auto snd = P2p(Collective::kSend, 2, 3, count, 0);
    auto rcv = P2p(Collective::kRecv, 0, 3, count, 2);
    ASSERT_TRUE(snd.ok() && rcv.ok());
    Schedule mid = Make(1, 3, {});
    auto res = Sim({*rcv, mid, *snd}, {Layout(0, count), Layout(0, 0), Layout(count, 0)});
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    const int32_t* out = reinterpret_cast<const int32_t*>(res->outputs[0].data());
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(200 + i));
    EXPECT_EQ(res->stats.messages, 1u);
  }
  EXPECT_FALSE(P2p(Collective::kSend, 1, 3, 5, 1).ok());
  EXPECT_FALSE(P2p(Collective::kRecv, 1, 3, 5, 3).ok());
}

TEST(AlgorithmArgsTest, BadArgumentsAreErrors) {
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kAllReduce, 0, 0, 10, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kAllReduce, 4, 4, 10, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kAllReduce, 0, 4, 10, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kAllReduce, 0, 4, 10, kMaxChannels + 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kBroadcast, 0, 4, 10, 1, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kBinomial, Collective::kReduce, 0, 4, 10, 1, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenV(Collective::kAllGatherv, 0, 4, {1, 2, 3}, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Gen(Algorithm::kRing, Collective::kAllGather, 0, 4, SIZE_MAX / 2, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenV(Collective::kReduceScatterv, 0, 2, {SIZE_MAX, 2}, 1).status().code(), StatusCode::kInvalidArgument);
  CollectiveArgs a{Collective::kAllGather, 0, 2, 4, {}, 0, -1, 1};
  EXPECT_EQ(MakeSchedule(Algorithm::kTree, a).status().code(), StatusCode::kInvalidArgument);
  // Host maps as CommDecision writes them: one entry per rank, hosts in
  // order of first appearance (no gap, no negative, no empty host).
  CollectiveArgs h;
  h.nranks = 3;
  h.count = 10;
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{0, 2, 1}, {1, 0, 0}, {0, -1, 0}, {0, 0}}) {
    h.host_of = bad;
    auto s = MakeSchedule(Algorithm::kHierarchical, h);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
    EXPECT_NE(s.status().message().find("host_of"), std::string::npos) << s.status().ToString();
  }
  h.host_of = {0, 1, 0};
  EXPECT_TRUE(MakeSchedule(Algorithm::kHierarchical, h).ok());
  auto parsed = ParseAlgorithm(Collective::kAllReduce, "bogus");
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("direct, ring, tree, rabenseifner, recdoubling"), std::string::npos)
      << parsed.status().ToString();
  // One meaning per name: "tree" is the double binary tree, which only
  // all-reduce has; broadcast and reduce have "binomial".
  EXPECT_FALSE(ParseAlgorithm(Collective::kBroadcast, "tree").ok());
  EXPECT_EQ(*ParseAlgorithm(Collective::kBroadcast, "binomial"), Algorithm::kBinomial);
  // The shared-memory family has no schedule.
  EXPECT_EQ(*ParseAlgorithm(Collective::kAllReduce, "direct"), Algorithm::kShmDirect);
  CollectiveArgs ar{Collective::kAllReduce, 0, 2, 4, {}, 0, -1, 1};
  EXPECT_EQ(MakeSchedule(Algorithm::kShmDirect, ar).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseAlgorithm(Collective::kAllReduce, "recdoubling"), Algorithm::kRecursiveDoubling);
  EXPECT_FALSE(ParseAlgorithm(Collective::kAllGather, "tree").ok());
}

TEST(AlgorithmShapeTest, DoubleTreesAreComplementary) {
  // In the two trees a rank is a leaf at most once (rank 0 never is), so
  // leaves of one are interior ranks of the other.
  for (int n : {2, 3, 4, 5, 6, 7, 8, 9, 16, 17}) {
    for (int r = 0; r < n; ++r) {
      auto s = Gen(Algorithm::kTree, Collective::kAllReduce, r, n, 1000, 1);
      ASSERT_TRUE(s.ok());
      int leaf_trees = 0;
      for (int ch = 0; ch < 2; ++ch) {
        // A leaf's first step in a tree is a plain send up.
        for (const Step& st : s->steps) {
          if (st.channel != ch) continue;
          if (st.op == StepOp::kSend) ++leaf_trees;
          break;
        }
      }
      EXPECT_LE(leaf_trees, 1) << "rank " << r << " of " << n << " is a leaf in both trees";
    }
  }
}

TEST(AlgorithmShapeTest, RingUsesAlternatingDirections) {
  auto s = Gen(Algorithm::kRing, Collective::kAllReduce, 2, 5, 100, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->nchannels, 2);
  int fwd = 0, bwd = 0;
  for (const Step& st : s->steps) {
    if (st.op != StepOp::kSend) continue;
    (st.channel == 0 ? fwd : bwd) = st.send_peer;
  }
  EXPECT_EQ(fwd, 3);
  EXPECT_EQ(bwd, 1);
}

}  // namespace
}  // namespace ciuic::collectives
