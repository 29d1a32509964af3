// All-reduce generators: ring, double binary tree, recursive doubling,
// Rabenseifner. See algorithms.h for what each guarantees.
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/schedule_builder.h"

namespace ciuic::collectives {
namespace {

using internal::Builder;
using internal::EffectiveChannels;
using internal::EvenPart;
using internal::In;
using internal::Mod;
using internal::Out;
using internal::Ring;

constexpr DepMode kPerChunk = DepMode::kPerChunk;

// The in-order binary tree over positions 0..n-1: the root of an interval is
// its position with the most trailing zero bits (position 0 for any interval
// starting at 0), so odd positions are always leaves and even positions
// >= 2 always have a child. Position 0 is the root with the single child
// that roots [1, n).
struct TreeNode {
  int parent = -1;
  std::vector<int> children;
};

int IntervalRoot(int lo, int hi) {  // [lo, hi), lo < hi
  if (lo == 0) return 0;
  for (int bit = 30; bit >= 0; --bit) {
    const int m = ((hi - 1) >> bit) << bit;
    if (m >= lo) return m;
  }
  return lo;
}

int BuildTree(int lo, int hi, int parent, std::vector<TreeNode>& t) {
  if (lo >= hi) return -1;
  const int m = IntervalRoot(lo, hi);
  t[m].parent = parent;
  const int left = BuildTree(lo, m, m, t);
  const int right = BuildTree(m + 1, hi, m, t);
  if (left >= 0) t[m].children.push_back(left);
  if (right >= 0) t[m].children.push_back(right);
  return m;
}

// Where the operand currently lives in the recursive doubling / Rabenseifner
// generators.
Range At(BufKind buf, size_t offset, size_t count) { return Range{buf, offset, count}; }

// Largest power of two <= n.
int FloorPow2(int n) {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

}  // namespace

StatusOr<Schedule> AllReduceRing(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllReduceRing", rank, n, nchannels));
  Builder b("allreduce", "ring", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  for (int c = 0; c < nch; ++c) {
    const auto [base, len] = EvenPart(0, count, nch, c);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto seg = [&, base = base, len = len](int s) { return EvenPart(base, len, n, Mod(s, n)); };
    // writer[s]: the reduce-scatter step that last touched segment s, which
    // the all-gather step overwriting it must follow (in-place: the first
    // send reads input segment p, the output segment p it aliases).
    std::vector<int> writer(n, -1);
    writer[p] = b.Send(next, c, In(seg(p)));
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p - j, n);
      // j == n-1 completes segment p+1 and starts the all-gather with it.
      writer[s] = b.RecvReduceSend(prev, next, c, In(seg(s)), Out(seg(s)));
    }
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p + 1 - j, n);
      if (j < n - 1) {
        b.RecvCopySend(prev, next, c, Out(seg(s)), {writer[s]});
      } else {
        b.Recv(prev, c, Out(seg(s)), {writer[s]});
      }
    }
  }
  return b.Take();
}

StatusOr<Schedule> AllReduceDoubleBinaryTree(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllReduceDoubleBinaryTree", rank, n, nchannels));
  Builder b("allreduce", "tree", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  // Two trees x nch channels; each part gets an element where possible.
  const int nch = std::max(1, static_cast<int>(std::min<size_t>(static_cast<size_t>(nchannels), count / 2)));
  const int nparts = 2 * nch;
  b.Channels(nparts);
  std::vector<TreeNode> tree(n);
  BuildTree(0, n, -1, tree);
  for (int t = 0; t < 2; ++t) {
    // Tree 1 mirrors tree 0 (even n) or shifts it by one (odd n), so that
    // the odd positions (leaves) of one are interior ranks in the other.
    auto pos_of = [&](int r) { return t == 0 ? r : (n % 2 == 0 ? n - 1 - r : Mod(r - 1, n)); };
    auto rank_at = [&](int q) { return t == 0 ? q : (n % 2 == 0 ? n - 1 - q : Mod(q + 1, n)); };
    const TreeNode& node = tree[pos_of(rank)];
    const int parent = node.parent >= 0 ? rank_at(node.parent) : -1;
    std::vector<int> kids;
    for (int k : node.children) kids.push_back(rank_at(k));
    for (int c = 0; c < nch; ++c) {
      const int part = t * nch + c;
      const auto oc = EvenPart(0, count, nparts, part);
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
  return b.Take();
}

StatusOr<Schedule> AllReduceRecursiveDoubling(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllReduceRecursiveDoubling", rank, n, nchannels));
  Builder b("allreduce", "recdoubling", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  b.Scratch(count);
  const int p = FloorPow2(n);
  const int extra = n - p;  // ranks 0..2*extra-1 fold in pairs
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, count, nch, c);
    auto R = [off = off, len = len](BufKind k) { return At(k, off, len); };
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
    if (cur != BufKind::kOutput) b.Copy(R(cur), R(BufKind::kOutput), last, kPerChunk);
  }
  return b.Take();
}

StatusOr<Schedule> AllReduceRabenseifner(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllReduceRabenseifner", rank, n, nchannels));
  Builder b("allreduce", "rabenseifner", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  const int p = FloorPow2(n);
  const int extra = n - p;
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, count, nch, c);
    // Segments lo..hi-1 of the p-way split of this part.
    auto W = [off = off, len = len, p](BufKind k, int lo, int hi) {
      const size_t a = EvenSplitOffset(len, p, lo), e = EvenSplitOffset(len, p, hi);
      return At(k, off + a, e - a);
    };
    std::vector<int> last;
    BufKind cur = BufKind::kInput;
    int vr;
    if (rank < 2 * extra) {
      if (rank % 2 == 0) {
        const int s = b.Send(rank + 1, c, W(BufKind::kInput, 0, p));
        b.Recv(rank + 1, c, W(BufKind::kOutput, 0, p), {s}, kPerChunk);
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
  return b.Take();
}

}  // namespace ciuic::collectives
