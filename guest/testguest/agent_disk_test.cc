// The test guest's DISK_* handler compiled for the host, driven by the real
// AgentClient, over fake disks that refuse what virtio-blk refuses.
#include <gtest/gtest.h>

#include "guest/protocol/tlv.h"
#include "guest/testguest/agent_test_harness.h"

namespace kubicle::guest::testguest {
namespace {

using protocol::Frame;
using protocol::MsgType;
using protocol::Tag;
using protocol::TlvBuilder;

Bytes SectorAt(const FakeDisk& d, uint64_t sector, uint32_t count) {
  const auto at = d.bytes.begin() + std::ptrdiff_t(sector * 512);
  return Bytes(at, at + std::ptrdiff_t(count) * 512);
}

TEST(TestGuestDisk, InfoListsDisksInOrder) {
  Harness h;
  h.platform_.AddDisk(2048, false, "disk0");
  h.platform_.AddDisk(16, true, "");
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->agent().HasCapability("disk"));
  auto info = c->DiskInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->size(), 2u);
  EXPECT_EQ((*info)[0], (protocol::DiskDescription{2048, false, "disk0"}));
  EXPECT_EQ((*info)[1], (protocol::DiskDescription{16, true, ""}));
}

TEST(TestGuestDisk, NoDisksIsAnEmptyList) {
  Harness h;
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  auto info = c->DiskInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->empty());
  EXPECT_EQ(c->DiskRead(0, 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(TestGuestDisk, ReadWriteAndFlush) {
  Harness h;
  h.platform_.AddDisk(1024, false, "disk0");
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  // 300 sectors: three frames (128 + 128 + 44) each way.
  auto before = c->DiskRead(0, 10, 300);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(*before, SectorAt(h.platform_.disks[0], 10, 300));

  const Bytes data = Pattern(300 * 512, 9);
  ASSERT_TRUE(c->DiskWrite(0, 700, data, /*flush=*/true).ok());
  EXPECT_EQ(SectorAt(h.platform_.disks[0], 700, 300), data);
  EXPECT_EQ(h.platform_.disks[0].flushes, 1);
  auto back = c->DiskRead(0, 700, 300);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  // The last sector is readable and writable; flush alone works.
  ASSERT_TRUE(c->DiskWrite(0, 1023, Pattern(512, 4)).ok());
  EXPECT_EQ(*c->DiskRead(0, 1023, 1), Pattern(512, 4));
  ASSERT_TRUE(c->DiskWrite(0, 0, {}, true).ok());
  EXPECT_EQ(h.platform_.disks[0].flushes, 2);
}

TEST(TestGuestDisk, DeviceRefusalsBecomeClearErrors) {
  Harness h;
  h.platform_.AddDisk(64, false, "rw");
  h.platform_.AddDisk(64, true, "ro");
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  const Bytes ro_before = h.platform_.disks[1].bytes;
  Status ro = c->DiskWrite(1, 0, Pattern(512, 1));
  EXPECT_EQ(ro.code(), StatusCode::kPermissionDenied) << ro.ToString();
  EXPECT_NE(ro.message().find("read-only"), std::string::npos) << ro.ToString();
  EXPECT_EQ(h.platform_.disks[1].bytes, ro_before);

  auto past = c->DiskRead(0, 64, 1);
  EXPECT_EQ(past.status().code(), StatusCode::kOutOfRange) << past.status().ToString();
  EXPECT_NE(past.status().message().find("capacity"), std::string::npos);
  EXPECT_EQ(c->DiskRead(0, 60, 5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->DiskWrite(0, ~uint64_t{0}, Pattern(512, 1)).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(c->DiskRead(2, 0, 1).status().code(), StatusCode::kNotFound);

  h.platform_.disks[0].broken = true;
  EXPECT_EQ(c->DiskRead(0, 0, 1).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(c->DiskWrite(0, 0, {}, true).code(), StatusCode::kUnavailable);
  // The session is unharmed.
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_EQ(*c->DiskRead(1, 63, 1), SectorAt(h.platform_.disks[1], 63, 1));
}

TEST(TestGuestDisk, MalformedRequestsAreRejectedBeforeTheDevice) {
  Harness h;
  h.platform_.AddDisk(64, false, "rw");
  auto c = h.Connect();
  ASSERT_NE(c, nullptr);
  const Bytes before = h.platform_.disks[0].bytes;
  auto send = [&](MsgType type, Bytes payload) {
    Frame f;
    f.type = type;
    f.id = 900;
    f.payload = std::move(payload);
    auto r = c->RawExchange(900, *protocol::EncodeFrame(f));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return std::string();
    EXPECT_EQ(r->type, MsgType::kError);
    auto e = protocol::ErrorReply::Decode(r->payload);
    EXPECT_TRUE(e.ok());
    EXPECT_EQ(e->code, protocol::ErrorCode::kInvalidArgument) << e->message;
    return e->message;
  };
  auto rd = [](uint32_t count) {
    return TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).U32(Tag::kSectorCount, count);
  };
  EXPECT_NE(send(MsgType::kDiskRead, rd(0).Take()).find("sector_count"), std::string::npos);
  send(MsgType::kDiskRead, rd(129).Take());
  send(MsgType::kDiskRead, TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).Take());
  send(MsgType::kDiskRead, rd(1).U32(Tag::kSector, 1).Take());  // duplicate
  send(MsgType::kDiskRead, TlvBuilder()
                               .U64(Tag::kDiskIndex, 0)  // wrong width
                               .U64(Tag::kSector, 0)
                               .U32(Tag::kSectorCount, 1)
                               .Take());
  auto wr = [](Bytes data) {
    return TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).Bytes(Tag::kData, data);
  };
  send(MsgType::kDiskWrite, wr(Bytes(100, 1)).Take());
  send(MsgType::kDiskWrite, wr(Bytes(129 * 512, 1)).Take());
  send(MsgType::kDiskWrite, wr({}).Take());
  send(MsgType::kDiskWrite, wr(Bytes(512, 1)).U8(Tag::kFlush, 2).Take());
  send(MsgType::kDiskWrite, TlvBuilder().U32(Tag::kDiskIndex, 0).U64(Tag::kSector, 0).Take());
  EXPECT_EQ(h.platform_.disks[0].bytes, before);
  EXPECT_EQ(h.platform_.disks[0].flushes, 0);
  EXPECT_TRUE(c->Ping().ok());
}

TEST(TestGuestDisk, ReadLargerThanTheClientLimitIsAnError) {
  Harness h;
  h.platform_.AddDisk(256, false, "rw");
  client::ClientOptions opts;
  opts.max_payload = 4096;
  auto c = h.Connect(opts);
  ASSERT_NE(c, nullptr);
  // The client splits to fit its own limit...
  auto ok = c->DiskRead(0, 0, 128);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, SectorAt(h.platform_.disks[0], 0, 128));
  // ...and a raw request above it is answered with an ERROR, not a frame the
  // client would have to refuse.
  Frame f;
  f.type = MsgType::kDiskRead;
  f.id = 77;
  f.payload = protocol::DiskReadRequest{0, 0, 128}.Encode();
  auto r = c->RawExchange(77, *protocol::EncodeFrame(f));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->type, MsgType::kError);
  EXPECT_EQ(protocol::ErrorReply::Decode(r->payload)->code,
            protocol::ErrorCode::kResourceExhausted);
  EXPECT_TRUE(c->Ping().ok());
}

}  // namespace
}  // namespace kubicle::guest::testguest
