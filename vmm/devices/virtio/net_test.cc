#include "vmm/devices/virtio/net.h"

#include <gtest/gtest.h>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/net_test_fixture.h"
#include "vmm/devices/virtio/persist.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using namespace std::chrono_literals;
using testing::Frame;
using testing::kMacA;
using testing::kMacB;
using testing::MakeFrame;

class NetTest : public testing::NetFixture {};

TEST_F(NetTest, OffersMacAndStatusAndNoOffloads) {
  Start();
  EXPECT_EQ(drv_->Read32(0x08), kDeviceIdNet);
  const uint64_t f = drv_->DeviceFeatures();
  EXPECT_EQ(f, FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx) |
                   FeatureBit(kFeatureNetMac) | FeatureBit(kFeatureNetStatus));
  // Config space: the MAC, then status = LINK_UP.
  uint8_t config[8];
  for (int i = 0; i < 8; ++i) t_->Read(0x100 + i, {&config[i], 1});
  EXPECT_EQ(MacAddress(std::to_array({config[0], config[1], config[2], config[3], config[4],
                                      config[5]})),
            kMacA);
  EXPECT_EQ(config[6], 1);
  EXPECT_EQ(config[7], 0);
}

TEST_F(NetTest, TxFrameReachesTheBackendWithoutTheHeader) {
  Start();
  const Frame a = MakeFrame(60, 1), b = MakeFrame(1514, 2);
  SendFrame(a);
  SendFrame(b, 5);  // the header itself split across descriptors
  drv_->Notify(Net::kTxQueue);
  ASSERT_EQ(wire_->from_guest.size(), 2u);
  EXPECT_EQ(wire_->from_guest[0], a);
  EXPECT_EQ(wire_->from_guest[1], b);
  auto used = txq_->TakeUsed();
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].len, 0u);
  NetStats s = net_->stats();
  EXPECT_EQ(s.tx_frames, 2u);
  EXPECT_EQ(s.tx_bytes, 60u + 1514u);
  EXPECT_EQ(s.tx_dropped, 0u);
}

TEST_F(NetTest, RxDeliversABackendFrameWithAZeroedHeader) {
  Start();
  GuestAddress buf = PostRx(1526);
  drv_->Notify(Net::kRxQueue);
  const Frame f = MakeFrame(98, 3);
  wire_->Push(f);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 1; }));
  auto used = rxq_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, Net::kHeaderSize + f.size());
  std::vector<uint8_t> got = ReadGuest(buf, Net::kHeaderSize + f.size());
  // flags, gso_type, hdr_len, gso_size, csum_start, csum_offset: 0;
  // num_buffers: 1, as the spec requires without MRG_RXBUF.
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + 10), std::vector<uint8_t>(10, 0));
  EXPECT_EQ(got[10], 1);
  EXPECT_EQ(got[11], 0);
  EXPECT_EQ(Frame(got.begin() + Net::kHeaderSize, got.end()), f);
  EXPECT_GE(irq_->count, 1);
  EXPECT_EQ(net_->stats().rx_frames, 1u);
}

TEST_F(NetTest, ShortTxChainsAreDroppedAndReturned) {
  Start();
  GuestAddress a = heap_.Alloc(64);
  txq_->AddChain({{a, 8, false}});                 // shorter than the header
  txq_->AddChain({{a, Net::kHeaderSize, false}});  // a header and no frame
  txq_->AddChain({{a, 0, false}});                 // nothing at all
  drv_->Notify(Net::kTxQueue);
  EXPECT_TRUE(wire_->from_guest.empty());
  EXPECT_EQ(txq_->TakeUsed().size(), 3u);
  EXPECT_EQ(net_->stats().bad_chains, 3u);
  EXPECT_EQ(net_->stats().tx_dropped, 3u);
  EXPECT_EQ(t_->status() & kStatusDeviceNeedsReset, 0u);
}

