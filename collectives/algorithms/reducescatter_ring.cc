// Reduce-scatter (and reduce-scatterv), ring: the input holds n blocks
// (count elements each; the v form: counts[r] for rank r) and rank r ends
// with block r reduced. Partial sums travel through two scratch slots per
// channel (each as large as the channel's largest part); only the last step
// writes the output, and in place it reads exactly the input block the
// output aliases.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status ReduceScatterRing(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const std::vector<size_t> counts = internal::BlockCounts(a);
  const std::vector<size_t> displs = internal::PrefixSums(counts);
  const size_t mine = counts[rank];
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const int nch = b.UseChannels(largest, a.nchannels);
  size_t scratch_base = 0;
  for (int c = 0; c < nch; ++c) {
    // A partial sum lives in one slot from the step that makes it until it
    // is sent; the step after next reuses the slot.
    size_t slot = 0;
    for (int blk = 0; blk < n; ++blk) slot = std::max(slot, EvenPart(0, counts[blk], nch, c).second);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto part = [&](int blk) { return EvenPart(displs[blk], counts[blk], nch, c); };
    // Block b's chain starts at the rank after b and ends at b.
    b.Send(next, c, In(part(ring.RankAt(p - 1))));
    std::vector<int> step(n, -1);
    for (int j = 1; j < n; ++j) {
      const int blk = ring.RankAt(p - 1 - j);
      const Range src = In(part(blk));
      if (j < n - 1) {
        const Range tmp = Scr(scratch_base + static_cast<size_t>(j % 2) * slot, src.count);
        step[j] = b.RecvReduceSend(prev, next, c, src, tmp, {j >= 3 ? step[j - 2] : -1});
      } else {  // blk == rank: the reduced block, into the output
        b.RecvReduce(prev, c, src, Out(EvenPart(0, mine, nch, c)));
      }
    }
    scratch_base += 2 * slot;
  }
  b.Scratch(scratch_base);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
