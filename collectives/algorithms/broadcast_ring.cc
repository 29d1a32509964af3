// Broadcast, ring: a pipelined chain root -> root+1 -> ... (backwards on odd
// channels) with recv-copy-send steps; for large messages. The root copies
// its input to its output (a no-op in place).
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status BroadcastRing(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, root = a.root;
  const int nch = b.UseChannels(a.count, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, a.count, nch, c);
    const bool backward = c % 2 == 1;
    const int pos = backward ? Mod(root - a.rank, n) : Mod(a.rank - root, n);
    auto at = [&](int q) { return backward ? Mod(root - q, n) : Mod(root + q, n); };
    if (pos == 0) {
      b.Copy(In(oc), Out(oc));
      b.Send(at(1), c, In(oc));
    } else if (pos < n - 1) {
      b.RecvCopySend(at(pos - 1), at(pos + 1), c, Out(oc));
    } else {
      b.Recv(at(pos - 1), c, Out(oc));
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