TEST_F(NetTest, ReadableAndWritableMixupsAreRefused) {
  Start();
  // A tx chain the device may only write: no readable header, dropped.
  SendFrame(MakeFrame(60, 4), 0, /*writable=*/true);
  drv_->Notify(Net::kTxQueue);
  EXPECT_TRUE(wire_->from_guest.empty());
  EXPECT_EQ(txq_->TakeUsed().size(), 1u);
  // An rx buffer the device may only read: handed back empty; the frame
  // waits for a real buffer.
  GuestAddress ro = PostRx(1526, /*writable=*/false);
  wire_->Push(MakeFrame(60, 5));
  drv_->Notify(Net::kRxQueue);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 1; }));
  auto used = rxq_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 0u);
  EXPECT_EQ(ReadGuest(ro, 16), std::vector<uint8_t>(16, 0));
  PostRx(1526);
  drv_->Notify(Net::kRxQueue);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 2; }));
  EXPECT_EQ(rxq_->TakeUsed().at(0).len, Net::kHeaderSize + 60);
  EXPECT_EQ(net_->stats().bad_chains, 2u);
  EXPECT_EQ(t_->status() & kStatusDeviceNeedsReset, 0u);
}

TEST_F(NetTest, FramesOverTheMaximumAreDroppedBothWays) {
  Start();
  SendFrame(MakeFrame(Net::kMaxFrameBytes + 1, 6));
  SendFrame(MakeFrame(Net::kMaxFrameBytes, 7));  // the largest allowed
  drv_->Notify(Net::kTxQueue);
  ASSERT_EQ(wire_->from_guest.size(), 1u);
  EXPECT_EQ(wire_->from_guest[0].size(), Net::kMaxFrameBytes);
  EXPECT_EQ(txq_->TakeUsed().size(), 2u);

  wire_->Push(MakeFrame(Net::kMaxFrameBytes + 100, 8));
  wire_->Push(MakeFrame(64, 9));
  PostRx(Net::kHeaderSize + Net::kMaxFrameBytes);
  drv_->Notify(Net::kRxQueue);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 1; }));
  EXPECT_EQ(rxq_->TakeUsed().at(0).len, Net::kHeaderSize + 64);
  NetStats s = net_->stats();
  EXPECT_EQ(s.oversize, 2u);
  EXPECT_EQ(s.tx_dropped, 1u);
  EXPECT_EQ(s.rx_dropped, 1u);
}

TEST_F(NetTest, RxWaitsForBuffersThenDelivers) {
  Start();
  wire_->Push(MakeFrame(60, 10));
  wire_->Push(MakeFrame(70, 11));
  RunFor(50ms);  // no buffers: nothing happens, and the loop is not spun
  EXPECT_EQ(rxq_->used_idx(), 0);
  EXPECT_EQ(wire_->to_guest.size(), 1u);  // one frame held, the other left in the "TAP"
  PostRx(1526);
  PostRx(1526);
  drv_->Notify(Net::kRxQueue);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 2; }));
  auto used = rxq_->TakeUsed();
  EXPECT_EQ(used[0].len, Net::kHeaderSize + 60);
  EXPECT_EQ(used[1].len, Net::kHeaderSize + 70);
}

TEST_F(NetTest, AFrameLargerThanTheBufferIsDroppedAndTheBufferKept) {
  Start();
  PostRx(100);
  wire_->Push(MakeFrame(200, 12));
  wire_->Push(MakeFrame(50, 13));
  drv_->Notify(Net::kRxQueue);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 1; }));
  EXPECT_EQ(rxq_->TakeUsed().at(0).len, Net::kHeaderSize + 50);
  EXPECT_EQ(net_->stats().rx_dropped, 1u);
}

