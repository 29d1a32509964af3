// Private: the hosts of a call, for the hierarchical generators. Ranks are
// grouped by args.host_of (without a map every rank is a host of its own);
// each host's ranks in rank order.
#ifndef CIUIC_COLLECTIVES_ALGORITHMS_HOST_GROUPS_H_
#define CIUIC_COLLECTIVES_ALGORITHMS_HOST_GROUPS_H_

#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace ciuic::collectives::generators {

struct HostGroups {
  explicit HostGroups(const CollectiveArgs& a) : host_of(static_cast<size_t>(a.nranks)) {
    for (int r = 0; r < a.nranks; ++r) host_of[static_cast<size_t>(r)] = r;
    if (a.host_of.size() == static_cast<size_t>(a.nranks)) host_of = a.host_of;
    for (int h : host_of) nhosts = std::max(nhosts, h + 1);
    members.resize(static_cast<size_t>(nhosts));
    for (int r = 0; r < a.nranks; ++r) members[static_cast<size_t>(host_of[static_cast<size_t>(r)])].push_back(r);
    host = HostOf(a.rank);
    local = static_cast<int>(std::find(mine().begin(), mine().end(), a.rank) - mine().begin());
  }
  int HostOf(int r) const { return host_of[static_cast<size_t>(r)]; }
  const std::vector<int>& On(int h) const { return members[static_cast<size_t>(h)]; }
  const std::vector<int>& mine() const { return On(host); }
  int size() const { return static_cast<int>(mine().size()); }
  // Who on host h stands for rank r's block (all-gather, reduce-scatter):
  // r itself on its own host, else h's rank of r's local index mod (ranks
  // on h): hosts of equal size pair local index j with j (rails), however
  // the ranks are numbered (round-robin placement too).
  int Agent(int h, int r) const {
    if (HostOf(r) == h) return r;
    const std::vector<int>& from = On(HostOf(r));
    const std::vector<int>& on = On(h);
    const size_t j = static_cast<size_t>(std::find(from.begin(), from.end(), r) - from.begin());
    return on[j % on.size()];
  }
  // The blocks host h's local rank k stands for, ascending.
  std::vector<int> BlocksOf(int h, int k, int nranks) const {
    std::vector<int> out;
    const int who = On(h)[static_cast<size_t>(k)];
    for (int r = 0; r < nranks; ++r) {
      if (Agent(h, r) == who) out.push_back(r);
    }
    return out;
  }
  // Host h's leader for a rooted collective: the root on its host, else
  // the host's first rank.
  int Leader(int h, int root) const { return HostOf(root) == h ? root : On(h)[0]; }
  // Host h's ranks with its leader first (the rest in rank order).
  std::vector<int> LeaderFirst(int h, int root) const {
    const int lead = Leader(h, root);
    std::vector<int> out = {lead};
    for (int r : On(h)) {
      if (r != lead) out.push_back(r);
    }
    return out;
  }
  // The leaders from the root's host on, in host order (wrapping).
  std::vector<int> LeadersFromRoot(int root) const {
    std::vector<int> out(static_cast<size_t>(nhosts));
    for (int i = 0; i < nhosts; ++i) out[static_cast<size_t>(i)] = Leader((HostOf(root) + i) % nhosts, root);
    return out;
  }

  std::vector<int> host_of;
  std::vector<std::vector<int>> members;
  int nhosts = 0;
  int host = 0;   // this rank's
  int local = 0;  // its index on its host
};

// The index of `x` in `v` (v.size() if absent).
inline int IndexOf(const std::vector<int>& v, int x) {
  return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
}

}  // namespace ciuic::collectives::generators

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_HOST_GROUPS_H_
