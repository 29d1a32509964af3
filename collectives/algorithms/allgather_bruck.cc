// All-gather, Bruck: ceil(log2 n) rounds; in round k (d = 2^k) a rank sends
// the min(d, n - d) blocks it holds to rank - d and receives as many from
// rank + d. Blocks are held in a rotated order in scratch (position j holds
// block rank + j), where every round's blocks are contiguous; a last local
// rotation puts them in rank order into the output. Log-depth, so it wins
// for small blocks on many ranks; every block still travels once per rank.
// In place: the input (block `rank` of the output) is copied into scratch
// first, and the output is written only by the final rotation.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllGatherBruck(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks;
  const size_t count = a.count, nc = static_cast<size_t>(n);
  b.Scratch(nc * count);
  std::vector<int> held = {b.Copy(In(0, count), Scr(0, count))};  // steps that filled scratch so far
  for (int d = 1; d < n; d *= 2) {
    const size_t m = static_cast<size_t>(std::min(d, n - d));
    b.Send(Mod(a.rank - d, n), 0, Scr(0, m * count), held);
    held.push_back(b.Recv(Mod(a.rank + d, n), 0, Scr(static_cast<size_t>(d) * count, m * count), held));
  }
  // Position j holds block rank + j: positions [0, n - rank) go to blocks
  // [rank, n), the rest to blocks [0, rank).
  const size_t r = static_cast<size_t>(a.rank);
  b.Copy(Scr(0, (nc - r) * count), Out(r * count, (nc - r) * count), held);
  if (r > 0) b.Copy(Scr((nc - r) * count, r * count), Out(0, r * count), held);
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
