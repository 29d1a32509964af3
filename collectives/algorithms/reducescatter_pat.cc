// Reduce-scatter, PAT (full aggregation): the all-gather's binomial trees
// run backwards, partial sums flowing toward each block's owner. Scratch
// holds one accumulator per offset t (the block of rank + t) in the layout
// of pat_layout.h, filled from the input. Across dimension e (e = 0 up to
// k-1, near first) a rank sends the accumulators whose offset has lowest
// set bit e to rank + 2^e (one contiguous range: complete, since their
// subtrees were all below e) and adds the matching range from rank - 2^e
// into its multiples of 2^(e+1). Off powers of two those may be two runs:
// the message lands in a landing area and two reduces add it. The last
// dimension adds into offset 0, the own block, straight into the output.
// Every block is summed at its owner along one translated tree shape, local
// operand first, so the bytes do not depend on timing, chunking or
// channels (the order differs from ring's). In place: input block `rank`
// is read only by its fill copy, and the output written only by the last
// step, which depends on that copy.
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/pat_layout.h"

namespace ciuic::collectives::generators {

Status ReduceScatterPat(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, rank = a.rank;
  const size_t count = a.count;
  const PatLayout lay(n);
  const size_t nc = static_cast<size_t>(n);
  const size_t landing = lay.PowerOfTwo() ? 0 : lay.LargestMessage();  // blocks of the landing area
  const int nch = b.UseChannels(count, a.nchannels);
  size_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const auto [po, pc] = EvenPart(0, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const size_t land_at = base + nc * pc;
    auto acc = [&](size_t p, size_t len) { return Scr(base + p * pc, len * pc); };
    // Fill: the offsets sent first (odd ones) first, so the first send
    // waits only for them.
    std::vector<int> odd, rest;
    for (int t : lay.order()) {
      const int f = b.Copy(In(static_cast<size_t>(Mod(rank + t, n)) * count + po, pc), acc(lay.pos(t), 1));
      (t % 2 == 1 ? odd : rest).push_back(f);
    }
    const int odd_filled = b.Join(odd);
    rest.push_back(odd_filled);
    const int filled = b.Join(rest);
    int last = filled;                // the last reduce into the accumulators
    std::vector<int> landing_read;    // the reduces out of the landing area
    for (int e = 0; e < lay.dims(); ++e) {
      const int d = 1 << e, to = Mod(rank + d, n), from = Mod(rank - d, n);
      const auto [first, len] = lay.Children(e);
      b.Send(to, c, acc(first, len), {e == 0 ? odd_filled : last});
      const auto runs = lay.Runs(lay.Holders(e));
      if (e == lay.dims() - 1) {  // only offset 0 is left: the own block, into the output
        b.RecvReduce(from, c, acc(0, 1), Out(po, pc), {last});
      } else if (runs.size() == 1) {
        last = b.RecvReduce(from, c, acc(runs[0].first, runs[0].second), acc(runs[0].first, runs[0].second), {last});
      } else {
        const int got = b.Recv(from, c, Scr(land_at, len * pc), landing_read);
        landing_read.clear();
        size_t at = 0;
        for (const auto& [p, cnt] : runs) {
          landing_read.push_back(b.Reduce({acc(p, cnt), Scr(land_at + at * pc, cnt * pc)}, acc(p, cnt), {got, last}));
          at += cnt;
        }
        last = b.Join(landing_read);
      }
    }
    base = land_at + landing * pc;
  }
  b.Scratch(base);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
