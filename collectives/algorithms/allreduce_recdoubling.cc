// All-reduce, recursive doubling: log2(p) rounds exchanging the whole vector
// with rank ^ 2^k (p = largest power of two <= nranks; the first 2(n-p)
// ranks fold in pairs before and unfold after). Every rank reduces the full
// vector, lower rank group first, so the results are identical everywhere.
// Latency-optimal for small vectors. Ping-pongs between output and scratch
// (count elements); in place: the input is only read in the first round,
// and the output is not written before that round's reads are done.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

using internal::FloorPow2;

constexpr DepMode kPerChunk = DepMode::kPerChunk;

Status AllReduceRecursiveDoubling(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  b.Scratch(a.count);
  const int p = FloorPow2(n);
  const int extra = n - p;  // ranks 0..2*extra-1 fold in pairs
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    auto R = [off = off, len = len](BufKind k) { return Span(k, off, len); };
    // Every range of this part is the same (offset, count) in one of three
    // buffers, so kPerChunk deps pipeline the rounds safely.
    std::vector<int> last;
    BufKind cur = BufKind::kInput;
    int vr;
    if (rank < 2 * extra) {
      if (rank % 2 == 0) {  // folded out: contribute, then get the result
        const int s = b.Send(rank + 1, c, R(BufKind::kInput));
        b.Recv(rank + 1, c, R(BufKind::kOutput), {s}, kPerChunk);
        continue;
      }
      const int rcv = b.Recv(rank - 1, c, R(BufKind::kScratch));
      const int red = b.Reduce({R(BufKind::kScratch), R(BufKind::kInput)}, R(BufKind::kScratch), {rcv}, kPerChunk);
      cur = BufKind::kScratch;
      last = {red};
      vr = rank / 2;
    } else {
      vr = rank - extra;
    }
    for (int d = 1; d < p; d <<= 1) {
      const int pvr = vr ^ d;
      const int peer = pvr < extra ? 2 * pvr + 1 : pvr + extra;
      // Receive into the buffer that is not holding the operand (never the
      // input: it is the caller's).
      const BufKind free = cur == BufKind::kScratch ? BufKind::kOutput : BufKind::kScratch;
      const int snd = b.Send(peer, c, R(cur), last, kPerChunk);
      const int rcv = b.Recv(peer, c, R(free), last, kPerChunk);
      int red;
      if (vr < pvr) {  // ours is the lower group: ours (+) theirs
        const BufKind dst = cur == BufKind::kInput ? BufKind::kOutput : cur;
        red = b.Reduce({R(cur), R(free)}, R(dst), {snd, rcv}, kPerChunk);
        cur = dst;
      } else {  // theirs (+) ours, accumulated where theirs arrived
        red = b.Reduce({R(free), R(cur)}, R(free), {snd, rcv}, kPerChunk);
        cur = free;
      }
      last = {snd, rcv, red};
    }
    if (rank < 2 * extra) b.Send(rank - 1, c, R(cur), last, kPerChunk);
    // Every rank ends with this copy, a no-op where the result is already in
    // the output, so all ranks' schedules have one shape (the cost model's
    // symmetric path costs rank 0's alone at scale).
    b.Copy(R(cur), R(BufKind::kOutput), last, kPerChunk);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
