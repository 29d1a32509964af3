// All-gather, PAT (NCCL's Parallel Aggregated Trees): each block is
// broadcast along a binomial tree rooted at its owner, all n trees
// translates of one another and each dimension's traffic aggregated into
// one message. Across dimension e a rank sends blocks it holds to rank -
// 2^e and receives as many from rank + 2^e: ceil(log2 n) messages like
// Bruck's, but far first, so the largest message goes to the nearest peer
// and one block to the farthest, which is what PAT changes on large
// fabrics. Scratch keeps blocks in the bit-reversed order of pat_layout.h,
// so a received set lands in one range and a sent set is one or two runs
// (two are packed into a send area); each received block is copied to the
// output as soon as it lands, overlapping the later rounds.
//
// With CollectiveArgs::aggregation = A (PatGroups), group 0 runs that
// exchange among its blocks across the high dimensions, then the other
// groups come one message each, in preorder with far children first (NCCL's
// order), through one scratch region per low dimension: at most A blocks
// per message, about A x (log2(N / A) + 2) blocks of scratch, log2 A + N/A
// - 1 messages (fewer where groups are empty). A region is received into
// again only after its last occupant was forwarded and copied out; by
// induction on the order no receive waits for a send that is not earlier.
//
// In place: the input (block `rank` of the output) is read only by the
// first copies, and the output is written only by copies of the other
// blocks (the own copy is a no-op in place).
#include <vector>

#include "collectives/algorithms/generators.h"
#include "collectives/algorithms/pat_layout.h"

namespace ciuic::collectives::generators {

Status AllGatherPat(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, rank = a.rank;
  const size_t count = a.count;
  const PatGroups pg = PatGroups::For(a);
  const PatLayout& top = pg.top();
  const int D = pg.groups(), d = pg.group_dims();
  const auto na = static_cast<size_t>(pg.Count(0));
  const size_t pack = pg.SpareBlocks();  // blocks of the send area
  b.Copy(In(0, count), Out(static_cast<size_t>(rank) * count, count));  // a no-op in place
  const int nch = b.UseChannels(count, a.nchannels);
  size_t base = 0;
  for (int c = 0; c < nch; ++c) {
    const auto part = EvenPart(0, count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const size_t po = part.first, pc = part.second;  // lambdas below capture these (not bindings)
    const size_t pack_at = base + na * (1 + static_cast<size_t>(d)) * pc;
    // Group 0's region, then one per group dimension.
    auto region = [&](int g) {
      const int e = g == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(g));
      return base + static_cast<size_t>(e + 1) * na * pc;
    };
    auto out_of = [&](long long t) { return Out(static_cast<size_t>(Mod(rank + t, n)) * count + po, pc); };
    int pack_read = -1;  // the last send out of the send area
    // Sends `runs` of positions of the region at `from` (deps: what wrote
    // it) to `peer`: in place, or packed. Returns the steps that read it.
    auto send_runs = [&](int peer, size_t from, const std::vector<std::pair<size_t, size_t>>& runs,
                         const std::vector<int>& deps) {
      if (runs.size() == 1) return std::vector<int>{b.Send(peer, c, Scr(from + runs[0].first * pc, runs[0].second * pc), deps)};
      std::vector<int> packed;
      size_t at = 0;
      for (const auto& [p, len] : runs) {
        std::vector<int> dd = deps;
        dd.push_back(pack_read);
        packed.push_back(b.Copy(Scr(from + p * pc, len * pc), Scr(pack_at + at * pc, len * pc), dd));
        at += len;
      }
      pack_read = b.Send(peer, c, Scr(pack_at, at * pc), packed);
      packed.push_back(pack_read);
      return packed;
    };
    // Top phase: group 0 (offsets a x D), far first, peers D x 2^e away.
    std::vector<int> held = {b.Copy(In(po, pc), Scr(region(0), pc))};  // what wrote group 0 so far
    for (int e = top.dims() - 1; e >= 0; --e) {
      const long long dist = static_cast<long long>(D) << e;
      send_runs(Mod(rank - dist, n), region(0), top.Runs(top.Holders(e)), held);
      // No deps: the range is written once, and a receive must never wait
      // for this rank's own send (the peer may wait for it to drain).
      const auto [first, len] = top.Children(e);
      const int got = b.Recv(Mod(rank + dist, n), c, Scr(region(0) + first * pc, len * pc));
      held.push_back(got);
      for (size_t i = first; i < first + len; ++i) {
        b.Copy(Scr(region(0) + i * pc, pc), out_of(static_cast<long long>(top.order()[i]) * D), {got});
      }
    }
    // Group phase: group g from its parent's holder across dimension
    // lowbit(g), in preorder, far children first.
    struct Occupant {
      int wrote = -1;          // the receive that filled the region
      std::vector<int> reads;  // the forwards and copies out of it
    };
    std::vector<Occupant> regions(static_cast<size_t>(d));
    const int top_done = d > 0 ? b.Join(held) : -1;
    auto visit = [&](auto& self, int p, int below) -> void {
      for (int e = below - 1; e >= 0; --e) {
        const int g = p + (1 << e);
        if (pg.Count(g) == 0) continue;  // no blocks here or below
        std::vector<int> deps = {p == 0 ? top_done : regions[static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(p)))].wrote};
        const std::vector<int> reads = send_runs(Mod(rank - (1 << e), n), region(p), pg.SentRuns(p, g), deps);
        if (p != 0) {
          auto& r = regions[static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(p)))].reads;
          r.insert(r.end(), reads.begin(), reads.end());
        }
        Occupant& mine = regions[static_cast<size_t>(e)];
        const auto m = static_cast<size_t>(pg.Count(g));
        const std::vector<int> free = mine.reads.empty() ? std::vector<int>{} : std::vector<int>{b.Join(mine.reads)};
        mine.wrote = b.Recv(Mod(rank + (1 << e), n), c, Scr(region(g), m * pc), free);
        mine.reads.clear();
        const std::vector<int> order = pg.Order(g);
        for (size_t i = 0; i < m; ++i) {
          mine.reads.push_back(
              b.Copy(Scr(region(g) + i * pc, pc), out_of(static_cast<long long>(order[i]) * D + g), {mine.wrote}));
        }
        self(self, g, e);
      }
    };
    visit(visit, 0, d);
    base = pack_at + pack * pc;
  }
  b.Scratch(base);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
