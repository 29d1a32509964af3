// Reduce, hierarchical ("hier"): inside every host a pipelined chain
// towards its leader (the root on its host, else the host's first rank)
// sums the host's inputs over shm, then a pipelined chain of the leaders
// across hosts towards the root sums the host partials: the network carries
// one vector out of each host. Every element is combined in one fixed order
// (the host's chain, then the leaders' chain). Non-roots accumulate in
// scratch; the root in its output. In place (root): each chunk of input is
// read by the step that writes the same output chunk.
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"

namespace ciuic::collectives::generators {

Status ReduceHierarchical(const CollectiveArgs& a, Builder& b) {
  const HostGroups g(a);
  const size_t n = a.count;
  const std::vector<int> leaders = g.LeadersFromRoot(a.root);
  const std::vector<int> chain = g.LeaderFirst(g.host, a.root);
  const int m = static_cast<int>(chain.size());
  const bool root = a.rank == a.root;
  const int p = IndexOf(chain, a.rank);
  const int li = IndexOf(leaders, a.rank);
  const int nl = static_cast<int>(leaders.size());
  if (!root && ((p > 0 && p + 1 < m) || (p == 0 && (m > 1 || li + 1 < nl)))) b.Scratch(n);
  // Channel c carries part c of the vector through the same chains.
  const int nch = b.UseChannels(n, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, n, static_cast<size_t>(nch), static_cast<size_t>(c));
    const Range acc = root ? Out(oc) : Scr(oc.first, oc.second);
    const Range in = In(oc);
    if (p > 0) {  // inside the host, towards its leader
      const int to = chain[static_cast<size_t>(p) - 1];
      if (p + 1 == m) {
        b.Send(to, c, in);
      } else {
        b.RecvReduceSend(chain[static_cast<size_t>(p) + 1], to, c, in, acc, {}, DepMode::kPerChunk);
      }
      continue;
    }
    // The leader: its host's partial, then the leaders' chain.
    int host_sum = -1;
    Range partial = in;
    if (m > 1) {
      host_sum = b.RecvReduce(chain[1], c, in, acc, {}, DepMode::kPerChunk);
      partial = acc;
    }
    if (li + 1 < nl) {
      const int from = leaders[static_cast<size_t>(li) + 1];
      if (root) {
        b.RecvReduce(from, c, partial, acc, {host_sum}, DepMode::kPerChunk);
      } else {
        b.RecvReduceSend(from, leaders[static_cast<size_t>(li) - 1], c, partial, acc, {host_sum}, DepMode::kPerChunk);
      }
    } else if (!root) {
      b.Send(leaders[static_cast<size_t>(li) - 1], c, partial, {host_sum}, DepMode::kPerChunk);
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
