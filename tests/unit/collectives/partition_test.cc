// EvenSplit and PartitionMinMax (optimality against brute force).
#include "collectives/partition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace ciuic::collectives {
namespace {

TEST(EvenSplitTest, SizesDifferByAtMostOneLargerFirst) {
  for (size_t count : {0, 1, 5, 7, 64, 1000}) {
    for (int parts : {1, 2, 3, 7, 16}) {
      auto b = EvenSplit(count, parts);
      ASSERT_TRUE(b.ok());
      ASSERT_EQ(b->size(), static_cast<size_t>(parts) + 1);
      EXPECT_EQ(b->front(), 0u);
      EXPECT_EQ(b->back(), count);
      for (int i = 0; i < parts; ++i) {
        const size_t size = (*b)[i + 1] - (*b)[i];
        EXPECT_TRUE(size == count / parts || size == count / parts + 1);
        if (i > 0) {
          EXPECT_LE(size, (*b)[i] - (*b)[i - 1]);
        }
        EXPECT_EQ((*b)[i], EvenSplitOffset(count, parts, i));
      }
    }
  }
  EXPECT_EQ(EvenSplit(10, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EvenSplit(10, -3).status().code(), StatusCode::kInvalidArgument);
}

// The best max part cost over every way to cut `costs` into `parts`
// contiguous (possibly empty) parts.
double BruteForce(const std::vector<double>& costs, int parts, size_t start = 0) {
  if (parts == 1) return MaxPartCost(costs, {start, costs.size()});
  double best = std::numeric_limits<double>::infinity();
  for (size_t end = start; end <= costs.size(); ++end) {
    const double first = MaxPartCost(costs, {start, end});
    const double rest = BruteForce(costs, parts - 1, end);
    best = std::min(best, std::max(first, rest));
  }
  return best;
}

TEST(PartitionMinMaxTest, OptimalAgainstBruteForce) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> real(0.0, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = rng() % 9;
    const int parts = 1 + static_cast<int>(rng() % 5);
    std::vector<double> costs(n);
    for (auto& c : costs) {
      switch (trial % 3) {
        case 0: c = real(rng); break;                           // non-integer
        case 1: c = static_cast<double>(rng() % 4); break;       // small integers, zeros
        default: c = (rng() % 4 == 0) ? 100.0 : real(rng); break;  // lumpy
      }
    }
    auto b = PartitionMinMax(costs, parts);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(b->size(), static_cast<size_t>(parts) + 1);
    EXPECT_EQ(b->front(), 0u);
    EXPECT_EQ(b->back(), n);
    for (size_t i = 1; i < b->size(); ++i) EXPECT_LE((*b)[i - 1], (*b)[i]);
    EXPECT_EQ(MaxPartCost(costs, *b), BruteForce(costs, parts)) << "trial " << trial;
  }
}

TEST(PartitionMinMaxTest, EdgeCasesAndErrors) {
  auto empty = PartitionMinMax({}, 3);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, (std::vector<size_t>{0, 0, 0, 0}));
  auto one = PartitionMinMax({1, 2, 3}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (std::vector<size_t>{0, 3}));
  auto each = PartitionMinMax({5, 5, 5}, 3);
  ASSERT_TRUE(each.ok());
  EXPECT_EQ(*each, (std::vector<size_t>{0, 1, 2, 3}));
  auto zeros = PartitionMinMax({0, 0, 0, 0}, 2);
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(MaxPartCost({0, 0, 0, 0}, *zeros), 0.0);
  // A large input stays fast (n log(bits)).
  std::vector<double> many(200000, 1.5);
  auto big = PartitionMinMax(many, 7);
  ASSERT_TRUE(big.ok());
  EXPECT_LE(MaxPartCost(many, *big), 1.5 * (200000 / 7 + 1));  // NOLINT(bugprone-integer-division): the mean, rounded up

  EXPECT_EQ(PartitionMinMax({1, 2}, 0).status().code(), StatusCode::kInvalidArgument);
  auto neg = PartitionMinMax({1, -2, 3}, 2);
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("cost[1]"), std::string::npos) << neg.status().ToString();
  EXPECT_EQ(PartitionMinMax({1, std::nan("")}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionMinMax({std::numeric_limits<double>::infinity()}, 2).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ciuic::collectives
