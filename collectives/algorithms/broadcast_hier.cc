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
  const Range all = Out(0, a.count);
  const std::vector<int> leaders = g.LeadersFromRoot(a.root);
  const std::vector<int> chain = g.LeaderFirst(g.host, a.root);
  int got = -1;
  Range src = all;
  if (a.rank == a.root) {
    b.Copy(In(0, a.count), all);  // a no-op in place
    src = In(0, a.count);
  }
  const int li = IndexOf(leaders, a.rank);
  if (li < static_cast<int>(leaders.size())) {  // a leader
    if (li > 0) got = b.Recv(leaders[static_cast<size_t>(li) - 1], 0, all);
    if (li + 1 < static_cast<int>(leaders.size())) {
      b.Send(leaders[static_cast<size_t>(li) + 1], 0, src, {got}, DepMode::kPerChunk);
    }
  }
  const int p = IndexOf(chain, a.rank);
  if (p > 0) got = b.Recv(chain[static_cast<size_t>(p) - 1], 0, all);
  if (p + 1 < static_cast<int>(chain.size())) {
    b.Send(chain[static_cast<size_t>(p) + 1], 0, src, {got}, DepMode::kPerChunk);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
