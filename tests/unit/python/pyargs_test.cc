// The Python API's argument checks (python/src/args.h): buffer formats,
// dtype names and all-to-all splits, as a caller's objects may give them.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "python/src/args.h"

namespace ciuic::pyargs {
namespace {

TEST(PyArgs, FormatsNameTheirType) {
  EXPECT_EQ(FromFormat("f", 4), DataType::kFloat32);
  EXPECT_EQ(FromFormat("<d", 8), DataType::kFloat64);
  EXPECT_EQ(FromFormat("=e", 2), DataType::kFloat16);
  EXPECT_EQ(FromFormat("@B", 1), DataType::kUint8);
  EXPECT_EQ(FromFormat(nullptr, 1), DataType::kUint8);
  EXPECT_EQ(FromFormat("?", 1), DataType::kBool);
  EXPECT_EQ(FromFormat("h", 2), DataType::kInt16);
  // C's long and long long: the item size says which.
  EXPECT_EQ(FromFormat("l", 8), DataType::kInt64);
  EXPECT_EQ(FromFormat("=l", 4), DataType::kInt32);
  EXPECT_EQ(FromFormat("Q", 8), DataType::kUint64);
  EXPECT_EQ(FromFormat("I", 4), DataType::kUint32);
}

TEST(PyArgs, AFormatWhoseItemSizeDisagreesIsRefused) {
  // An exporter may claim any (format, itemsize): read as the format's type,
  // an 8-byte "f" item would be taken for two floats.
  EXPECT_FALSE(FromFormat("f", 8));
  EXPECT_FALSE(FromFormat("d", 4));
  EXPECT_FALSE(FromFormat("b", 2));
  EXPECT_FALSE(FromFormat("e", 4));
  EXPECT_FALSE(FromFormat("?", 0));
  EXPECT_FALSE(FromFormat(nullptr, 4));
  EXPECT_FALSE(FromFormat("i", 2));
  EXPECT_FALSE(FromFormat("Q", -8));
}

TEST(PyArgs, OtherFormatsAreRefused) {
  for (const char* f : {"", "<", ">f", "!f", "ff", "2f", "Zf", "T{f}", "x", "P", "f\x01"}) {
    EXPECT_FALSE(FromFormat(f, 4)) << f;
  }
}

TEST(PyArgs, DtypeNames) {
  EXPECT_EQ(DataTypeByName("bfloat16"), DataType::kBFloat16);
  EXPECT_EQ(DataTypeByName("bf16"), DataType::kBFloat16);
  EXPECT_EQ(DataTypeByName("half"), DataType::kFloat16);
  EXPECT_EQ(DataTypeByName("float8_e4m3fn"), DataType::kFloat8E4M3);
  EXPECT_EQ(DataTypeByName("fp8_e5m2"), DataType::kFloat8E5M2);
  EXPECT_FALSE(DataTypeByName("float8"));
  EXPECT_FALSE(DataTypeByName(std::string("float32\0x", 9)));
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    EXPECT_EQ(DataTypeByName(TypeName(t)), t) << TypeName(t);
  }
}

TEST(PyArgs, EvenSplits) {
  StatusOr<std::vector<size_t>> c = SplitCounts(nullptr, 12, 3, "in_splits", "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<size_t>{4, 4, 4}));
  c = SplitCounts(nullptr, 10, 3, "in_splits", "x");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "x has 10 elements, not a multiple of world_size (3); give in_splits");
}

TEST(PyArgs, GivenSplits) {
  const std::vector<int64_t> ok = {1, 0, 5};
  StatusOr<std::vector<size_t>> c = SplitCounts(&ok, 6, 3, "in_splits", "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<size_t>{1, 0, 5}));
  const std::vector<int64_t> empty;
  EXPECT_EQ(SplitCounts(&empty, 6, 3, "in_splits", "x").status().message(),
            "in_splits has 0 entries, expected world_size (3)");
  const std::vector<int64_t> negative = {1, -1, 6};
  EXPECT_EQ(SplitCounts(&negative, 6, 3, "in_splits", "x").status().message(), "in_splits[1] is negative");
  const std::vector<int64_t> short_sum = {1, 1, 1};
  EXPECT_EQ(SplitCounts(&short_sum, 6, 3, "out_splits", "out", "rows").status().message(),
            "out_splits sum to 3, out has 6 rows");
}

TEST(PyArgs, SplitsThatWrapAroundAreRefused) {
  // Three entries below 2^63 whose sum is 2^64 + 6: a 64-bit sum wraps to
  // the buffer's 6 elements, and each rank's share would lie far outside it.
  const int64_t big = std::numeric_limits<int64_t>::max();  // 2^63 - 1
  const std::vector<int64_t> wraps = {big, big, 8};
  ASSERT_EQ(static_cast<uint64_t>(big) + static_cast<uint64_t>(big) + 8u, 6u);
  StatusOr<std::vector<size_t>> c = SplitCounts(&wraps, 6, 3, "in_splits", "x");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "in_splits sum to more than the 6 elements of x (at entry 0)");
  EXPECT_FALSE(SplitCounts(&wraps, std::numeric_limits<uint64_t>::max(), 3, "in_splits", "x").ok());
}

}  // namespace
}  // namespace ciuic::pyargs
