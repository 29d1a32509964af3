// Reduce-scatter (and reduce-scatterv), hierarchical ("hier"): inside each
// host a ring reduce-scatter sums the host's inputs of every block at the
// rank that stands for it there (the owner on its own host, elsewhere
// HostGroups::Agent, so every local rank carries a share), over shm; then
// each agent sends its host's partial of a block to the block's owner,
// which adds the other hosts' partials to its own host's, in host order. The network carries
// one partial per block out of each other host. Every element is combined
// in one fixed order (the owner's host ring, then the other hosts'
// partials in host order).
// Partial sums live in scratch at the block's own offset (a rank forwards
// or ends each block's chain once). In place: the owner reads its input
// block only in the step that writes the same output chunk, and later
// steps read and write only the output.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"

namespace ciuic::collectives::generators {

Status ReduceScatterHierarchical(const CollectiveArgs& a, Builder& b) {
  const HostGroups g(a);
  const int n = a.nranks;
  const std::vector<size_t> counts = internal::BlockCounts(a);
  const std::vector<size_t> displs = internal::PrefixSums(counts);
  const size_t mine = counts[static_cast<size_t>(a.rank)];
  const int m = g.size();
  const int j = g.local;
  // One rank on its host: its own block's partial is its input, copied to
  // the output (a no-op in place).
  const int copied = m == 1 ? b.Copy(In(displs[static_cast<size_t>(a.rank)], mine), Out(0, mine)) : -1;
  bool scratch = false;
  // Channel c carries part c of every block through the same exchanges.
  const int nch = b.UseChannels(*std::max_element(counts.begin(), counts.end()), a.nchannels);
  for (int c = 0; c < nch; ++c) {
    auto part = [&](size_t base, size_t count) {
      return EvenPart(base, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    };
    auto in = [&](int r) { return In(part(displs[static_cast<size_t>(r)], counts[static_cast<size_t>(r)])); };
    auto scr = [&](int r) {
      const auto oc = part(displs[static_cast<size_t>(r)], counts[static_cast<size_t>(r)]);
      return Scr(oc.first, oc.second);
    };
    const Range own = Out(part(0, mine));

    // Inside the host: the host's sum of each block at the rank standing
    // for it (partial[r], made by step made[r]).
    std::vector<Range> partial(static_cast<size_t>(n));
    std::vector<int> made(static_cast<size_t>(n), -1);
    if (m == 1) {
      for (int r = 0; r < n; ++r) partial[static_cast<size_t>(r)] = in(r);
      made[static_cast<size_t>(a.rank)] = copied;
      partial[static_cast<size_t>(a.rank)] = own;
    } else {
      const int next = g.mine()[static_cast<size_t>(Mod(j + 1, m))];
      const int prev = g.mine()[static_cast<size_t>(Mod(j - 1, m))];
      // The chain of local rank k's blocks starts at k + 1 and ends at k.
      for (int r : g.BlocksOf(g.host, Mod(j - 1, m), n)) b.Send(next, c, in(r));
      for (int t = 1; t < m; ++t) {
        for (int r : g.BlocksOf(g.host, Mod(j - 1 - t, m), n)) {
          const size_t i = static_cast<size_t>(r);
          if (t < m - 1) {
            b.RecvReduceSend(prev, next, c, in(r), scr(r));
            scratch = true;
          } else {
            partial[i] = r == a.rank ? own : scr(r);
            scratch |= r != a.rank;
            made[i] = b.RecvReduce(prev, c, in(r), partial[i]);
          }
        }
      }
    }

    // Between hosts: the partials this rank stands for, to their owners;
    // the other hosts' partials of the own block, added in host order.
    for (int r = 0; r < n; ++r) {
      if (g.HostOf(r) != g.host && g.Agent(g.host, r) == a.rank) {
        b.Send(r, c, partial[static_cast<size_t>(r)], {made[static_cast<size_t>(r)]});
      }
    }
    int last = made[static_cast<size_t>(a.rank)];
    for (int h = 0; h < g.nhosts; ++h) {
      if (h != g.host) last = b.RecvReduce(g.Agent(h, a.rank), c, own, own, {last});
    }
  }
  if (scratch) b.Scratch(displs.back());
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
