// Barrier, dissemination: ceil(log2 n) rounds of count-0 messages to
// rank + 2^k.
#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status BarrierDissemination(const CollectiveArgs& a, Builder& b) {
  int prev = -1;
  for (int d = 1; d < a.nranks; d <<= 1) {
    // Round k tells rank+2^k that we (and, transitively, the 2^k ranks
    // before us) arrived; it may start only after round k-1 was heard.
    b.Send(Mod(a.rank + d, a.nranks), 0, Scr(0, 0), {prev});
    prev = b.Recv(Mod(a.rank - d, a.nranks), 0, Scr(0, 0), {prev});
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
