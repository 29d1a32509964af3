// All-reduce, Rabenseifner: reduce-scatter by recursive halving, then
// all-gather by recursive doubling (non-powers of two folded as in
// recursive doubling). Works in the output buffer; each element is reduced
// once, by its owner. In place: an input element is read (first halving
// round) before its output element is written, and never after.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

using internal::FloorPow2;

Status AllReduceRabenseifner(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int p = FloorPow2(n);
  const int extra = n - p;
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    // Segments lo..hi-1 of the p-way split of this part.
    auto W = [off = off, len = len, p](BufKind k, int lo, int hi) {
      const size_t s = EvenSplitOffset(len, p, lo), e = EvenSplitOffset(len, p, hi);
      return Span(k, off + s, e - s);
    };
    std::vector<int> last;
    BufKind cur = BufKind::kInput;
    int vr;
    if (rank < 2 * extra) {
      if (rank % 2 == 0) {
        const int s = b.Send(rank + 1, c, W(BufKind::kInput, 0, p));
        b.Recv(rank + 1, c, W(BufKind::kOutput, 0, p), {s}, DepMode::kPerChunk);
        continue;
      }
      last = {b.RecvReduce(rank - 1, c, W(BufKind::kInput, 0, p), W(BufKind::kOutput, 0, p))};
      cur = BufKind::kOutput;
      vr = rank / 2;
    } else {
      vr = rank - extra;
    }
    auto peer_of = [extra](int pvr) { return pvr < extra ? 2 * pvr + 1 : pvr + extra; };
    // Reduce-scatter by recursive halving: keep the half holding our
    // segment, send the other; after log2(p) rounds we own segment vr.
    int lo = 0, hi = p;
    for (int d = p / 2; d >= 1; d /= 2) {
      const int peer = peer_of(vr ^ d);
      const int mid = (lo + hi) / 2;
      const bool upper = (vr & d) != 0;
      const int klo = upper ? mid : lo, khi = upper ? hi : mid;
      const int slo = upper ? lo : mid, shi = upper ? mid : hi;
      const int snd = b.Send(peer, c, W(cur, slo, shi), last);
      const int rr = b.RecvReduce(peer, c, W(cur, klo, khi), W(BufKind::kOutput, klo, khi), last);
      cur = BufKind::kOutput;
      last = {snd, rr};
      lo = klo;
      hi = khi;
    }
    // All-gather by recursive doubling of the owned window.
    for (int d = 1; d < p; d *= 2) {
      const int peer = peer_of(vr ^ d);
      const int plo = (vr & d) ? lo - d : hi, phi = plo + d;
      const int snd = b.Send(peer, c, W(BufKind::kOutput, lo, hi), last);
      const int rcv = b.Recv(peer, c, W(BufKind::kOutput, plo, phi), last);
      last = {snd, rcv};
      lo = std::min(lo, plo);
      hi = std::max(hi, phi);
    }
    if (rank < 2 * extra) b.Send(rank - 1, c, W(BufKind::kOutput, 0, p), last);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
