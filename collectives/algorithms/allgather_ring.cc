// All-gather (and all-gatherv), ring: count elements per rank (the v form:
// counts[r] from rank r), output = the blocks packed rank after rank. The
// own block is copied (a no-op in place) and sent from the input; the n-1
// other blocks are received into the output and forwarded.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllGatherRing(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const std::vector<size_t> counts = internal::BlockCounts(a);
  const std::vector<size_t> displs = internal::PrefixSums(counts);
  const size_t mine = counts[rank];
  b.Copy(In(0, mine), Out(displs[rank], mine));  // a no-op in place
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const int nch = b.UseChannels(largest, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto part = [&](int blk) { return EvenPart(displs[blk], counts[blk], nch, c); };
    b.Send(next, c, In(EvenPart(0, mine, nch, c)));
    for (int j = 1; j < n; ++j) {
      const Range dst = Out(part(ring.RankAt(p - j)));
      if (j < n - 1) {
        b.RecvCopySend(prev, next, c, dst);
      } else {
        b.Recv(prev, c, dst);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
