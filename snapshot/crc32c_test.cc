#include "snapshot/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

namespace kubicle::snapshot {
namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(Bytes("")), 0u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros), 0x8A9136AAu);  // RFC 3720 B.4
  std::vector<uint8_t> ones(32, 0xff);
  EXPECT_EQ(Crc32c(ones), 0x62A8AB43u);
}

TEST(Crc32cTest, SoftwareAndHardwareAgreeAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(1100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t len = 0; start + len <= buf.size(); len += 37) {
      std::span<const uint8_t> s(buf.data() + start, len);
      uint32_t sw = internal::Crc32cSoftware(s, 0);
      if (internal::HasHardwareCrc32c()) {
        ASSERT_EQ(internal::Crc32cHardware(s, 0), sw);
      }
      ASSERT_EQ(Crc32c(s), sw);
    }
  }
}

TEST(Crc32cTest, ExtendsAcrossPieces) {
  std::string_view all = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= all.size(); ++cut) {
    EXPECT_EQ(Crc32c(Bytes(all.substr(cut)), Crc32c(Bytes(all.substr(0, cut)))), Crc32c(Bytes(all)));
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> buf(256);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
  uint32_t good = Crc32c(buf);
  for (size_t i = 0; i < buf.size() * 8; ++i) {
    buf[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
    ASSERT_NE(Crc32c(buf), good) << "bit " << i;
    buf[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
  }
}

}  // namespace
}  // namespace kubicle::snapshot