TEST_F(NetTest, MoreThanABatchGoesOnAtTheNextLoopTurn) {
  Start();
  constexpr int kFrames = Net::kBatch + 36;
  for (int i = 0; i < kFrames; ++i) SendFrame(MakeFrame(60, static_cast<uint8_t>(i)));
  drv_->Notify(Net::kTxQueue);  // one kick, as an EVENT_IDX driver may give
  EXPECT_EQ(wire_->from_guest.size(), Net::kBatch);
  ASSERT_TRUE(RunUntil([&] { return wire_->from_guest.size() == kFrames; }));
  EXPECT_EQ(wire_->from_guest.back(), MakeFrame(60, kFrames - 1));

  for (int i = 0; i < kFrames; ++i) PostRx(1526);
  for (int i = 0; i < kFrames; ++i) wire_->Push(MakeFrame(60, static_cast<uint8_t>(i)));
  drv_->Notify(Net::kRxQueue);
  EXPECT_EQ(rxq_->used_idx(), Net::kBatch);
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == kFrames; }));
  EXPECT_EQ(net_->stats().rx_frames, uint64_t{kFrames});
}

TEST_F(NetTest, TxRateLimitHoldsFramesUntilTokensReturn) {
  NetConfig config;
  config.tx.packets_per_sec = 2;  // burst of 2, then one every 500 ms
  Start(config);
  for (uint8_t i = 0; i < 3; ++i) SendFrame(MakeFrame(60, i));
  drv_->Notify(Net::kTxQueue);
  EXPECT_EQ(wire_->from_guest.size(), 2u);
  EXPECT_EQ(txq_->TakeUsed().size(), 2u);  // the third stays on the ring
  EXPECT_TRUE(net_->timer_armed());
  drv_->Notify(Net::kTxQueue);  // a kick before the tokens are back changes nothing
  EXPECT_EQ(wire_->from_guest.size(), 2u);
  now_ += 500'000'000;
  drv_->Notify(Net::kTxQueue);
  EXPECT_EQ(wire_->from_guest.size(), 3u);
  EXPECT_EQ(wire_->from_guest[2], MakeFrame(60, 2));
}

TEST_F(NetTest, RxRateLimitResumesOnItsTimer) {
  NetConfig config;
  config.rx.packets_per_sec = 20;  // burst of 20, then one every 50 ms
  config.clock = [] {            // the real clock: the timerfd must resume it
    return static_cast<Nanos>(std::chrono::steady_clock::now().time_since_epoch().count());
  };
  Start(config);
  for (int i = 0; i < 21; ++i) PostRx(1526);
  drv_->Notify(Net::kRxQueue);
  for (uint8_t i = 0; i < 21; ++i) wire_->Push(MakeFrame(60, i));
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 20; }));
  EXPECT_TRUE(net_->timer_armed());
  ASSERT_TRUE(RunUntil([&] { return rxq_->used_idx() == 21; }));
  EXPECT_FALSE(net_->timer_armed());
  EXPECT_EQ(net_->stats().rx_frames, 21u);
}

TEST_F(NetTest, BackendSendFailuresAreCountedNotFatal) {
  Start();
  wire_->fail_sends = true;
  SendFrame(MakeFrame(60, 1));
  drv_->Notify(Net::kTxQueue);
  EXPECT_EQ(txq_->TakeUsed().size(), 1u);
  EXPECT_EQ(net_->stats().tx_dropped, 1u);
}

TEST_F(NetTest, SetMacRaisesAConfigChange) {
  Start();
  drv_->AckInterrupts();
  const uint32_t generation = drv_->Read32(0xfc);
  ASSERT_TRUE(net_->SetMac(kMacB).ok());
  EXPECT_NE(drv_->AckInterrupts() & kInterruptConfigChange, 0u);
  EXPECT_NE(drv_->Read32(0xfc), generation);
  EXPECT_EQ(net_->mac(), kMacB);
  EXPECT_FALSE(net_->SetMac({0x01, 0, 0, 0, 0, 1}).ok());  // multicast
}

