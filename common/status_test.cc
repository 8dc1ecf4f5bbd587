#include "common/status.h"

#include <gtest/gtest.h>

namespace kubicle {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Status::NotFound("kernel /x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "NotFound: kernel /x");
  EXPECT_EQ(s.WithContext("boot").message(), "boot: kernel /x");
}

TEST(StatusTest, FromErrnoMapsCode) {
  Status s = Status::FromErrno("open /nope", ENOENT);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.error_number(), ENOENT);
  EXPECT_NE(s.message().find("open /nope"), std::string::npos);
}

TEST(ResultTest, PropagatesThroughMacros) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(7).status().message(), "odd");
}

TEST(ResultTest, OkStatusIsNotAValue) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kubicle
