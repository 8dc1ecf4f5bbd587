#include "guest/protocol/frame.h"

#include <gtest/gtest.h>

namespace kubicle::guest::protocol {
namespace {

std::vector<uint8_t> Encoded(MsgType type, uint32_t id, std::vector<uint8_t> payload) {
  Frame f;
  f.type = type;
  f.id = id;
  f.payload = std::move(payload);
  auto r = EncodeFrame(f);
  EXPECT_TRUE(r.ok());
  return *r;
}

TEST(FrameDecoder, ReassemblesFramesFedByteByByte) {
  auto a = Encoded(MsgType::kPing, 1, {});
  auto b = Encoded(MsgType::kEcho, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<uint8_t> stream = a;
  stream.insert(stream.end(), b.begin(), b.end());
  FrameDecoder d;
  std::vector<Frame> got;
  for (uint8_t byte : stream) {
    d.Append(std::span<const uint8_t>(&byte, 1));
    for (;;) {
      auto r = d.Next();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (!r->has_value()) break;
      got.push_back(std::move(**r));
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, MsgType::kPing);
  EXPECT_EQ(got[0].id, 1u);
  EXPECT_EQ(got[1].id, 2u);
  EXPECT_EQ(got[1].payload.size(), 9u);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameDecoder, BadMagicIsAStickyStreamError) {
  FrameDecoder d;
  const uint8_t junk[] = {'H', 'T', 'T', 'P'};
  d.Append(junk);
  auto r = d.Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  auto good = Encoded(MsgType::kPing, 1, {});
  d.Append(good);
  EXPECT_FALSE(d.Next().ok());
}

TEST(FrameDecoder, RejectsPayloadAboveReceiveLimit) {
  FrameDecoder d(4096);
  auto big = Encoded(MsgType::kEcho, 1, std::vector<uint8_t>(4097));
  d.Append(std::span<const uint8_t>(big.data(), kHeaderSize));  // header alone suffices
  auto r = d.Next();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos);
}

TEST(FrameDecoder, KeepsUnknownVersionAndTypeForTheMessageLayer) {
  Frame f;
  f.type = MsgType(0x7777);
  f.version = 9;
  auto bytes = EncodeFrame(f);
  ASSERT_TRUE(bytes.ok());
  FrameDecoder d;
  d.Append(*bytes);
  auto r = d.Next();
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(uint16_t((*r)->type), 0x7777);
  EXPECT_EQ((*r)->version, 9);
  EXPECT_EQ(MsgTypeName(MsgType(0x7777)), "type 0x7777");
}

TEST(EncodeFrame, RejectsOversizedPayload) {
  Frame f;
  f.payload.resize(kMaxPayload + 1);
  EXPECT_FALSE(EncodeFrame(f).ok());
}

}  // namespace
}  // namespace kubicle::guest::protocol
