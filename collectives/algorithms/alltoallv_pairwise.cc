// All-to-all-v, pairwise: this rank's block for peer p (its own counts and
// displacements) goes to p, p's block for it arrives where its receive
// displacement says, each pair exchanging one message (of 0 elements where
// a count is 0, so every rank's schedule matches its peers' whatever the
// counts); its own block is copied. Never in place.
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllToAllvPairwise(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, r = a.rank;
  const size_t* sc = &a.counts[0];
  const size_t* sd = &a.counts[static_cast<size_t>(n)];
  const size_t* rc = &a.counts[2 * static_cast<size_t>(n)];
  const size_t* rd = &a.counts[3 * static_cast<size_t>(n)];
  // An empty block's displacement may point anywhere (the buffers' extents
  // cover the non-empty blocks only): its range starts at 0.
  auto at = [](size_t displ, size_t count) { return count == 0 ? 0 : displ; };
  b.Copy(In(at(sd[r], sc[r]), sc[r]), Out(at(rd[r], rc[r]), rc[r]));
  for (int i = 1; i < n; ++i) {
    const int to = Mod(r + i, n);
    b.Send(to, 0, In(at(sd[to], sc[to]), sc[to]));
  }
  for (int i = 1; i < n; ++i) {
    const int from = Mod(r - i, n);
    b.Recv(from, 0, Out(at(rd[from], rc[from]), rc[from]));
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
