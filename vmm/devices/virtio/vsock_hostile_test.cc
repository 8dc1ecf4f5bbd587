// virtio-vsock against hostile or broken guests and host peers: malformed
// packets, credit violations, floods, garbage handshakes, silent peers.
#include <gtest/gtest.h>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/vsock.h"
#include "vmm/devices/virtio/vsock_test_fixture.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::RxPacket;
using testing::VsockTest;

std::string Pattern(size_t n, size_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((seed + i) * 31 + (seed + i) / 251);
  return s;
}

TEST_F(VsockTest, MalformedPacketsAreDropped) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  SendTx(Hdr(kVsockOpRw, 52, hp, 3), "abc", /*hdr_len=*/20);  // short header
  SendTx(Hdr(kVsockOpRw, 52, hp, 10), "abc");                // len mismatch
  auto h = Hdr(kVsockOpRw, 52, hp, 3);
  h.src_cid = 4;
  SendTx(h, "abc");  // wrong source CID
  h = Hdr(kVsockOpRw, 52, hp, 3);
  h.dst_cid = 5;
  SendTx(h, "abc");  // not for the host
  h = Hdr(kVsockOpRw, 52, hp, 3);
  h.type = 2;
  SendTx(h, "abc");  // SEQPACKET
  SendTx(Hdr(99, 52, hp));  // unknown op on a live connection
  RunUntil([] { return false; }, 30);
  EXPECT_TRUE(TakeRx().empty());  // no RST for any of them
  SendTx(Hdr(kVsockOpRw, 52, hp, 2), "ok");
  EXPECT_EQ(HostRead(host.get(), 100, nullptr, 100), "ok");
  EXPECT_EQ(vsock_->connection_count(), 1u);
  EXPECT_EQ(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
}

TEST_F(VsockTest, PacketForUnknownConnectionGetsRst) {
  Start();
  SendTx(Hdr(kVsockOpRw, 888, 999, 1), "x");
  auto rst = WaitRx(kVsockOpRst);
  ASSERT_TRUE(rst.has_value());
  EXPECT_EQ(rst->hdr.src_port, 999u);
  EXPECT_EQ(rst->hdr.dst_port, 888u);
  SendTx(Hdr(kVsockOpRst, 888, 999));  // a RST is never answered
  RunUntil([] { return false; }, 20);
  EXPECT_TRUE(TakeRx().empty());
}

TEST_F(VsockTest, RwBeyondCreditResetsConnection) {
  cfg_.conn_buf_size = 16 * 1024;
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  std::string big = Pattern(20 * 1024, 1);
  SendTx(Hdr(kVsockOpRw, 52, hp, static_cast<uint32_t>(big.size())), big);
  auto rst = WaitRx(kVsockOpRst);
  ASSERT_TRUE(rst.has_value());
  bool eof = false;
  EXPECT_EQ(HostRead(host.get(), 1, &eof), "");  // nothing of it reached the host
  EXPECT_TRUE(eof);
}

TEST_F(VsockTest, RwAfterGuestShutdownSendResets) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  auto shut = Hdr(kVsockOpShutdown, 52, hp);
  shut.flags = kVsockShutdownSend;
  SendTx(shut);
  bool eof = false;
  HostRead(host.get(), 1, &eof);  // the host sees the guest's EOF
  EXPECT_TRUE(eof);
  SendTx(Hdr(kVsockOpRw, 52, hp, 1), "x");
  EXPECT_TRUE(WaitRx(kVsockOpRst).has_value());
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, GuestIgnoringCreditIsResetBeforeBuffersGrow) {
  cfg_.conn_buf_size = 64 * 1024;
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);  // the host never reads
  const std::string chunk = Pattern(4096, 7);
  size_t sent = 0;
  bool reset = false;
  for (int i = 0; i < 4000 && !reset; ++i) {
    SendTx(Hdr(kVsockOpRw, 52, hp, 4096), chunk);
    sent += chunk.size();
    for (const RxPacket& p : TakeRx()) reset |= p.hdr.op == kVsockOpRst;
  }
  ASSERT_TRUE(reset) << "sent " << sent << " bytes without a reset";
  // Everything accepted before the reset still reaches the host, in order.
  bool eof = false;
  std::string got = HostRead(host.get(), sent + 1, &eof);
  EXPECT_TRUE(eof);
  EXPECT_LT(got.size(), sent);
  EXPECT_EQ(got.size() % 4096, 0u);
  EXPECT_EQ(got.substr(0, 4096), chunk);
}

