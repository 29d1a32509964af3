// Broadcast, binomial tree: ceil(log2 n) rounds, for small messages; a rank
// forwards chunk by chunk (kPerChunk) as it receives.
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status BroadcastBinomial(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, root = a.root;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int vr = Mod(a.rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, a.count, nch, c);
    int rcv = -1;
    Range src = In(oc);
    if (vr == 0) b.Copy(In(oc), Out(oc));
    int mask = 1;
    for (; mask < n; mask <<= 1) {
      if (vr & mask) {  // parent: vr without its lowest set bit
        rcv = b.Recv(at(vr - mask), c, Out(oc));
        src = Out(oc);
        break;
      }
    }
    for (int m = mask >> 1; m > 0; m >>= 1) {
      if (vr + m < n) b.Send(at(vr + m), c, src, {rcv}, DepMode::kPerChunk);
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
