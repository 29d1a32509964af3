// Barrier, hierarchical ("hier"): every rank tells its host's first rank
// it arrived (shm), the leaders run a dissemination barrier across hosts
// (ceil(log2 hosts) rounds), and each leader then releases its host's
// ranks. Messages between hosts: ceil(log2 hosts) per leader, where the
// flat dissemination sends ceil(log2 n) from every rank.
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/host_groups.h"

namespace ciuic::collectives::generators {

Status BarrierHierarchical(const CollectiveArgs& a, Builder& b) {
  const HostGroups g(a);
  const Range none = Scr(0, 0);
  const std::vector<int>& mine = g.mine();
  const int lead = mine[0];
  if (a.rank != lead) {
    const int told = b.Send(lead, 0, none);
    b.Recv(lead, 0, none, {told});
    return Status::Ok();
  }
  std::vector<int> arrived;
  for (size_t k = 1; k < mine.size(); ++k) arrived.push_back(b.Recv(mine[k], 0, none));
  int heard = -1;
  for (int d = 1; d < g.nhosts; d <<= 1) {
    std::vector<int> deps = arrived;
    deps.push_back(heard);
    b.Send(g.On((g.host + d) % g.nhosts)[0], 0, none, deps);
    heard = b.Recv(g.On(Mod(g.host - d, g.nhosts))[0], 0, none, deps);
  }
  std::vector<int> done = arrived;
  done.push_back(heard);
  for (size_t k = 1; k < mine.size(); ++k) b.Send(mine[k], 0, none, done);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
