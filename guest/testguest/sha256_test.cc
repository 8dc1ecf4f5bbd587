// The test guest's freestanding SHA-256 against FIPS 180-4 vectors and
// against OpenSSL (snapshot::Sha256Of) for every length across block edges.
#include "common/hex.h"
#include "guest/testguest/sha256.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "snapshot/digest.h"

namespace kubicle::guest::testguest {
namespace {

std::string Hex(const std::string& data) {
  Sha256 h;
  h.Update(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  uint8_t d[Sha256::kDigestBytes];
  h.Final(d);
  snapshot::Sha256Digest out;
  std::copy(d, d + sizeof(d), out.begin());
  return HexEncode(out);
}

TEST(TestGuestSha256, KnownVectors) {
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(TestGuestSha256, MatchesOpenSslAtEveryLengthAndSplit) {
  std::vector<uint8_t> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + 7);
  for (size_t n = 0; n <= data.size(); ++n) {
    for (size_t split : {size_t(0), n / 3, n}) {
      Sha256 h;
      h.Update(data.data(), split);
      h.Update(data.data() + split, n - split);
      uint8_t d[Sha256::kDigestBytes];
      h.Final(d);
      snapshot::Sha256Digest want = snapshot::Sha256Of({data.data(), n});
      EXPECT_TRUE(std::equal(d, d + sizeof(d), want.begin())) << "length " << n << " split " << split;
    }
  }
}

}  // namespace
}  // namespace kubicle::guest::testguest
