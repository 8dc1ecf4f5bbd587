// DISK_INFO / DISK_READ / DISK_WRITE: round trips, limits, hostile payloads
// and the bytes of one request (pins the type and tag numbers).
#include <gtest/gtest.h>

#include "guest/protocol/messages.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::protocol {
namespace {

template <typename M>
M RoundTrip(const M& m) {
  auto r = M::Decode(m.Encode());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : M{};
}

Bytes Sectors(uint32_t n, uint8_t salt) {
  Bytes b(size_t(n) * kDiskSectorSize);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7 + salt);
  return b;
}

TEST(DiskMessages, InfoRoundTrip) {
  EXPECT_TRUE(DiskInfoReply::Decode(DiskInfoReply{}.Encode()).ok());
  EXPECT_TRUE(RoundTrip(DiskInfoReply{}).disks.empty());
  DiskInfoReply info;
  info.disks = {{2048, false, "disk0"}, {8, true, ""}, {0, true, std::string(20, 'x')}};
  EXPECT_EQ(RoundTrip(info).disks, info.disks);
  EXPECT_TRUE(DiskInfoRequest::Decode(DiskInfoRequest{}.Encode()).ok());
}

TEST(DiskMessages, InfoRejectsBadEntries) {
  // Entry without capacity, id longer than 20 bytes, read_only not 0/1,
  // id containing NUL, more than kMaxDisks entries.
  auto entry = [](auto fill) {
    TlvBuilder b;
    const size_t m = b.BeginNested(Tag::kDisk);
    fill(b);
    b.EndNested(m);
    return b.Take();
  };
  Status missing = DiskInfoReply::Decode(entry([](TlvBuilder& b) { b.Bool(Tag::kReadOnly, true); }))
                       .status();
  EXPECT_NE(missing.message().find("missing required field capacity_sectors"), std::string::npos)
      << missing.ToString();
  EXPECT_FALSE(DiskInfoReply::Decode(entry([](TlvBuilder& b) {
                 b.U64(Tag::kCapacitySectors, 1).Str(Tag::kDiskId, std::string(21, 'a'));
               })).ok());
  EXPECT_FALSE(DiskInfoReply::Decode(entry([](TlvBuilder& b) {
                 b.U64(Tag::kCapacitySectors, 1).U8(Tag::kReadOnly, 2);
               })).ok());
  EXPECT_FALSE(DiskInfoReply::Decode(entry([](TlvBuilder& b) {
                 b.U64(Tag::kCapacitySectors, 1).Str(Tag::kDiskId, std::string("a\0b", 3));
               })).ok());
  EXPECT_FALSE(DiskInfoReply::Decode(entry([](TlvBuilder& b) {
                 b.U32(Tag::kCapacitySectors, 1);  // wrong width
               })).ok());
  DiskInfoReply many;
  many.disks.resize(kMaxDisks + 1);
  EXPECT_FALSE(DiskInfoReply::Decode(many.Encode()).ok());
  // A nested entry whose own TLVs are truncated.
  TlvBuilder bad;
  bad.Bytes(Tag::kDisk, Bytes{0x74, 0x00, 0x08, 0x00});
  EXPECT_FALSE(DiskInfoReply::Decode(bad.Take()).ok());
}

TEST(DiskMessages, ReadRoundTripAndLimits) {
  auto r = RoundTrip(DiskReadRequest{1, 0xfffffffffffffff0ull, kMaxDiskSectors});
  EXPECT_EQ(r.disk, 1u);
  EXPECT_EQ(r.sector, 0xfffffffffffffff0ull);
  EXPECT_EQ(r.count, kMaxDiskSectors);
  EXPECT_FALSE(DiskReadRequest::Decode(DiskReadRequest{0, 0, 0}.Encode()).ok());
  EXPECT_FALSE(DiskReadRequest::Decode(DiskReadRequest{0, 0, kMaxDiskSectors + 1}.Encode()).ok());
  Status missing =
      DiskReadRequest::Decode(TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).Take())
          .status();
  EXPECT_NE(missing.message().find("sector_count"), std::string::npos) << missing.ToString();

  EXPECT_EQ(RoundTrip(DiskReadReply{Sectors(3, 1)}).data, Sectors(3, 1));
  EXPECT_FALSE(DiskReadReply::Decode(DiskReadReply{}.Encode()).ok());
  EXPECT_FALSE(DiskReadReply::Decode(DiskReadReply{Bytes(513, 0)}.Encode()).ok());
  EXPECT_FALSE(DiskReadReply::Decode(DiskReadReply{Sectors(kMaxDiskSectors + 1, 0)}.Encode()).ok());
}