TEST_F(NetTest, SaveRestoreRoundTripTakesTheNewMac) {
  NetConfig config;
  config.rx = {.bytes_per_sec = 1000000, .packets_per_sec = 1000};
  config.tx = {.bytes_per_sec = 2000000, .packets_per_sec = 0};
  Start(config);
  auto record = SaveDevice(*t_, 0);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->kind, Net::kPersistKind);
  ASSERT_TRUE(CheckDevice(*record, false).ok());

  MmioTransportState transport;
  std::vector<uint8_t> own;
  ASSERT_TRUE(DecodeRecord(record->state, false, &transport, &own).ok());
  auto saved = Net::DecodeState(own, false);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->mac, kMacA);
  EXPECT_EQ(saved->rx, config.rx);
  EXPECT_EQ(saved->tx, config.tx);
  // Truncated, padded and multicast states are refused.
  EXPECT_FALSE(Net::CheckSaved(std::span(own).first(own.size() - 1), false).ok());
  std::vector<uint8_t> longer = own;
  longer.push_back(0);
  EXPECT_FALSE(Net::CheckSaved(longer, false).ok());
  EXPECT_TRUE(Net::CheckSaved(longer, true).ok());  // a newer minor may add fields
  std::vector<uint8_t> multicast = own;
  multicast[0] |= 1;
  EXPECT_FALSE(Net::CheckSaved(multicast, false).ok());

  DeviceResources host;
  EXPECT_FALSE(RestoreDevice(*record, false, host).ok());  // no backend given
  auto wire = std::make_shared<testing::FakeWire>();
  host.open_net = [wire]() -> Result<std::unique_ptr<NetBackend>> {
    return std::unique_ptr<NetBackend>(std::make_unique<testing::FakeNetBackend>(wire));
  };
  host.net_mac = kMacB;
  auto restored = RestoreDevice(*record, false, host);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(restored->transport, t_->SaveState());

  // Attached in place of the original: the guest sees the new MAC and a
  // config change; frames flow through the new backend.
  t_.reset();
  wire_ = wire;
  Attach(std::move(restored->device));
  ASSERT_TRUE(t_->RestoreState(restored->transport).ok());
  const uint32_t generation = drv_->Read32(0xfc);
  net_->OnRestored();
  EXPECT_NE(drv_->AckInterrupts() & kInterruptConfigChange, 0u);
  EXPECT_NE(drv_->Read32(0xfc), generation);
  uint8_t mac0 = 0;
  t_->Read(0x105, {&mac0, 1});
  EXPECT_EQ(mac0, kMacB[5]);
  auto again = Net::DecodeState(*net_->SaveState(), false);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->rx, config.rx);  // limits kept when none are given
  EXPECT_EQ(again->tx, config.tx);
}

// The record's layout is part of the snapshot format (docs/snapshot-format.md,
// 2.4.5): a change here is a format change.
TEST_F(NetTest, SavedStateIsTheDocumentedLayout) {
  NetConfig config;
  config.rx = {.bytes_per_sec = 0x0102, .packets_per_sec = 3};
  config.tx = {.bytes_per_sec = 0, .packets_per_sec = 0x0405};
  Start(config);
  auto bytes = net_->SaveState();
  ASSERT_TRUE(bytes.ok());
  const std::vector<uint8_t> golden = {
      0x02, 0x4b, 0x42, 0x00, 0x00, 0x01,              // mac
      0x02, 0x01, 0, 0, 0, 0, 0, 0,                    // rx bytes/s
      0x03, 0, 0, 0, 0, 0, 0, 0,                       // rx packets/s
      0, 0, 0, 0, 0, 0, 0, 0,                          // tx bytes/s
      0x05, 0x04, 0, 0, 0, 0, 0, 0};                   // tx packets/s
  EXPECT_EQ(*bytes, golden);
}

TEST(NetMacTest, ParsesStrictly) {
  auto m = ParseMac("02:4B:42:0a:ff:01");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(FormatMac(*m), "02:4b:42:0a:ff:01");
  for (const char* bad : {"", "02:4b:42:0a:ff", "02:4b:42:0a:ff:01:", "02-4b-42-0a-ff-01",
                          "02:4b:42:0a:ff:0g", "024b:42:0a:ff:01:", " 2:4b:42:0a:ff:01",
                          "01:00:5e:00:00:01", "00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff"})
    EXPECT_FALSE(ParseMac(bad).ok()) << bad;
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
