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
  const Range acc = root ? Out(0, n) : Scr(0, n);
  const Range in = In(0, n);
  const int p = IndexOf(chain, a.rank);
  if (p > 0) {  // inside the host, towards its leader
    const int to = chain[static_cast<size_t>(p) - 1];
    if (p + 1 == m) {
      b.Send(to, 0, in);
    } else {
      b.Scratch(n);
      b.RecvReduceSend(chain[static_cast<size_t>(p) + 1], to, 0, in, acc, {}, DepMode::kPerChunk);
    }
    return Status::Ok();
  }
  // The leader: its host's partial, then the leaders' chain.
  int host_sum = -1;
  Range partial = in;
  if (m > 1) {
    host_sum = b.RecvReduce(chain[1], 0, in, acc, {}, DepMode::kPerChunk);
    partial = acc;
  }
  const int li = IndexOf(leaders, a.rank);
  const int nl = static_cast<int>(leaders.size());
  if (!root && (m > 1 || li + 1 < nl)) b.Scratch(n);
  if (li + 1 < nl) {
    const int from = leaders[static_cast<size_t>(li) + 1];
    if (root) {
      b.RecvReduce(from, 0, partial, acc, {host_sum}, DepMode::kPerChunk);
    } else {
      b.RecvReduceSend(from, leaders[static_cast<size_t>(li) - 1], 0, partial, acc, {host_sum}, DepMode::kPerChunk);
    }
  } else if (!root) {
    b.Send(leaders[static_cast<size_t>(li) - 1], 0, partial, {host_sum}, DepMode::kPerChunk);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
