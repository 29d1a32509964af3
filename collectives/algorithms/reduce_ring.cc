// Reduce, ring: a ring reduce-scatter into scratch (the root: its output),
// then every rank sends its reduced segment straight to the root. For large
// messages.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status ReduceRing(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks, root = a.root;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const bool is_root = rank == root;
  const BufKind acc_buf = is_root ? BufKind::kOutput : BufKind::kScratch;
  if (!is_root) b.Scratch(a.count);
  for (int c = 0; c < nch; ++c) {
    const auto [base, len] = EvenPart(0, a.count, nch, c);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto seg = [&, base = base, len = len](int s) { return EvenPart(base, len, n, Mod(s, n)); };
    auto acc = [&](int s) { return Range{acc_buf, seg(s).first, seg(s).second}; };
    std::vector<int> writer(n, -1);
    writer[p] = b.Send(next, c, In(seg(p)));
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p - j, n);
      if (j < n - 1) {
        writer[s] = b.RecvReduceSend(prev, next, c, In(seg(s)), acc(s));
      } else {
        writer[s] = b.RecvReduce(prev, c, In(seg(s)), acc(s));  // s == p+1: fully reduced here
      }
    }
    const int owned = Mod(p + 1, n);
    if (!is_root) {
      b.Send(root, c, acc(owned), {writer[owned]});
    } else {
      for (int q = 0; q < n; ++q) {
        if (q == rank) continue;
        const int s = Mod(ring.Pos(q) + 1, n);
        b.Recv(q, c, Out(seg(s)), {writer[s]});
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
