// Reduce, binomial tree; non-roots accumulate in scratch (they have no
// output), the root in its output, pipelined chunk by chunk. In place
// (root): each chunk of input is read by the step that writes the same
// output chunk.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status ReduceBinomial(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, root = a.root;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int vr = Mod(a.rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  // Children vr + 2^k for the low zero bits of vr, then the parent.
  std::vector<int> kids;
  int parent = -1;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      parent = at(vr - mask);
      break;
    }
    if (vr + mask < n) kids.push_back(at(vr + mask));
  }
  const BufKind acc_buf = parent < 0 ? BufKind::kOutput : BufKind::kScratch;
  if (parent >= 0 && !kids.empty()) b.Scratch(a.count);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    const Range acc{acc_buf, off, len};
    if (kids.empty()) {
      b.Send(parent, c, In(off, len));
      continue;
    }
    Range src = In(off, len);
    int prev = -1;
    for (size_t i = 0; i < kids.size(); ++i) {
      if (i + 1 == kids.size() && parent >= 0) {
        prev = b.RecvReduceSend(kids[i], parent, c, src, acc, {prev}, DepMode::kPerChunk);
      } else {
        prev = b.RecvReduce(kids[i], c, src, acc, {prev}, DepMode::kPerChunk);
      }
      src = acc;
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
