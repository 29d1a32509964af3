// PAT's shared layout (allgather_pat.cc, reducescatter_pat.cc): a rank
// names the block of rank (r + t) mod n by its offset t, and every rank
// keeps its per-block scratch in the same order of offsets, sorted by
// their k-bit reversal (k = ceil(log2 n)). In that order the blocks that
// cross dimension e in either direction are contiguous on one side (the
// offsets whose lowest set bit is e), and on the other side (the multiples
// of 2^(e+1)) form at most two runs, so messages need no packing on powers
// of two and at most two copies otherwise. docs/design/pat.md has the
// derivation and worked examples.
#ifndef CIUIC_COLLECTIVES_ALGORITHMS_PAT_LAYOUT_H_
#define CIUIC_COLLECTIVES_ALGORITHMS_PAT_LAYOUT_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "collectives/algorithms.h"

namespace ciuic::collectives::generators {

// Maximal runs of consecutive values of `positions` (in order): (first
// position, length).
inline std::vector<std::pair<size_t, size_t>> PatRuns(const std::vector<size_t>& positions) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t p : positions) {
    if (!runs.empty() && runs.back().first + runs.back().second == p) {
      ++runs.back().second;
    } else {
      runs.emplace_back(p, 1);
    }
  }
  return runs;
}

class PatLayout {
 public:
  explicit PatLayout(int n) : n_(n) {
    while ((1 << k_) < n) ++k_;
    pos_.assign(static_cast<size_t>(n), 0);
    for (int key = 0; key < (1 << k_); ++key) {
      int t = 0;
      for (int bit = 0; bit < k_; ++bit) t |= ((key >> bit) & 1) << (k_ - 1 - bit);
      if (t >= n) continue;
      pos_[static_cast<size_t>(t)] = order_.size();
      order_.push_back(t);
    }
  }
  int dims() const { return k_; }
  // Offsets in layout order, and the position of offset t.
  const std::vector<int>& order() const { return order_; }
  size_t pos(int t) const { return pos_[static_cast<size_t>(t)]; }

  // The offsets t that an all-gather sends across dimension e (and a
  // reduce-scatter receives into): multiples of 2^(e+1) with t + 2^e < n,
  // in layout order.
  std::vector<int> Holders(int e) const {
    std::vector<int> out;
    for (int t : order_) {
      if (t % (2 << e) == 0 && t + (1 << e) < n_) out.push_back(t);
    }
    return out;
  }
  // The offsets whose lowest set bit is e (what an all-gather receives
  // across dimension e and a reduce-scatter sends): one contiguous range of
  // positions, (first, count).
  std::pair<size_t, size_t> Children(int e) const {
    size_t first = order_.size(), count = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      const int t = order_[i];
      if (t != 0 && (t & -t) == (1 << e)) {
        first = count == 0 ? i : first;
        ++count;
      }
    }
    return {first, count};
  }
  // Maximal runs of consecutive positions of `offsets` (in layout order):
  // (first position, length).
  std::vector<std::pair<size_t, size_t>> Runs(const std::vector<int>& offsets) const {
    std::vector<size_t> positions;
    positions.reserve(offsets.size());
    for (int t : offsets) positions.push_back(pos(t));
    return PatRuns(positions);
  }
  // The most blocks one message across any dimension carries.
  size_t LargestMessage() const { return k_ == 0 ? 0 : Holders(0).size(); }

 private:
  int n_;
  int k_ = 0;
  std::vector<int> order_;
  std::vector<size_t> pos_;
};

// Bounded aggregation (CollectiveArgs::aggregation = A, a power of two):
// with N = 2^ceil(log2 n), the offsets split into D = N / A groups, t =
// a x D + g. Group 0 (the multiples of D) runs the far-first exchange
// among its nA = ceil(n / D) blocks across the dimensions log2 D and up (a
// PatLayout over a, peers D x 2^e away); every other group g comes in one
// message from its parent g - lowbit(g) across dimension log2 lowbit(g),
// so at most nA <= A blocks travel together and a rank holds one group per
// dimension. Every group keeps its blocks in group 0's order of a (bit
// reversal), restricted to the a < Count(g) it has, which is nA or nA - 1:
// a message is a group's blocks minus at most one, so one or two runs.
// A = 0 (or >= N): D = 1, group 0 is everything (full aggregation).
class PatGroups;

// CollectiveArgs::aggregation 0: full aggregation while n blocks of the
// whole count (its scratch is 1-1.5 x that) fit kPatScratchElements;
// beyond, the largest A whose regions (A x (log2(N/A) + 2) blocks) do, at
// least 1. A function of (n, count) alone, so every rank picks the same A
// (the reduce-scatter's summation order depends on it).
inline constexpr size_t kPatScratchElements = size_t{1} << 24;
inline int PatAutoAggregation(int n, size_t count) {
  if (static_cast<size_t>(n) * count <= kPatScratchElements) return 0;
  int k = 0;
  while ((1 << k) < n) ++k;
  for (int a = k - 1; a >= 1; --a) {
    if ((size_t{1} << a) * count * static_cast<size_t>(k - a + 2) <= kPatScratchElements) return 1 << a;
  }
  return 1;
}

class PatGroups {
 public:
  PatGroups(int n, int aggregation) : n_(n), top_(1) {
    int k = 0;
    while ((1 << k) < n) ++k;
    d_ = 0;
    if (aggregation > 0) {
      while ((1 << d_) * aggregation < (1 << k)) ++d_;
    }
    top_ = PatLayout(Count(0));
    std::vector<size_t> shorter(top_.order().size(), 0);
    size_t i = 0;
    for (int a : top_.order()) {
      if (a < Count(0) - 1) shorter[static_cast<size_t>(a)] = i++;
    }
    pos_short_ = shorter;
  }
  // The groups of a call (aggregation 0: PatAutoAggregation).
  static PatGroups For(const CollectiveArgs& a) {
    return PatGroups(a.nranks, a.aggregation == 0 ? PatAutoAggregation(a.nranks, a.count) : a.aggregation);
  }
  // Blocks of the area a message of two runs is packed into or lands in:
  // none on powers of two, else the largest such message.
  size_t SpareBlocks() const {
    if ((n_ & (n_ - 1)) == 0) return 0;
    return d_ > 0 ? static_cast<size_t>(Count(0)) : top_.LargestMessage();
  }
  int groups() const { return 1 << d_; }
  int group_dims() const { return d_; }  // log2 D
  const PatLayout& top() const { return top_; }
  // The blocks of group g: a < Count(g) (0 for g >= n).
  int Count(int g) const { return g >= n_ ? 0 : (n_ - g + groups() - 1) / groups(); }
  // Group g's blocks in order (values of a), and the position of a there.
  std::vector<int> Order(int g) const {
    std::vector<int> out;
    for (int a : top_.order()) {
      if (a < Count(g)) out.push_back(a);
    }
    return out;
  }
  size_t Pos(int g, int a) const {
    return Count(g) == Count(0) ? top_.pos(a) : pos_short_[static_cast<size_t>(a)];
  }
  // Positions in group p's order of the blocks group g (a child of p) gets:
  // runs (first, length).
  std::vector<std::pair<size_t, size_t>> SentRuns(int p, int g) const {
    std::vector<size_t> positions;
    for (int a : Order(g)) positions.push_back(Pos(p, a));
    return PatRuns(positions);
  }

 private:
  int n_;
  int d_ = 0;
  PatLayout top_;
  std::vector<size_t> pos_short_;
};

}  // namespace ciuic::collectives::generators

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_PAT_LAYOUT_H_