TEST_F(VsockTest, HostFloodIsBoundedByGuestCredit) {
  guest_buf_alloc_ = 8192;
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  const std::string flood = Pattern(64 * 1024, 3);
  HostWrite(host.get(), flood);
  auto credit_req = WaitRx(kVsockOpCreditRequest);
  ASSERT_TRUE(credit_req.has_value());
  size_t delivered = 0;
  std::string data;
  for (const RxPacket& p : rx_log_) {
    if (p.hdr.op == kVsockOpRw) data += p.payload;
  }
  delivered = data.size();
  EXPECT_EQ(delivered, 8192u);
  EXPECT_EQ(data, flood.substr(0, 8192));
  // More RX buffers change nothing without credit.
  PostRx(8);
  RunUntil([] { return false; }, 30);
  for (const RxPacket& p : TakeRx()) EXPECT_NE(p.hdr.op, kVsockOpRw);
  // The guest's application read it all: credit for 8 KiB more.
  guest_fwd_cnt_ = 8192;
  SendTx(Hdr(kVsockOpCreditUpdate, 52, hp));
  size_t before = rx_log_.size();
  RunUntil([&] {
    TakeRx();
    size_t n = 0;
    for (size_t i = before; i < rx_log_.size(); ++i)
      if (rx_log_[i].hdr.op == kVsockOpRw) n += rx_log_[i].payload.size();
    return n >= 8192;
  });
  std::string more;
  for (size_t i = before; i < rx_log_.size(); ++i)
    if (rx_log_[i].hdr.op == kVsockOpRw) more += rx_log_[i].payload;
  EXPECT_EQ(more, flood.substr(8192, 8192));
}

TEST_F(VsockTest, SlowHostPeerGetsEverythingAndGuestGetsCredit) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  // A compliant guest streams 8x its credit to a host that reads only while
  // the guest is blocked: the socket fills (partial writes, EAGAIN), the
  // device buffers and flushes on EPOLLOUT, and credit updates keep the
  // guest going. Nothing may be lost, reordered or reset.
  const uint32_t buf = cfg_.conn_buf_size;
  const std::string all = Pattern(8 * buf, 11);
  uint32_t peer_fwd = 0;
  uint64_t tx = 0;
  std::string got;
  for (int i = 0; i < 200000 && got.size() < all.size(); ++i) {
    for (const RxPacket& p : TakeRx()) {
      ASSERT_NE(p.hdr.op, kVsockOpRst);
      EXPECT_EQ(p.hdr.buf_alloc, buf);
      peer_fwd = p.hdr.fwd_cnt;
    }
    const uint32_t credit = buf - static_cast<uint32_t>(tx - peer_fwd);
    if (tx < all.size() && credit > 0) {
      size_t n = std::min<size_t>({32 * 1024, credit, all.size() - tx});
      SendTx(Hdr(kVsockOpRw, 52, hp, static_cast<uint32_t>(n)), std::string_view(all).substr(tx, n));
      tx += n;
      continue;
    }
    ASSERT_TRUE(loop_->RunOnce(1).ok());
    char chunk[16 * 1024];
    ssize_t r = ::recv(host.get(), chunk, sizeof(chunk), MSG_DONTWAIT);
    if (r > 0) got.append(chunk, static_cast<size_t>(r));
  }
  EXPECT_EQ(tx, all.size());
  EXPECT_EQ(got.size(), all.size());
  EXPECT_TRUE(got == all);
  EXPECT_EQ(vsock_->connection_count(), 1u);
}

