// Broadcast, hierarchical ("hier"): a pipelined chain across hosts through
// one leader each (the root on its host, else the host's first rank), and
// inside every host a pipelined chain from its leader through its other
// ranks (shm links). The network carries the vector once into each host;
// every rank forwards chunk by chunk (kPerChunk) as it receives, so the two
// levels overlap. Ranks interleaved across hosts still cross hosts only
// nhosts - 1 times, where the flat chain would cross at every hop.
// In place: only the root has input, and it is never written.
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"

namespace ciuic::collectives::generators {

Status BroadcastHierarchical(const CollectiveArgs& a, Builder& b) {
  const HostGroups g(a);
  const std::vector<int> leaders = g.LeadersFromRoot(a.root);
  const std::vector<int> chain = g.LeaderFirst(g.host, a.root);
  const bool root = a.rank == a.root;
  if (root) b.Copy(In(0, a.count), Out(0, a.count));  // a no-op in place
  const int li = IndexOf(leaders, a.rank), p = IndexOf(chain, a.rank);
  // Channel c carries part c of the vector through the same chains.
  const int nch = b.UseChannels(a.count, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, a.count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const Range dst = Out(oc);
    const Range src = root ? In(oc) : dst;
    int got = -1;  // the root sends from its input
    if (li < static_cast<int>(leaders.size())) {  // a leader
      if (li > 0) got = b.Recv(leaders[static_cast<size_t>(li) - 1], c, dst);
      if (li + 1 < static_cast<int>(leaders.size())) {
        b.Send(leaders[static_cast<size_t>(li) + 1], c, src, {got}, DepMode::kPerChunk);
      }
    }
    if (p > 0) got = b.Recv(chain[static_cast<size_t>(p) - 1], c, dst);
    if (p + 1 < static_cast<int>(chain.size())) {
      b.Send(chain[static_cast<size_t>(p) + 1], c, src, {got}, DepMode::kPerChunk);
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