TEST(DiskMessages, WriteRoundTripAndLimits) {
  auto w = RoundTrip(DiskWriteRequest{2, 9, Sectors(2, 5), true});
  EXPECT_EQ(w.disk, 2u);
  EXPECT_EQ(w.sector, 9u);
  EXPECT_EQ(w.data, Sectors(2, 5));
  EXPECT_TRUE(w.flush);
  EXPECT_FALSE(RoundTrip(DiskWriteRequest{0, 0, Sectors(1, 0), false}).flush);
  // Flush alone carries no data; a write without data and without flush is
  // meaningless.
  EXPECT_TRUE(DiskWriteRequest::Decode(DiskWriteRequest{0, 0, {}, true}.Encode()).ok());
  EXPECT_FALSE(DiskWriteRequest::Decode(DiskWriteRequest{0, 0, {}, false}.Encode()).ok());
  EXPECT_FALSE(
      DiskWriteRequest::Decode(DiskWriteRequest{0, 0, Bytes(100, 0), false}.Encode()).ok());
  EXPECT_FALSE(
      DiskWriteRequest::Decode(DiskWriteRequest{0, 0, Sectors(kMaxDiskSectors + 1, 0)}.Encode())
          .ok());
  EXPECT_FALSE(DiskWriteRequest::Decode(
                   TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).Take())
                   .ok());
  EXPECT_FALSE(DiskWriteRequest::Decode(TlvBuilder()
                                            .U32(Tag::kDiskIndex, 0)
                                            .U64(Tag::kSector, 0)
                                            .Bytes(Tag::kData, Sectors(1, 0))
                                            .U8(Tag::kFlush, 7)
                                            .Take())
                   .ok());
  EXPECT_EQ(RoundTrip(DiskWriteReply{kMaxDiskSectors}).count, kMaxDiskSectors);
  EXPECT_FALSE(DiskWriteReply::Decode(DiskWriteReply{kMaxDiskSectors + 1}.Encode()).ok());
  EXPECT_FALSE(DiskWriteReply::Decode({}).ok());
}

TEST(DiskMessages, UnknownTagsAndDuplicates) {
  auto ok = DiskReadRequest::Decode(TlvBuilder()
                                        .U64(Tag(0x7fff), 1)
                                        .U32(Tag::kDiskIndex, 3)
                                        .U64(Tag::kSector, 4)
                                        .U32(Tag::kSectorCount, 5)
                                        .Take());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->disk, 3u);
  Status dup = DiskReadRequest::Decode(TlvBuilder()
                                           .U32(Tag::kDiskIndex, 0)
                                           .U64(Tag::kSector, 4)
                                           .U64(Tag::kSector, 5)
                                           .U32(Tag::kSectorCount, 1)
                                           .Take())
                   .status();
  EXPECT_NE(dup.message().find("duplicate"), std::string::npos) << dup.ToString();
}

// Pins the DISK_READ request of docs/agent-protocol.md section 5.
TEST(DiskMessages, GoldenDiskReadBytes) {
  const Bytes frame = *EncodeFrame(MakeFrame(DiskReadRequest{1, 2, 3}, 7));
  const Bytes expect = {
      0x4b, 0x42, 0x41, 0x50, 0x01, 0x00, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00,  // magic, v1, 0x44
      0x07, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // id 7, len 34
      0x71, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,              // disk_index 1
      0x72, 0x00, 0x08, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0,           // sector 2
      0x73, 0x00, 0x04, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,              // sector_count 3
  };
  EXPECT_EQ(frame, expect);
  EXPECT_EQ(MsgTypeName(MsgType::kDiskWrite), "DISK_WRITE");
  EXPECT_EQ(TagName(Tag::kCapacitySectors), "capacity_sectors");
}

}  // namespace
}  // namespace kubicle::guest::protocol
