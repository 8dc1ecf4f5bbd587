#include "common/base64.h"

#include <gtest/gtest.h>

namespace kubicle {
namespace {

using Bytes = std::vector<uint8_t>;

TEST(Base64, RoundTripsEveryLength) {
  Bytes data;
  for (int n = 0; n < 40; ++n) {
    auto decoded = Base64Decode(Base64Encode(data));
    ASSERT_TRUE(decoded.ok()) << n;
    EXPECT_EQ(*decoded, data);
    data.push_back(static_cast<uint8_t>(n * 37 + 255));
  }
  EXPECT_EQ(Base64Encode(Bytes{'h', 'i'}), "aGk=");
}

TEST(Base64, RejectsMalformed) {
  for (const char* bad : {"a", "aGk", "a=Gk", "aG=k", "a===", "aGk=aGk=", "aG k", "aGk!"}) {
    EXPECT_FALSE(Base64Decode(bad).ok()) << bad;
  }
  EXPECT_TRUE(Base64Decode("").ok());
}

// Found by fuzz/noderuntime/node_api_codec_fuzzer: "+4+=" decoded (to the
// bytes of "+48="), so one body had several encodings. Padding bits must be
// zero (RFC 4648, 3.5): a strict decoder accepts only the canonical form.
TEST(Base64, RejectsNonZeroPaddingBits) {
  EXPECT_FALSE(Base64Decode("+4+=").ok());
  EXPECT_FALSE(Base64Decode("aGl=").ok());
  EXPECT_FALSE(Base64Decode("aR==").ok());
  EXPECT_TRUE(Base64Decode("aGk=").ok());
  EXPECT_TRUE(Base64Decode("aQ==").ok());
}

}  // namespace
}  // namespace kubicle
