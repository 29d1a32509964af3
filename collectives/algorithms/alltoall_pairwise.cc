// All-to-all, pairwise exchange: block (r+i)%n of the input goes to rank
// (r+i)%n, block (r-i)%n of the output comes from rank (r-i)%n (rank-major
// blocks of count elements). Every send is issued at once; a block is
// received only chunk by chunk after the same block was sent, which makes
// in place (input == output) safe without scratch.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllToAllPairwise(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const size_t count = a.count;
  const size_t self = static_cast<size_t>(rank) * count;
  b.Copy(In(self, count), Out(self, count));
  const int nch = b.UseChannels(count, a.nchannels);
  // sent[peer][c]: the step sending our block `peer` (input) on channel c;
  // receiving block `peer` (output, the same memory in place) follows it.
  std::vector<std::vector<int>> sent(n, std::vector<int>(nch, -1));
  for (int i = 1; i < n; ++i) {
    const int to = Mod(rank + i, n);
    for (int c = 0; c < nch; ++c) {
      sent[to][c] = b.Send(to, c, In(EvenPart(static_cast<size_t>(to) * count, count, nch, c)));
    }
  }
  for (int i = 1; i < n; ++i) {
    const int from = Mod(rank - i, n);
    for (int c = 0; c < nch; ++c) {
      b.Recv(from, c, Out(EvenPart(static_cast<size_t>(from) * count, count, nch, c)), {sent[from][c]},
             DepMode::kPerChunk);
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
