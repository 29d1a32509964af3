// All-reduce, double binary tree: two complementary in-order binary trees
// (a rank that is a leaf in one is interior in the other: tree 1 mirrors
// tree 0 for even nranks and shifts it by one for odd), each reducing half
// of the data up to its root and broadcasting it down, pipelined chunk by
// chunk (kPerChunk deps from reduce-up to broadcast-down). Each tree part
// runs on its own channel, so the schedule uses 2 x nchannels channel ids.
// In place: it works in the output buffer; a rank's output part is written
// only after its input part was read (chunk by chunk, identical ranges).
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {
namespace {

constexpr DepMode kPerChunk = DepMode::kPerChunk;

// The in-order binary tree over positions 0..n-1: the root of an interval is
// its position with the most trailing zero bits (position 0 for any interval
// starting at 0), so odd positions are always leaves and even positions
// >= 2 always have a child. Position 0 is the root with the single child
// that roots [1, n).

int IntervalRoot(int lo, int hi) {  // [lo, hi), lo < hi
  if (lo == 0) return 0;
  for (int bit = 30; bit >= 0; --bit) {
    const int m = ((hi - 1) >> bit) << bit;
    if (m >= lo) return m;
  }
  return lo;
}

// Position `pos`'s node, found by descending from [0, n): O(log n), so a
// rank's schedule costs no more to generate at 65,536 ranks than at 8.
TreeLinks NodeAt(int pos, int n) {
  TreeLinks node;
  int lo = 0, hi = n;
  for (;;) {
    const int m = IntervalRoot(lo, hi);
    if (m == pos) {
      if (lo < m) node.children.push_back(IntervalRoot(lo, m));
      if (m + 1 < hi) node.children.push_back(IntervalRoot(m + 1, hi));
      return node;
    }
    node.parent = m;
    if (pos < m) {
      hi = m;
    } else {
      lo = m + 1;
    }
  }
}

}  // namespace

Status AllReduceDoubleBinaryTree(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks;
  // Two trees x nch channels; each part gets an element where possible.
  const int nch = std::max(1, static_cast<int>(std::min<size_t>(static_cast<size_t>(a.nchannels), a.count / 2)));
  const int nparts = 2 * nch;
  b.Channels(nparts);
  for (int t = 0; t < 2; ++t) {
    // Tree 1 mirrors tree 0 (even n) or shifts it by one (odd n), so that
    // the odd positions (leaves) of one are interior ranks in the other.
    auto pos_of = [&](int r) { return t == 0 ? r : (n % 2 == 0 ? n - 1 - r : Mod(r - 1, n)); };
    auto rank_at = [&](int q) { return t == 0 ? q : (n % 2 == 0 ? n - 1 - q : Mod(q + 1, n)); };
    const TreeLinks node = NodeAt(pos_of(a.rank), n);
    const int parent = node.parent >= 0 ? rank_at(node.parent) : -1;
    std::vector<int> kids;
    for (int k : node.children) kids.push_back(rank_at(k));
    for (int c = 0; c < nch; ++c) {
      const int part = t * nch + c;
      const auto oc = EvenPart(0, a.count, nparts, part);
      const Range in = In(oc), out = Out(oc);
      // Up: own input (+) child 0 (+) child 1, chunk by chunk, into the
      // output; the last reduction also forwards to the parent.
      int up;
      if (kids.empty()) {
        up = b.Send(parent, part, in);
      } else {
        Range acc = in;
        int prev = -1;
        for (size_t i = 0; i < kids.size(); ++i) {
          const bool last = i + 1 == kids.size();
          if (last && parent >= 0) {
            prev = b.RecvReduceSend(kids[i], parent, part, acc, out, {prev}, kPerChunk);
          } else {
            prev = b.RecvReduce(kids[i], part, acc, out, {prev}, kPerChunk);
          }
          acc = out;
        }
        up = prev;
      }
      // Down: the root's result overwrites each output chunk once this rank
      // has sent its partial of that chunk up.
      if (parent < 0) {
        for (int k : kids) b.Send(k, part, out, {up}, kPerChunk);
      } else if (kids.empty()) {
        b.Recv(parent, part, out, {up}, kPerChunk);
      } else {
        const int first = b.RecvCopySend(parent, kids[0], part, out, {up}, kPerChunk);
        for (size_t i = 1; i < kids.size(); ++i) b.Send(kids[i], part, out, {first}, kPerChunk);
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
