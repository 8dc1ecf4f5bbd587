// virtio-vsock: connection set-up, data both ways, shutdown, reset events.
// Hostile guests and peers are in vsock_hostile_test.cc.
#include "vmm/devices/virtio/vsock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/vsock_test_fixture.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::RxPacket;
using testing::VsockTest;

TEST_F(VsockTest, ConfigSpaceHoldsGuestCid) {
  Start();
  uint64_t cid = 0;
  t_->Read(0x100, {reinterpret_cast<uint8_t*>(&cid), 8});
  EXPECT_EQ(cid, testing::kGuestCid);
  EXPECT_EQ(drv_->Read32(0x08), kDeviceIdVsock);
  uint32_t gen = drv_->Read32(0xfc);
  ASSERT_TRUE(vsock_->SetGuestCid(77).ok());
  EXPECT_EQ(drv_->Read32(0x100), 77u);
  EXPECT_EQ(drv_->Read32(0xfc), gen + 1);
  EXPECT_FALSE(vsock_->SetGuestCid(2).ok());
  EXPECT_FALSE(vsock_->SetGuestCid(uint64_t{1} << 32).ok());
  EXPECT_EQ(vsock_->guest_cid(), 77u);
}

TEST_F(VsockTest, CreateRefusesExistingPathAndBadCid) {
  Start();
  EXPECT_FALSE(Vsock::Create(cfg_).ok());  // uds_ is bound already
  VsockConfig bad = cfg_;
  bad.uds_path = dir_ + "/other.sock";
  bad.guest_cid = 2;
  EXPECT_FALSE(Vsock::Create(bad).ok());
}

TEST_F(VsockTest, SocketPathOutlivesAForkedChildsCopy) {
  auto v = Vsock::Create(cfg_);
  ASSERT_TRUE(v.ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    v->reset();  // the child destroys its inherited copy
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(std::filesystem::exists(uds_));
  v->reset();  // the owner removes it
  EXPECT_FALSE(std::filesystem::exists(uds_));
}

TEST_F(VsockTest, HostInitiatedConnectionRelaysBothWays) {
  Start();
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONNECT 52\n");
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->hdr.src_cid, kVsockHostCid);
  EXPECT_EQ(req->hdr.dst_cid, testing::kGuestCid);
  EXPECT_EQ(req->hdr.dst_port, 52u);
  EXPECT_GE(req->hdr.src_port, 1u << 30);
  EXPECT_EQ(req->hdr.type, kVsockTypeStream);
  EXPECT_EQ(req->hdr.buf_alloc, cfg_.conn_buf_size);
  const uint32_t hp = req->hdr.src_port;

  SendTx(Hdr(kVsockOpResponse, 52, hp));
  EXPECT_EQ(HostRead(host.get(), 14), "OK " + std::to_string(hp) + "\n");
  EXPECT_EQ(vsock_->connection_count(), 1u);

  HostWrite(host.get(), "ping");
  auto rw = WaitRx(kVsockOpRw);
  ASSERT_TRUE(rw.has_value());
  EXPECT_EQ(rw->payload, "ping");
  EXPECT_EQ(rw->hdr.src_port, hp);
  EXPECT_EQ(rw->hdr.dst_port, 52u);

  SendTx(Hdr(kVsockOpRw, 52, hp, 4), "pong");
  EXPECT_EQ(HostRead(host.get(), 4), "pong");

  // The guest closes: the host sees EOF, the guest gets the final RST.
  SendTx(Hdr(kVsockOpShutdown, 52, hp));  // flags 0: nothing yet
  auto shut = Hdr(kVsockOpShutdown, 52, hp);
  shut.flags = kVsockShutdownBoth;
  SendTx(shut);
  bool eof = false;
  HostRead(host.get(), 1, &eof);
  EXPECT_TRUE(eof);
  EXPECT_TRUE(WaitRx(kVsockOpRst).has_value());
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, HostCloseBecomesShutdownAndGuestRstFinishes) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  HostWrite(host.get(), "last words");
  host.reset();
  auto rw = WaitRx(kVsockOpRw);
  ASSERT_TRUE(rw.has_value());
  EXPECT_EQ(rw->payload, "last words");
  auto shut = WaitRx(kVsockOpShutdown);
  ASSERT_TRUE(shut.has_value());
  EXPECT_EQ(shut->hdr.flags, kVsockShutdownBoth);
  SendTx(Hdr(kVsockOpRst, 52, hp));
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, HostHalfCloseStillGetsTheReply) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  HostWrite(host.get(), "request");
  ::shutdown(host.get(), SHUT_WR);
  auto shut = WaitRx(kVsockOpShutdown);
  ASSERT_TRUE(shut.has_value());
  EXPECT_EQ(shut->hdr.flags, kVsockShutdownSend);
  SendTx(Hdr(kVsockOpRw, 52, hp, 5), "reply");
  EXPECT_EQ(HostRead(host.get(), 5), "reply");
}

TEST_F(VsockTest, ConnectLineSplitAcrossWritesWithDataBehindIt) {
  Start();
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONN");
  RunUntil([] { return false; }, 30);
  EXPECT_TRUE(TakeRx().empty());
  HostWrite(host.get(), "ECT 1234\nhello");
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->hdr.dst_port, 1234u);
  SendTx(Hdr(kVsockOpResponse, 1234, req->hdr.src_port));
  auto rw = WaitRx(kVsockOpRw);
  ASSERT_TRUE(rw.has_value());
  EXPECT_EQ(rw->payload, "hello");
  EXPECT_EQ(HostRead(host.get(), 5).substr(0, 3), "OK ");
}

