#include "collectives/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace ciuic::collectives {
namespace {

// Non-negative doubles order like their bit patterns read as integers, so a
// binary search over the integers finds the smallest feasible double exactly.
uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double FromBits(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

// Fewest parts whose costs are all <= limit, filling each part greedily;
// `boundaries` (optional) gets their starts plus n. Every single cost must
// be <= limit.
size_t GreedyParts(const std::vector<double>& costs, double limit, std::vector<size_t>* boundaries) {
  if (boundaries) boundaries->assign(1, 0);
  if (costs.empty()) return 0;
  size_t parts = 1;
  double sum = 0.0;
  for (size_t i = 0; i < costs.size(); ++i) {
    const double next = sum + costs[i];
    if (next <= limit) {
      sum = next;
      continue;
    }
    ++parts;
    if (boundaries) boundaries->push_back(i);
    sum = 0.0 + costs[i];  // the same rounding as a part that starts here
  }
  if (boundaries) boundaries->push_back(costs.size());
  return parts;
}

}  // namespace

StatusOr<std::vector<size_t>> EvenSplit(size_t count, int parts) {
  if (parts < 1) {
    return InvalidArgumentError("EvenSplit: parts must be >= 1, got " + std::to_string(parts));
  }
  std::vector<size_t> b(static_cast<size_t>(parts) + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = EvenSplitOffset(count, parts, i);
  return b;
}

StatusOr<std::vector<size_t>> PartitionMinMax(const std::vector<double>& costs, int parts) {
  if (parts < 1) {
    return InvalidArgumentError("PartitionMinMax: parts must be >= 1, got " + std::to_string(parts));
  }
  double lo = 0.0;
  double total = 0.0;
  for (size_t i = 0; i < costs.size(); ++i) {
    const double c = costs[i];
    if (!(c >= 0.0) || std::isinf(c)) {
      return InvalidArgumentError("PartitionMinMax: cost[" + std::to_string(i) + "] = " +
                                  std::to_string(c) + " is not a finite non-negative number");
    }
    if (c > lo) lo = c;
    total += c;
  }
  const size_t p = static_cast<size_t>(parts);
  std::vector<size_t> b;
  if (costs.empty()) {
    b.assign(p + 1, 0);
    return b;
  }
  // The whole range in one part (cost `total`) is always feasible; the answer
  // is at least the largest single cost. Positive zero: -0.0 has the sign bit.
  uint64_t lo_bits = Bits(lo + 0.0);
  uint64_t hi_bits = Bits(total + 0.0);
  if (hi_bits < lo_bits) hi_bits = lo_bits;  // cannot happen (sum >= max), be safe
  while (lo_bits < hi_bits) {
    const uint64_t mid = lo_bits + (hi_bits - lo_bits) / 2;
    if (GreedyParts(costs, FromBits(mid), nullptr) <= p) {
      hi_bits = mid;
    } else {
      lo_bits = mid + 1;
    }
  }
  GreedyParts(costs, FromBits(hi_bits), &b);
  while (b.size() < p + 1) b.push_back(costs.size());
  return b;
}

double MaxPartCost(const std::vector<double>& costs, const std::vector<size_t>& boundaries) {
  double worst = 0.0;
  for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
    const size_t begin = std::min(boundaries[i], costs.size());
    const size_t end = std::min(boundaries[i + 1], costs.size());
    double sum = 0.0;
    for (size_t j = begin; j < end; ++j) sum += costs[j];
    if (sum > worst) worst = sum;
  }
  return worst;
}

}  // namespace ciuic::collectives
