// All-reduce, ring: reduce-scatter then all-gather around a ring, n segments
// per channel part, recv-reduce-send / recv-copy-send steps pipelined chunk
// by chunk; odd channels run the ring backwards. 2n-1 steps per channel;
// bandwidth-optimal (each rank sends 2(n-1)/n of the vector).
// In place: it works in the output buffer and reads every input element
// once before its output element is written (the same memory), so in
// place needs no copy.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllReduceRing(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const auto [base, len] = EvenPart(0, a.count, nch, c);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(a.rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto seg = [&, base = base, len = len](int s) { return EvenPart(base, len, n, Mod(s, n)); };
    // writer[s]: the reduce-scatter step that last touched segment s, which
    // the all-gather step overwriting it must follow (in place: the first
    // send reads input segment p, the output segment p it aliases).
    std::vector<int> writer(n, -1);
    writer[p] = b.Send(next, c, In(seg(p)));
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p - j, n);
      // j == n-1 completes segment p+1 and starts the all-gather with it.
      writer[s] = b.RecvReduceSend(prev, next, c, In(seg(s)), Out(seg(s)));
    }
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p + 1 - j, n);
      if (j < n - 1) {
        b.RecvCopySend(prev, next, c, Out(seg(s)), {writer[s]});
      } else {
        b.Recv(prev, c, Out(seg(s)), {writer[s]});
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
