#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <string>

#include "common/hex.h"
#include "common/sha256.h"

namespace kubicle {
namespace {

constexpr char kAbc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

TEST(HexTest, EncodesAndDecodesLowerCaseOnly) {
  EXPECT_EQ(HexEncode(std::string_view("\x00\x7f\xff", 3)), "007fff");
  EXPECT_EQ(HexEncode(std::string_view()), "");
  std::array<uint8_t, 3> out{};
  ASSERT_TRUE(HexDecode("007fff", out));
  EXPECT_EQ(out, (std::array<uint8_t, 3>{0x00, 0x7f, 0xff}));
  for (const char* bad : {"007FFF", "007ff", "007fff0", "00 7ff", "0g7fff"})
    EXPECT_FALSE(HexDecode(bad, out)) << bad;
}

TEST(Sha256Test, MatchesTheStandardVectorsStreamedOrWhole) {
  EXPECT_EQ(Sha256Hex("abc"), kAbc);
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("a");
  h.Update("");
  h.Update("bc");
  EXPECT_EQ(h.FinalHex(), kAbc);
  h.Update("abc");  // starts over after Final
  EXPECT_EQ(h.FinalHex(), kAbc);
  const std::string path = ::testing::TempDir() + "/sha256-abc";
  std::ofstream(path) << "abc";
  auto file = Sha256FileHex(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*file, kAbc);
  EXPECT_FALSE(Sha256FileHex(path + ".missing").ok());
}

TEST(Sha256Test, Sha256HexShapeAndConstantTimeEqual) {
  EXPECT_TRUE(IsSha256Hex(kAbc));
  EXPECT_FALSE(IsSha256Hex(std::string(kAbc).substr(1)));
  EXPECT_FALSE(IsSha256Hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abcd"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
}

}  // namespace
}  // namespace kubicle
