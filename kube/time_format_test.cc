#include "kube/time_format.h"

#include <gtest/gtest.h>

namespace kubicle::kube {
namespace {

TEST(TimeFormatTest, RoundTrip) {
  TimePoint t = std::chrono::system_clock::from_time_t(1767225600) + std::chrono::microseconds(12);
  EXPECT_EQ(FormatTime(t), "2026-01-01T00:00:00Z");
  EXPECT_EQ(FormatMicroTime(t), "2026-01-01T00:00:00.000012Z");
  auto parsed = ParseTime(FormatMicroTime(t));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, t);
}

TEST(TimeFormatTest, OffsetsAndErrors) {
  auto a = ParseTime("2026-01-01T02:00:00+02:00");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(FormatTime(*a), "2026-01-01T00:00:00Z");
  EXPECT_FALSE(ParseTime("2026-01-01T00:00:00").ok());
  EXPECT_FALSE(ParseTime("yesterday").ok());
  EXPECT_FALSE(ParseTime("2026-01-01T00:00:00Zjunk").ok());
}

}  // namespace
}  // namespace kubicle::kube
