#include "ciuic/status.h"

#include <gtest/gtest.h>

namespace ciuic {
namespace {

StatusOr<int> Half(int v) {
  if (v % 2 != 0) return InvalidArgumentError("v: " + std::to_string(v) + " is odd");
  return v / 2;
}

Status UseHalf(int v, int* out) {
  CIUIC_ASSIGN_OR_RETURN(*out, Half(v));
  return Status::Ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = NotFoundError("device mlx5_9");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: device mlx5_9");
  EXPECT_EQ(s.WithContext("open").message(), "open: device mlx5_9");
  EXPECT_STREQ(StatusCodeName(StatusCode::kDeadlineExceeded), "DEADLINE_EXCEEDED");
}

TEST(StatusTest, StatusOrCarriesValueOrError) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseHalf(7, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "v: 7 is odd");
  StatusOr<int> bad = Status::Ok();  // OK without a value is a bug, made visible
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, CopiesAndMovesKeepTheMessage) {
  // OK statuses carry no message; errors own theirs: a copy is independent
  // of its source and a moved-from status is still safe to read.
  Status a = UnavailableError("rank 3 is gone");
  Status b = a;
  EXPECT_EQ(b, a);
  Status c = std::move(a);
  EXPECT_EQ(c.message(), "rank 3 is gone");
  EXPECT_EQ(a.message(), "");  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move): documented safe
  b = Status::Ok();
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(b.message(), "");
  EXPECT_EQ(c.message(), "rank 3 is gone");
  b = c;
  c = DataLossError("other");
  EXPECT_EQ(b.ToString(), "UNAVAILABLE: rank 3 is gone");
  b = b;  // NOLINT(clang-diagnostic-self-assign-overloaded): self-assignment is safe
  EXPECT_EQ(b.message(), "rank 3 is gone");
  EXPECT_EQ(Status(StatusCode::kInternal, "").message(), "");
  EXPECT_FALSE(Status(StatusCode::kInternal, "").ok());
}

}  // namespace
}  // namespace ciuic