TEST_F(VsockTest, GarbageInsteadOfConnectIsClosed) {
  Start();
  UniqueFd a = Connect(uds_);
  HostWrite(a.get(), "GET / HTTP/1.1\r\n");
  UniqueFd b = Connect(uds_);
  HostWrite(b.get(), std::string(40, 'C'));  // no newline, too long
  UniqueFd c = Connect(uds_);
  HostWrite(c.get(), "CONNECT 99999999999\n");
  for (int fd : {a.get(), b.get(), c.get()}) {
    bool eof = false;
    EXPECT_EQ(HostRead(fd, 1, &eof), "");
    EXPECT_TRUE(eof);
  }
  EXPECT_TRUE(TakeRx().empty());
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, SilentHostPeerTimesOut) {
  cfg_.handshake_timeout = std::chrono::milliseconds(50);
  Start();
  UniqueFd host = Connect(uds_);
  EXPECT_TRUE(RunUntil([&] { return vsock_->connection_count() == 1; }));
  bool eof = false;
  HostRead(host.get(), 1, &eof);
  EXPECT_TRUE(eof);
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, ConnectionCapRefusesExtraPeers) {
  cfg_.max_connections = 2;
  Start();
  UniqueFd a = Connect(uds_), b = Connect(uds_);
  EXPECT_TRUE(RunUntil([&] { return vsock_->connection_count() == 2; }));
  UniqueFd c = Connect(uds_);
  bool eof = false;
  HostRead(c.get(), 1, &eof);
  EXPECT_TRUE(eof);
  // The guest cannot open more either.
  UniqueFd listener = Listen(uds_ + "_80");
  SendTx(Hdr(kVsockOpRequest, 5000, 80));
  EXPECT_TRUE(WaitRx(kVsockOpRst).has_value());
  EXPECT_EQ(vsock_->connection_count(), 2u);
}

TEST_F(VsockTest, TooSmallRxBufferIsReturnedUnused) {
  Start(0);
  GuestAddress tiny = heap_.Alloc(16);
  uint16_t head = rx_->AddChain({{tiny, 16, true}});
  rx_bufs_[head] = {tiny, tiny};
  PostRx(1, /*kick=*/false);
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONNECT 5\n");
  EXPECT_TRUE(RunUntil([&] { return rx_->used_idx() == 2; }));
  auto used = rx_->TakeUsed();
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].id, head);
  EXPECT_EQ(used[0].len, 0u);
  EXPECT_EQ(used[1].len, sizeof(VsockHeader));
}

TEST_F(VsockTest, BrokenTxRingNeedsResetWithoutCrashing) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  tx_->SetAvailIdx(static_cast<uint16_t>(tx_->avail_idx() + 500));
  drv_->Notify(Vsock::kTxQueue);
  EXPECT_NE(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
  // The driver resets; host connections go away cleanly.
  drv_->Write32(0x70, 0);
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

// The class of bug the fuzzers found in rng and virtio-blk, on vsock's own
// drains: a TX used ring laid over its avail ring, one entry ahead (a
// restored record can say so), moves avail->idx on with every answer, so
// the ring never runs dry. The drain must stop at its bound and break the
// queue (DEVICE_NEEDS_RESET) instead of holding the transport's lock for
// ever; every chain it took is still answered exactly once.
TEST_F(VsockTest, TxRingThatFeedsItselfBreaksTheQueue) {
  auto v = Vsock::Create(cfg_);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto irq = std::make_shared<testing::CountingInterrupt>();
  auto t = MmioTransport::Create(std::move(*v), *mem_, irq, loop_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // desc[0] at 0x1000 is all zeros: an empty readable buffer, dropped as a
  // short header; every used entry is {id 0, len 0}.
  ASSERT_TRUE(mem_->StoreRelease16(0x2002, 1).ok());  // avail idx = used idx = 1
  MmioTransportState st;
  st.status = kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk;
  st.driver_features = uint64_t{1} << 32;  // VIRTIO_F_VERSION_1
  QueueState rx, tx, ev;
  rx.size = tx.size = ev.size = 16;
  rx.ready = tx.ready = ev.ready = true;
  rx.desc_table = 0x4000, rx.avail_ring = 0x5000, rx.used_ring = 0x6000;
  ev.desc_table = 0x7000, ev.avail_ring = 0x8000, ev.used_ring = 0x9000;
  tx.desc_table = 0x1000, tx.avail_ring = 0x2000, tx.used_ring = 0x2000;
  tx.next_avail = 0;
  tx.next_used = 1;
  st.queues = {rx, tx, ev};
  ASSERT_TRUE((*t)->RestoreState(st).ok());
  (*t)->NotifyQueue(Vsock::kTxQueue);  // returns
  EXPECT_NE((*t)->status() & kStatusDeviceNeedsReset, 0u);
  const QueueState after = (*t)->SaveState().queues.at(Vsock::kTxQueue);
  EXPECT_LE(after.next_avail, kDrainRingsBound * tx.size + 1);
  // Answered once per taking: one used entry for each chain taken.
  EXPECT_EQ(static_cast<uint16_t>(after.next_used - tx.next_used), after.next_avail);
  EXPECT_EQ(after.next_avail, kDrainRingsBound * tx.size);
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
