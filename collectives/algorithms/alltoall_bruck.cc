// All-to-all, Bruck: ceil(log2 n) rounds instead of n-1 messages, each
// block forwarded up to log2 n times: it wins for small blocks on many
// ranks. Scratch holds the blocks rotated (position j: the block for rank
// + j); in round d = 2^i every block at a position with bit i set goes to
// rank + d in one message, so after the rounds position j holds the block
// from rank - j, and a last per-block copy puts them in rank order. The
// blocks of one round are not contiguous: runs of them are packed into a
// send area (unless they form one run, as in the last round on n <= 2d)
// and unpacked from a receive area: local copies. In place: the input is
// read only by the first rotation and the output written only by the last
// copies.
#include <algorithm>
#include <utility>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

Status AllToAllBruck(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, rank = a.rank;
  const size_t cnt = a.count, nc = static_cast<size_t>(n), r = static_cast<size_t>(rank);
  // Runs [first, end) of positions in [1, n) with bit d set, per round.
  auto runs_of = [n](long long d) {
    std::vector<std::pair<size_t, size_t>> runs;
    for (long long j = d; j < n; j += 2 * d) runs.emplace_back(j, std::min<long long>(j + d, n));
    return runs;
  };
  size_t most = 0;  // blocks of the largest round
  for (long long d = 1; d < n; d *= 2) {
    size_t blocks = 0;
    for (const auto& [s, e] : runs_of(d)) blocks += e - s;
    most = std::max(most, blocks);
  }
  const size_t pack = nc * cnt, recv = pack + most * cnt;
  b.Scratch(recv + most * cnt);
  std::vector<int> last = {b.Copy(In(r * cnt, (nc - r) * cnt), Scr(0, (nc - r) * cnt))};
  if (r > 0) last.push_back(b.Copy(In(0, r * cnt), Scr((nc - r) * cnt, r * cnt)));
  for (long long d = 1; d < n; d *= 2) {
    const auto runs = runs_of(d);
    // What the unpacking must wait for: the receive, and every read of the
    // positions it overwrites (the send, or the packing copies).
    std::vector<int> sent;
    size_t at = 0;
    if (runs.size() == 1) {
      at = (runs[0].second - runs[0].first) * cnt;
      sent.push_back(b.Send(Mod(rank + d, n), 0, Scr(runs[0].first * cnt, at), last));
    } else {
      for (const auto& [s, e] : runs) {
        sent.push_back(b.Copy(Scr(s * cnt, (e - s) * cnt), Scr(pack + at, (e - s) * cnt), last));
        at += (e - s) * cnt;
      }
      sent.push_back(b.Send(Mod(rank + d, n), 0, Scr(pack, at), sent));
    }
    // Never after our own send: every rank sends first, and a send of
    // several chunks needs its receiver to drain the link.
    sent.push_back(b.Recv(Mod(rank - d, n), 0, Scr(recv, at), last));
    std::vector<int> round = {sent[sent.size() - 2]};  // the send: the next packing overwrites what it reads
    const int received = b.Join(sent);
    at = 0;
    for (const auto& [s, e] : runs) {
      round.push_back(b.Copy(Scr(recv + at, (e - s) * cnt), Scr(s * cnt, (e - s) * cnt), {received}));
      at += (e - s) * cnt;
    }
    last = {b.Join(round)};
  }
  // Position j holds the block from rank - j.
  for (size_t j = 0; j < nc; ++j) {
    const size_t src_rank = static_cast<size_t>(Mod(rank - static_cast<int>(j), n));
    b.Copy(Scr(j * cnt, cnt), Out(src_rank * cnt, cnt), last);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
