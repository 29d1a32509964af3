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

namespace ciuic::collectives::generators {

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
    std::vector<std::pair<size_t, size_t>> runs;
    for (int t : offsets) {
      const size_t p = pos(t);
      if (!runs.empty() && runs.back().first + runs.back().second == p) {
        ++runs.back().second;
      } else {
        runs.emplace_back(p, 1);
      }
    }
    return runs;
  }
  // The most blocks one message across any dimension carries.
  size_t LargestMessage() const { return k_ == 0 ? 0 : Holders(0).size(); }
  bool PowerOfTwo() const { return (1 << k_) == n_; }

 private:
  int n_;
  int k_ = 0;
  std::vector<int> order_;
  std::vector<size_t> pos_;
};

}  // namespace ciuic::collectives::generators

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_PAT_LAYOUT_H_
