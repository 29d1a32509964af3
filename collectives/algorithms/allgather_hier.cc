// All-gather (and all-gatherv), hierarchical ("hier"): each rank sends its
// own block once to every other host, to the rank there that stands for it
// (HostGroups::Agent: local index j of equal hosts pairs with j, so every
// local rank carries a share of the traffic between hosts); then inside each
// host a ring all-gather passes around the blocks each rank holds (its own
// and those it received for the host), over shm. The network carries each
// block once into each other host: no block crosses twice.
// In place: the own block is sent from the input (where the output has it)
// and nothing writes it; every other block is written once.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"

namespace ciuic::collectives::generators {

Status AllGatherHierarchical(const CollectiveArgs& a, Builder& b) {
  const HostGroups g(a);
  const int n = a.nranks;
  const std::vector<size_t> counts = internal::BlockCounts(a);
  const std::vector<size_t> displs = internal::PrefixSums(counts);
  const size_t mine = counts[static_cast<size_t>(a.rank)];
  b.Copy(In(0, mine), Out(displs[static_cast<size_t>(a.rank)], mine));  // a no-op in place
  const int m = g.size();
  const int j = g.local;
  const int next = g.mine()[static_cast<size_t>(Mod(j + 1, m))], prev = g.mine()[static_cast<size_t>(Mod(j - 1, m))];
  // Channel c carries part c of every block through the same exchanges.
  const int nch = b.UseChannels(*std::max_element(counts.begin(), counts.end()), a.nchannels);
  for (int c = 0; c < nch; ++c) {
    auto part = [&](size_t base, size_t count) {
      return EvenPart(base, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    };
    auto block = [&](int r) { return Out(part(displs[static_cast<size_t>(r)], counts[static_cast<size_t>(r)])); };
    const Range own_in = In(part(0, mine));

    // Between hosts: the own block to its agent on every other host; the
    // blocks this rank stands for, from their owners.
    for (int h = 0; h < g.nhosts; ++h) {
      if (h != g.host) b.Send(g.Agent(h, a.rank), c, own_in);
    }
    std::vector<int> got(static_cast<size_t>(n), -1);
    for (int r = 0; r < n; ++r) {
      if (g.HostOf(r) != g.host && g.Agent(g.host, r) == a.rank) got[static_cast<size_t>(r)] = b.Recv(r, c, block(r));
    }

    // Inside the host: a ring over the sets of blocks each local rank holds.
    if (m == 1) continue;
    for (int r : g.BlocksOf(g.host, j, n)) {
      if (r == a.rank) {
        b.Send(next, c, own_in);
      } else {
        b.Send(next, c, block(r), {got[static_cast<size_t>(r)]});
      }
    }
    for (int t = 1; t < m; ++t) {
      for (int r : g.BlocksOf(g.host, Mod(j - t, m), n)) {
        if (t < m - 1) {
          b.RecvCopySend(prev, next, c, block(r));
        } else {
          b.Recv(prev, c, block(r));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
