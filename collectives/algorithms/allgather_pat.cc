// All-gather, PAT (NCCL's Parallel Aggregated Trees, full aggregation):
// each block is broadcast along a binomial tree rooted at its owner, all n
// trees translates of one another and all of a dimension's traffic in one
// message. Across dimension e (e = k-1 down to 0, far first) a rank sends
// the blocks it holds at offsets that are multiples of 2^(e+1) to rank -
// 2^e and receives as many from rank + 2^e: ceil(log2 n) messages like
// Bruck's, but the largest message (about n/2 blocks) goes to the nearest
// peer and one block to the farthest, which is what PAT changes on large
// fabrics. Scratch keeps the blocks in the bit-reversed order of
// pat_layout.h, so a received set lands in one range right after the held
// ones; each received block is copied to the output as soon as it lands,
// overlapping the later rounds. Off powers of two a send may be two runs,
// packed into a send area. In place: the input (block `rank` of the output)
// is read only by the first copies, and the output is written only by
// copies of the other blocks (the own copy is a no-op in place).
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/pat_layout.h"

namespace ciuic::collectives::generators {

Status AllGatherPat(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, rank = a.rank;
  const size_t count = a.count;
  const PatLayout lay(n);
  const size_t nc = static_cast<size_t>(n);
  const size_t pack = lay.PowerOfTwo() ? 0 : lay.LargestMessage();  // blocks of the send area
  b.Copy(In(0, count), Out(static_cast<size_t>(rank) * count, count));  // a no-op in place
  const int nch = b.UseChannels(count, a.nchannels);
  size_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const auto [po, pc] = EvenPart(0, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const size_t pack_at = base + nc * pc;
    auto out_of = [&](int t) { return Out(static_cast<size_t>(Mod(rank + t, n)) * count + po, pc); };
    std::vector<int> held = {b.Copy(In(po, pc), Scr(base, pc))};  // what wrote the held blocks so far
    int pack_read = -1;  // the last send out of the send area
    for (int e = lay.dims() - 1; e >= 0; --e) {
      const int d = 1 << e;
      const std::vector<int> send = lay.Holders(e);
      const auto runs = lay.Runs(send);
      if (runs.size() == 1) {
        b.Send(Mod(rank - d, n), c, Scr(base + runs[0].first * pc, runs[0].second * pc), held);
      } else {
        std::vector<int> packed;
        size_t at = 0;
        for (const auto& [p, len] : runs) {
          std::vector<int> deps = held;
          deps.push_back(pack_read);
          packed.push_back(b.Copy(Scr(base + p * pc, len * pc), Scr(pack_at + at * pc, len * pc), deps));
          at += len;
        }
        pack_read = b.Send(Mod(rank - d, n), c, Scr(pack_at, at * pc), packed);
      }
      // No deps: the range is written once, and a receive must never wait
      // for this rank's own send (the peer may wait for it to drain).
      const auto [first, len] = lay.Children(e);
      const int got = b.Recv(Mod(rank + d, n), c, Scr(base + first * pc, len * pc));
      held.push_back(got);
      for (size_t i = first; i < first + len; ++i) {
        b.Copy(Scr(base + i * pc, pc), out_of(lay.order()[i]), {got});
      }
    }
    base = pack_at + pack * pc;
  }
  b.Scratch(base);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