TEST_F(VsockTest, GuestRefusalClosesHostSocket) {
  Start();
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONNECT 9\n");
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  SendTx(Hdr(kVsockOpRst, 9, req->hdr.src_port));
  bool eof = false;
  EXPECT_EQ(HostRead(host.get(), 1, &eof), "");
  EXPECT_TRUE(eof);
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, UnansweredRequestTimesOut) {
  cfg_.connect_timeout = std::chrono::milliseconds(50);
  Start();
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONNECT 9\n");
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  bool eof = false;
  EXPECT_EQ(HostRead(host.get(), 1, &eof), "");
  EXPECT_TRUE(eof);
  auto rst = WaitRx(kVsockOpRst);
  ASSERT_TRUE(rst.has_value());
  EXPECT_EQ(rst->hdr.src_port, req->hdr.src_port);
  // A late answer gets a reset instead of a half-open connection.
  SendTx(Hdr(kVsockOpResponse, 9, req->hdr.src_port));
  EXPECT_TRUE(WaitRx(kVsockOpRst).has_value());
}

TEST_F(VsockTest, GuestInitiatedConnectionToListeningHostPort) {
  Start();
  UniqueFd listener = Listen(uds_ + "_1234");
  SendTx(Hdr(kVsockOpRequest, 5000, 1234));
  auto resp = WaitRx(kVsockOpResponse);
  ASSERT_TRUE(resp.has_value());
  EXPECT_EQ(resp->hdr.src_port, 1234u);
  EXPECT_EQ(resp->hdr.dst_port, 5000u);
  UniqueFd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK));
  ASSERT_TRUE(peer.valid());
  SendTx(Hdr(kVsockOpRw, 5000, 1234, 3), "abc");
  EXPECT_EQ(HostRead(peer.get(), 3), "abc");
  HostWrite(peer.get(), "xyz");
  auto rw = WaitRx(kVsockOpRw);
  ASSERT_TRUE(rw.has_value());
  EXPECT_EQ(rw->payload, "xyz");
}

TEST_F(VsockTest, GuestConnectWithoutListenerIsReset) {
  Start();
  SendTx(Hdr(kVsockOpRequest, 5000, 4321));
  auto rst = WaitRx(kVsockOpRst);
  ASSERT_TRUE(rst.has_value());
  EXPECT_EQ(rst->hdr.dst_port, 5000u);
  EXPECT_EQ(rst->hdr.src_port, 4321u);
  EXPECT_EQ(vsock_->connection_count(), 0u);
}

TEST_F(VsockTest, WaitsForRxBuffersAndResumesOnRxKick) {
  Start(/*rx_buffers=*/0);
  UniqueFd host = Connect(uds_);
  HostWrite(host.get(), "CONNECT 52\n");
  RunUntil([] { return false; }, 50);
  EXPECT_EQ(rx_->used_idx(), 0);
  PostRx(2);  // adds buffers and kicks the RX queue
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->hdr.dst_port, 52u);
}

TEST_F(VsockTest, TransportResetPostsEventAndDropsConnections) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  ASSERT_EQ(vsock_->connection_count(), 1u);
  ASSERT_TRUE(vsock_->SetGuestCid(9).ok());
  vsock_->SendTransportReset();
  auto ev = ev_->TakeUsed();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].len, 4u);
  EXPECT_EQ(vsock_->connection_count(), 0u);
  bool eof = false;
  HostRead(host.get(), 1, &eof);
  EXPECT_TRUE(eof);
  // The listener survives: a new connection works with the new CID.
  UniqueFd again = Connect(uds_);
  HostWrite(again.get(), "CONNECT 52\n");
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->hdr.dst_cid, 9u);
}

TEST_F(VsockTest, TransportResetWaitsForAnEventBuffer) {
  Start();
  while (!ev_->TakeUsed().empty()) {
  }
  for (int i = 0; i < 4; ++i) vsock_->SendTransportReset();  // uses all 4 buffers
  EXPECT_EQ(ev_->TakeUsed().size(), 4u);
  vsock_->SendTransportReset();  // none left: pending
  EXPECT_TRUE(ev_->TakeUsed().empty());
  ev_->AddChain({{heap_.Alloc(4), 4, true}});
  drv_->Notify(Vsock::kEventQueue);
  EXPECT_EQ(ev_->TakeUsed().size(), 1u);
}

TEST_F(VsockTest, DeviceResetClosesConnectionsAndKeepsListening) {
  Start();
  uint32_t hp = 0;
  UniqueFd host = Establish(52, &hp);
  drv_->Write32(0x70, 0);
  EXPECT_EQ(vsock_->connection_count(), 0u);
  bool eof = false;
  HostRead(host.get(), 1, &eof);
  EXPECT_TRUE(eof);
  // A peer that connects while the device is down waits in the backlog and is
  // served once the driver is back.
  UniqueFd early = Connect(uds_);
  HostWrite(early.get(), "CONNECT 7\n");
  rx_bufs_.clear();
  rx_ = std::make_unique<testing::DriverQueue>(*mem_, 0x40000, 128);
  tx_ = std::make_unique<testing::DriverQueue>(*mem_, 0x50000, 128);
  ev_ = std::make_unique<testing::DriverQueue>(*mem_, 0x60000, 8);
  ASSERT_TRUE(drv_->Init(testing::kAllFeatures, {rx_.get(), tx_.get(), ev_.get()}));
  PostRx(4);
  auto req = WaitRx(kVsockOpRequest);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->hdr.dst_port, 7u);
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
