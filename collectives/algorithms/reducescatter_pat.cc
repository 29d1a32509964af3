// Reduce-scatter, PAT: the all-gather's binomial trees run backwards,
// partial sums flowing toward each block's owner. Scratch holds one
// accumulator per offset t (the block of rank + t), filled from the input,
// in the layout of pat_layout.h. Across dimension e (near first) a rank
// sends the accumulators whose subtrees are complete to rank + 2^e (one
// contiguous range) and adds the matching ones from rank - 2^e into its
// own; where those are two runs the message lands in a landing area and
// two reduces add it. The last step adds into offset 0, the own block,
// straight into the output.
//
// With CollectiveArgs::aggregation = A (PatGroups), the groups other than
// 0 go first, g = D-1 down to 1: group g's accumulators (its input blocks
// plus what its children added) go to rank + lowbit(g) and are added
// there into group g - lowbit(g); then group 0 runs the near-first
// exchange across the high dimensions. A group occupies its dimension's
// region from its first use to its send, and the order never has two live
// groups of one dimension, so scratch is about A x (log2(N / A) + 2)
// blocks; a region is refilled only after its last occupant was sent.
//
// Every block is summed at its owner along one translated tree shape,
// local operand first, so the bytes do not depend on timing, chunking or
// channels; they do depend on A, which every rank passes alike. In place:
// input block `rank` is read only by its fill copy, and the output written
// only by the last step, which depends on that copy.
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/pat_layout.h"

namespace ciuic::collectives::generators {

Status ReduceScatterPat(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, rank = a.rank;
  const size_t count = a.count;
  const PatGroups pg = PatGroups::For(a);
  const PatLayout& top = pg.top();
  const int D = pg.groups(), d = pg.group_dims();
  const auto na = static_cast<size_t>(pg.Count(0));
  const size_t landing = pg.SpareBlocks();  // blocks of the landing area
  const int nch = b.UseChannels(count, a.nchannels);
  size_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const auto part = EvenPart(0, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const size_t po = part.first, pc = part.second;  // lambdas below capture these (not bindings)
    const size_t land_at = base + na * (1 + static_cast<size_t>(d)) * pc;
    auto dim_of = [](int g) { return g == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(g)); };
    auto region = [&](int g) { return base + static_cast<size_t>(dim_of(g) + 1) * na * pc; };
    auto acc = [&](int g, size_t p, size_t len) { return Scr(region(g) + p * pc, len * pc); };
    auto in_of = [&](long long t) { return In(static_cast<size_t>(Mod(rank + t, n)) * count + po, pc); };
    // Per region: its group, the last step that wrote it (fill or reduce),
    // and the send that emptied it.
    struct Occupant {
      int group = -1;
      int last = -1;
      int sent = -1;
    };
    std::vector<Occupant> regions(static_cast<size_t>(d) + 1);  // [0]: group 0
    auto occupant = [&](int g) -> Occupant& {
      const int slot = dim_of(g) + 1;
      return regions[static_cast<size_t>(slot)];
    };
    // Group 0 first: the offsets sent first (odd a with D = 1) first, so
    // the first send of full aggregation waits only for them.
    std::vector<int> odd, rest;
    for (int x : top.order()) {
      const int f = b.Copy(in_of(static_cast<long long>(x) * D), acc(0, top.pos(x), 1));
      (x % 2 == 1 ? odd : rest).push_back(f);
    }
    const int odd_filled = b.Join(odd);
    rest.push_back(odd_filled);
    regions[0] = {0, b.Join(rest), -1};
    // Group g in its region, filled from the input once the last occupant
    // was sent.
    auto claim = [&](int g) -> Occupant& {
      Occupant& o = occupant(g);
      if (o.group == g) return o;
      std::vector<int> fills;
      const std::vector<int> order = pg.Order(g);
      for (size_t i = 0; i < order.size(); ++i) {
        fills.push_back(b.Copy(in_of(static_cast<long long>(order[i]) * D + g), acc(g, i, 1), {o.sent}));
      }
      o = {g, b.Join(fills), -1};
      return o;
    };
    std::vector<int> landing_read;  // the reduces out of the landing area
    // Adds the message from `from` (the blocks of `runs` of group p, in
    // order) into p's accumulators; `into` = the output for the last one.
    auto add = [&](int from, int p, const std::vector<std::pair<size_t, size_t>>& runs, size_t len, bool out) {
      Occupant& o = occupant(p);
      if (out) {
        o.last = b.RecvReduce(from, c, acc(p, 0, 1), Out(po, pc), {o.last});
      } else if (runs.size() == 1) {
        o.last = b.RecvReduce(from, c, acc(p, runs[0].first, runs[0].second), acc(p, runs[0].first, runs[0].second),
                              {o.last});
      } else {
        const int got = b.Recv(from, c, Scr(land_at, len * pc), landing_read);
        landing_read.clear();
        size_t at = 0;
        for (const auto& [q, cnt] : runs) {
          landing_read.push_back(b.Reduce({acc(p, q, cnt), Scr(land_at + at * pc, cnt * pc)}, acc(p, q, cnt), {got, o.last}));
          at += cnt;
        }
        o.last = b.Join(landing_read);
      }
    };
    // Group phase, g descending: every child of g is larger, so done.
    for (int g = std::min(D, n) - 1; g >= 1; --g) {
      const int e = dim_of(g), p = g - (1 << e);
      Occupant& mine = claim(g);
      const auto m = static_cast<size_t>(pg.Count(g));
      mine.sent = b.Send(Mod(rank + (1 << e), n), c, acc(g, 0, m), {mine.last});
      mine.group = -1;
      claim(p);
      add(Mod(rank - (1 << e), n), p, pg.SentRuns(p, g), m, false);
    }
    // Top phase: group 0 near first, peers D x 2^e away.
    for (int e = 0; e < top.dims(); ++e) {
      const long long dist = static_cast<long long>(D) << e;
      const auto [first, len] = top.Children(e);
      b.Send(Mod(rank + dist, n), c, acc(0, first, len), {D == 1 && e == 0 ? odd_filled : regions[0].last});
      add(Mod(rank - dist, n), 0, top.Runs(top.Holders(e)), len, e == top.dims() - 1);
    }
    if (top.dims() == 0) b.Copy(acc(0, 0, 1), Out(po, pc), {regions[0].last});  // one block in group 0
    base = land_at + landing * pc;
  }
  b.Scratch(base);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
