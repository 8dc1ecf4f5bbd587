#include "guest/protocol/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kubicle::guest::protocol {
namespace {

TEST(WireHeader, RoundTripAndByteLayout) {
  FrameHeader h;
  h.type = uint16_t(MsgType::kExecStart);
  h.flags = kFlagReply | kFlagMore;
  h.id = 0x01020304;
  h.payload_len = 0x1234;
  uint8_t buf[kHeaderSize];
  EncodeHeader(h, buf);
  const uint8_t expect[kHeaderSize] = {'K', 'B', 'A', 'P', 1, 0, 0x10, 0, 3, 0, 0, 0,
                                       4,   3,   2,   1,   0x34, 0x12, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(0, std::memcmp(buf, expect, kHeaderSize));
  FrameHeader d;
  ASSERT_EQ(WireError::kOk, DecodeHeader(buf, sizeof(buf), &d));
  EXPECT_EQ(d.type, h.type);
  EXPECT_EQ(d.flags, h.flags);
  EXPECT_EQ(d.id, h.id);
  EXPECT_EQ(d.payload_len, h.payload_len);
  EXPECT_EQ(d.version, kVersion1);
}

TEST(WireHeader, RejectsTruncatedBadMagicAndOversize) {
  uint8_t buf[kHeaderSize];
  FrameHeader h;
  EncodeHeader(h, buf);
  FrameHeader d;
  EXPECT_EQ(WireError::kTruncated, DecodeHeader(buf, kHeaderSize - 1, &d));
  EXPECT_EQ(WireError::kTruncated, DecodeHeader(buf, 0, &d));
  buf[0] = 'X';
  EXPECT_EQ(WireError::kBadMagic, DecodeHeader(buf, kHeaderSize, &d));
  h.payload_len = kMaxPayload + 1;
  EncodeHeader(h, buf);
  EXPECT_EQ(WireError::kTooLarge, DecodeHeader(buf, kHeaderSize, &d));
  h.payload_len = kMaxPayload;
  EncodeHeader(h, buf);
  EXPECT_EQ(WireError::kOk, DecodeHeader(buf, kHeaderSize, &d));
}

TEST(WireTlv, WriterAndReaderRoundTrip) {
  uint8_t buf[128];
  TlvWriter w(buf, sizeof(buf));
  w.PutU32(Tag::kMode, 0755);
  w.PutCStr(Tag::kPath, "/a/b");
  const size_t mark = w.BeginNested(Tag::kEntry);
  w.PutU8(Tag::kFileType, 2);
  w.EndNested(mark);
  w.PutU64(Tag::kSize, 1ull << 40);
  ASSERT_EQ(WireError::kOk, w.error());
  // 4 fields: 6-byte headers + 4 + 4 + (6+1) + 8.
  EXPECT_EQ(w.size(), 6u * 4 + 4 + 4 + 7 + 8);

  TlvReader r(buf, w.size());
  Tlv t;
  ASSERT_TRUE(r.Next(&t));
  uint32_t mode = 0;
  EXPECT_TRUE(TlvU32(t, &mode));
  EXPECT_EQ(mode, 0755u);
  ASSERT_TRUE(r.Next(&t));
  EXPECT_EQ(t.tag, uint16_t(Tag::kPath));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.value), t.length), "/a/b");
  ASSERT_TRUE(r.Next(&t));
  EXPECT_EQ(t.tag, uint16_t(Tag::kEntry));
  EXPECT_EQ(t.length, 7u);
  EXPECT_EQ(WireError::kOk, ValidateTlvs(t.value, t.length));
  ASSERT_TRUE(r.Next(&t));
  uint64_t size = 0;
  EXPECT_FALSE(TlvU32(t, &mode));  // wrong width
  EXPECT_TRUE(TlvU64(t, &size));
  EXPECT_EQ(size, 1ull << 40);
  EXPECT_FALSE(r.Next(&t));
  EXPECT_EQ(WireError::kOk, r.error());
}

TEST(WireTlv, WriterLatchesOverflow) {
  uint8_t buf[16];
  TlvWriter w(buf, sizeof(buf));
  w.PutU32(Tag::kMode, 1);  // 10 bytes
  w.PutU32(Tag::kMode, 2);  // would need 20
  EXPECT_EQ(WireError::kNoSpace, w.error());
  w.PutU8(Tag::kAtomic, 1);  // would fit, but the error is latched
  EXPECT_EQ(w.size(), 10u);
}

TEST(WireTlv, ReaderRejectsOverrunsWithoutOverflow) {
  // A length of 0xffffffff must not wrap the bounds check.
  uint8_t buf[10] = {0x40, 0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
  EXPECT_EQ(WireError::kBadTlvLength, ValidateTlvs(buf, sizeof(buf)));
  // Length one past the end.
  StoreLe32(buf + 2, 5);
  EXPECT_EQ(WireError::kBadTlvLength, ValidateTlvs(buf, sizeof(buf)));
  StoreLe32(buf + 2, 4);
  EXPECT_EQ(WireError::kOk, ValidateTlvs(buf, sizeof(buf)));
  // A trailing partial TLV header.
  EXPECT_EQ(WireError::kTruncated, ValidateTlvs(buf, 5));
  EXPECT_EQ(WireError::kOk, ValidateTlvs(buf, 0));
}

TEST(WireTlv, FindReportsAbsentDuplicateAndMalformed) {
  uint8_t buf[64];
  TlvWriter w(buf, sizeof(buf));
  w.PutU32(Tag::kMode, 1);
  w.PutU64(Tag::kSeed, 2);
  w.PutU32(Tag::kMode, 3);
  Tlv t;
  WireError err = WireError::kOk;
  EXPECT_EQ(FindResult::kFound, FindTlv(buf, w.size(), Tag::kSeed, &t, &err));
  EXPECT_EQ(FindResult::kAbsent, FindTlv(buf, w.size(), Tag::kPath, &t, &err));
  EXPECT_EQ(FindResult::kError, FindTlv(buf, w.size(), Tag::kMode, &t, &err));
  EXPECT_EQ(WireError::kDuplicate, err);
  EXPECT_EQ(FindResult::kError, FindTlv(buf, w.size() - 1, Tag::kSeed, &t, &err));
  EXPECT_EQ(WireError::kBadTlvLength, err);
}

TEST(WireMemPattern, ChecksumIsPositionSensitive) {
  std::vector<uint64_t> words(64);
  for (size_t i = 0; i < words.size(); ++i) words[i] = MemPatternWord(7, i);
  MemChecksumState a;
  a.Update(words.data(), words.size());
  std::swap(words[3], words[40]);
  MemChecksumState b;
  b.Update(words.data(), words.size());
  EXPECT_NE(a.Final(), b.Final());
  // Chunked updates equal one update.
  std::swap(words[3], words[40]);
  MemChecksumState c;
  c.Update(words.data(), 10);
  c.Update(words.data() + 10, 54);
  EXPECT_EQ(a.Final(), c.Final());
}

}  // namespace
}  // namespace kubicle::guest::protocol
