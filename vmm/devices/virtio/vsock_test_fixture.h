// Test fixture for virtio-vsock: a Vsock behind a real MmioTransport and a
// real EventLoop run on the test thread, a fake guest driver that posts RX
// buffers the way Linux does (44-byte header + 4 KiB data), sends TX packets
// and parses what the device delivers, and helpers for host-side peers.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/event_loop.h"
#include "common/unique_fd.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/devices/virtio/test_driver.h"
#include "vmm/devices/virtio/vsock.h"

namespace kubicle::vmm::devices::virtio::testing {

struct RxPacket {
  VsockHeader hdr;
  std::string payload;
};

inline constexpr uint64_t kGuestCid = 3;
inline constexpr uint32_t kRxData = 4096;

class VsockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-vsock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    uds_ = dir_ + "/v.sock";
    cfg_.guest_cid = kGuestCid;
    cfg_.uds_path = uds_;
    auto m = GuestMemory::CreateAnonymous({{0, 64 << 20}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(*loop);
  }
  void TearDown() override {
    t_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Creates the device with cfg_ and probes it like a Linux driver.
  void Start(int rx_buffers = 32) {
    auto v = Vsock::Create(cfg_);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vsock_ = v->get();
    irq_ = std::make_shared<CountingInterrupt>();
    auto t = MmioTransport::Create(std::move(*v), *mem_, irq_, loop_.get());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    t_ = std::move(*t);
    drv_ = std::make_unique<MmioDriver>(*t_);
    rx_ = std::make_unique<DriverQueue>(*mem_, 0x10000, 128);
    tx_ = std::make_unique<DriverQueue>(*mem_, 0x20000, 128);
    ev_ = std::make_unique<DriverQueue>(*mem_, 0x30000, 8);
    ASSERT_TRUE(drv_->Init(kAllFeatures, {rx_.get(), tx_.get(), ev_.get()}));
    PostRx(rx_buffers);
    for (int i = 0; i < 4; ++i) ev_->AddChain({{heap_.Alloc(4), 4, true}});
  }

  void PostRx(int n, bool kick = true) {
    for (int i = 0; i < n; ++i) {
      GuestAddress hdr = heap_.Alloc(sizeof(VsockHeader)), data = heap_.Alloc(kRxData);
      uint16_t head = rx_->AddChain({{hdr, sizeof(VsockHeader), true}, {data, kRxData, true}});
      rx_bufs_[head] = {hdr, data};
    }
    if (kick) drv_->Notify(Vsock::kRxQueue);
  }

  // Packets the device delivered since the last call; their buffers are
  // re-posted when refill is set (Linux refills as it consumes).
  std::vector<RxPacket> TakeRx(bool refill = true) {
    std::vector<RxPacket> out;
    for (const VirtqUsedElem& e : rx_->TakeUsed()) {
      auto [hdr_addr, data_addr] = rx_bufs_.at(static_cast<uint16_t>(e.id));
      RxPacket p{};
      EXPECT_GE(e.len, sizeof(VsockHeader));
      p.hdr = *mem_->ReadObj<VsockHeader>(hdr_addr);
      EXPECT_EQ(e.len, sizeof(VsockHeader) + p.hdr.len);
      p.payload.resize(std::min<uint32_t>(p.hdr.len, kRxData));
      EXPECT_TRUE(mem_->Read(data_addr, p.payload.data(), p.payload.size()).ok());
      out.push_back(std::move(p));
      rx_bufs_.erase(static_cast<uint16_t>(e.id));
    }
    if (refill && !out.empty()) PostRx(static_cast<int>(out.size()));
    rx_log_.insert(rx_log_.end(), out.begin(), out.end());
    return out;
  }

  VsockHeader Hdr(uint16_t op, uint32_t src_port, uint32_t dst_port, uint32_t len = 0) {
    VsockHeader h{};
    h.src_cid = kGuestCid;
    h.dst_cid = kVsockHostCid;
    h.src_port = src_port;
    h.dst_port = dst_port;
    h.len = len;
    h.type = kVsockTypeStream;
    h.op = op;
    h.buf_alloc = guest_buf_alloc_;
    h.fwd_cnt = guest_fwd_cnt_;
    return h;
  }
  // Puts one packet on the TX queue (header and payload in separate
  // descriptors, as Linux does) and kicks it.
  void SendTx(const VsockHeader& h, std::string_view payload = {}, uint32_t hdr_len = 44) {
    GuestAddress ha = heap_.Alloc(sizeof(VsockHeader));
    ASSERT_TRUE(mem_->WriteObj(ha, h).ok());
    std::vector<Buf> bufs{{ha, hdr_len, false}};
    if (!payload.empty()) {
      GuestAddress pa = heap_.Alloc(payload.size());
      ASSERT_TRUE(mem_->Write(pa, payload.data(), payload.size()).ok());
      bufs.push_back({pa, static_cast<uint32_t>(payload.size()), false});
    }
    tx_->AddChain(bufs);
    drv_->Notify(Vsock::kTxQueue);
    tx_->TakeUsed();
  }

  bool RunUntil(const std::function<bool()>& done, int timeout_ms = 3000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!done() && std::chrono::steady_clock::now() < end) EXPECT_TRUE(loop_->RunOnce(5).ok());
    return done();
  }
  // Runs the loop until a packet with op arrives; returns it. Packets before
  // it are skipped, packets after it stay for the next call.
  std::optional<RxPacket> WaitRx(uint16_t op, int timeout_ms = 3000) {
    std::optional<RxPacket> found;
    RunUntil([&] {
      for (RxPacket& p : TakeRx()) pending_rx_.push_back(std::move(p));
      while (!found && !pending_rx_.empty()) {
        if (pending_rx_.front().hdr.op == op) found = pending_rx_.front();
        pending_rx_.pop_front();
      }
      return found.has_value();
    }, timeout_ms);
    return found;
  }

  // A non-blocking host peer connected to `path`.
  static UniqueFd Connect(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << path;
    return fd;
  }
  static UniqueFd Listen(const std::string& path) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd.get(), 8), 0);
    return fd;
  }
  static void HostWrite(int fd, std::string_view s) {
    ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // Reads from a host peer while running the loop, until `want` bytes or
  // EOF (*eof set) or the timeout.
  std::string HostRead(int fd, size_t want, bool* eof = nullptr, int timeout_ms = 3000) {
    std::string got;
    bool closed = false;
    RunUntil([&] {
      char buf[65536];
      while (true) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) got.append(buf, static_cast<size_t>(n));
        if (n == 0) closed = true;
        if (n <= 0) break;
      }
      return closed || got.size() >= want;
    }, timeout_ms);
    if (eof) *eof = closed;
    return got;
  }

  // Host connects with CONNECT <port>; the guest accepts. Returns the host
  // fd and sets *host_port.
  UniqueFd Establish(uint32_t guest_port, uint32_t* host_port) {
    UniqueFd fd = Connect(uds_);
    HostWrite(fd.get(), "CONNECT " + std::to_string(guest_port) + "\n");
    auto req = WaitRx(kVsockOpRequest);
    EXPECT_TRUE(req.has_value());
    if (!req) return fd;
    *host_port = req->hdr.src_port;
    SendTx(Hdr(kVsockOpResponse, guest_port, *host_port));
    std::string ok = HostRead(fd.get(), 3 + std::to_string(*host_port).size() + 1);
    EXPECT_EQ(ok, "OK " + std::to_string(*host_port) + "\n");
    return fd;
  }

  std::string dir_, uds_;
  VsockConfig cfg_;
  std::unique_ptr<GuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::shared_ptr<CountingInterrupt> irq_;
  Vsock* vsock_ = nullptr;
  std::unique_ptr<MmioTransport> t_;
  std::unique_ptr<MmioDriver> drv_;
  std::unique_ptr<DriverQueue> rx_, tx_, ev_;
  GuestHeap heap_{0x100000, 60 << 20};
  std::map<uint16_t, std::pair<GuestAddress, GuestAddress>> rx_bufs_;
  std::vector<RxPacket> rx_log_;
  std::deque<RxPacket> pending_rx_;
  uint32_t guest_buf_alloc_ = 256 * 1024;
  uint32_t guest_fwd_cnt_ = 0;
};

}  // namespace kubicle::vmm::devices::virtio::testing
