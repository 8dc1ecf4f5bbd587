#include "common/query_escape.h"

#include <gtest/gtest.h>

#include <string>

namespace kubicle {
namespace {

TEST(QueryEscapeTest, KeepsUnreservedAndEncodesEverythingElse) {
  EXPECT_EQ(QueryEscape("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(QueryEscape("kubicle.dev/run=r 1"), "kubicle.dev%2Frun%3Dr%201");
  EXPECT_EQ(QueryEscape("a&b+c?d#e%f,!(x)"), "a%26b%2Bc%3Fd%23e%25f%2C%21%28x%29");
  EXPECT_EQ(QueryEscape(""), "");
}

TEST(QueryEscapeTest, KeepsWhatTheCallerNames) {
  EXPECT_EQ(QueryEscape("kubicle.dev/run=r 1", "/"), "kubicle.dev/run%3Dr%201");
  EXPECT_EQ(QueryEscape("/tmp/a b", "/"), "/tmp/a%20b");
}

TEST(QueryEscapeTest, EncodesEveryByteAboveAsciiAndControlBytes) {
  EXPECT_EQ(QueryEscape("\xc3\xa9"), "%C3%A9");  // UTF-8 é
  EXPECT_EQ(QueryEscape(std::string("a\0b\n", 4)), "a%00b%0A");
  EXPECT_EQ(QueryEscape("\xff"), "%FF");
}

}  // namespace
}  // namespace kubicle
