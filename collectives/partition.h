// Splitting work into contiguous parts: the even split every schedule
// generator uses for segments, and a weighted split that minimises the
// largest part (for uneven links, layers, tensors of a fusion bucket).
//
// Written to become public as is (no private types). Thread contract: pure
// functions, callable from any thread.
#ifndef CIUIC_COLLECTIVES_PARTITION_H_
#define CIUIC_COLLECTIVES_PARTITION_H_

#include <cstddef>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::collectives {

// Start of part `i` (0 <= i <= parts) when `count` items are split into
// `parts` contiguous parts whose sizes differ by at most one, the first
// `count % parts` parts being the larger ones. EvenSplitOffset(c, p, p) == c.
// `parts` must be >= 1 (not checked: use EvenSplit for checked input).
inline size_t EvenSplitOffset(size_t count, size_t parts, size_t i) {
  const size_t base = count / parts;
  const size_t extra = count % parts;
  return i * base + (i < extra ? i : extra);
}

// The parts+1 boundaries of the even split above: b[0] = 0, b[parts] =
// count, part i = [b[i], b[i+1]). Errors: kInvalidArgument when parts < 1.
StatusOr<std::vector<size_t>> EvenSplit(size_t count, int parts);

// Splits items 0..n-1 with the given costs into `parts` contiguous parts
// minimising the largest part cost, where a part's cost is the sum of its
// items' costs added left to right in double precision (so the optimum is
// exact for that definition, rounding included). Returns parts+1
// boundaries b[0] = 0 <= b[1] <= ... <= b[parts] = n; part i is
// [b[i], b[i+1]). Among optimal splits it returns the greedy one: every part
// but the last ones is filled as far as the optimum allows, so trailing
// parts may be empty when n < parts or costs are lumpy.
// O(n * 64) time (a binary search over the bit patterns of the answer).
// Errors: kInvalidArgument when parts < 1 or a cost is negative, NaN or
// infinite (the message names the index).
StatusOr<std::vector<size_t>> PartitionMinMax(const std::vector<double>& costs, int parts);

// The largest part cost of `boundaries` over `costs` (same summation as
// PartitionMinMax). Boundaries must be valid for costs (not checked beyond
// bounds: out-of-range boundaries are clamped).
double MaxPartCost(const std::vector<double>& costs, const std::vector<size_t>& boundaries);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_PARTITION_H_
