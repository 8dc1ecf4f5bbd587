// The guest and host ends of a virtio-net device for its unit tests: an
// in-memory NetBackend (frames queued by the test; an eventfd readable while
// any wait, as a TAP is), a transport on an event loop, and rx/tx driver
// queues probed like Linux does. Test-only.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/event_loop.h"
#include "vmm/devices/virtio/net.h"
#include "vmm/devices/virtio/test_driver.h"

namespace kubicle::vmm::devices::virtio::testing {

using Frame = std::vector<uint8_t>;

struct FakeWire {
  UniqueFd event{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};
  std::deque<Frame> to_guest;
  std::vector<Frame> from_guest;
  bool fail_sends = false;
  void Push(Frame f) {
    to_guest.push_back(std::move(f));
    uint64_t one = 1;
    ASSERT_EQ(::write(event.get(), &one, 8), 8);
  }
};

class FakeNetBackend final : public NetBackend {
 public:
  explicit FakeNetBackend(std::shared_ptr<FakeWire> wire) : wire_(std::move(wire)) {}
  int fd() const override { return wire_->event.get(); }
  Status Send(std::span<const iovec> frame) override {
    if (wire_->fail_sends) return Status::Unavailable("injected");
    Frame f;
    for (const iovec& v : frame) {
      auto* p = static_cast<const uint8_t*>(v.iov_base);
      f.insert(f.end(), p, p + v.iov_len);
    }
    wire_->from_guest.push_back(std::move(f));
    return Status::Ok();
  }
  Result<size_t> Receive(std::span<uint8_t> buf) override {
    if (wire_->to_guest.empty()) return size_t{0};
    Frame f = std::move(wire_->to_guest.front());
    wire_->to_guest.pop_front();
    if (wire_->to_guest.empty()) {
      uint64_t v;
      (void)!::read(wire_->event.get(), &v, 8);
    }
    size_t n = std::min(f.size(), buf.size());  // truncated, as a TAP read is
    std::copy_n(f.begin(), n, buf.begin());
    return n;
  }

 private:
  std::shared_ptr<FakeWire> wire_;
};

inline Frame MakeFrame(size_t len, uint8_t seed) {
  Frame f(len);
  for (size_t i = 0; i < len; ++i) f[i] = static_cast<uint8_t>(seed + i * 7);
  return f;
}

inline constexpr MacAddress kMacA{0x02, 0x4b, 0x42, 0x00, 0x00, 0x01};
inline constexpr MacAddress kMacB{0x02, 0x4b, 0x42, 0x00, 0x00, 0x02};

class NetFixture : public ::testing::Test {
 protected:
  static constexpr uint64_t kRam = 4 << 20;

  // Builds and probes the device; config.clock, if unset, is the fake clock.
  void Start(NetConfig config = {}) {
    if (config.mac == MacAddress{}) config.mac = kMacA;
    if (!config.clock) config.clock = [this] { return now_; };
    auto net = Net::Create(std::make_unique<FakeNetBackend>(wire_), config);
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    Attach(std::move(*net));
    ASSERT_TRUE(drv_->Init(kAllFeatures, {rxq_.get(), txq_.get()}));
  }
  void Attach(std::unique_ptr<VirtioDevice> device) {
    if (!mem_) {
      auto m = GuestMemory::CreateAnonymous({{0, kRam}});
      ASSERT_TRUE(m.ok());
      mem_ = std::move(*m);
      auto loop = EventLoop::Create();
      ASSERT_TRUE(loop.ok());
      loop_ = std::move(*loop);
    }
    irq_ = std::make_shared<CountingInterrupt>();
    net_ = static_cast<Net*>(device.get());
    auto t = MmioTransport::Create(std::move(device), *mem_, irq_, loop_.get());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    t_ = std::move(*t);
    drv_ = std::make_unique<MmioDriver>(*t_);
    rxq_ = std::make_unique<DriverQueue>(*mem_, 0x10000, 256);
    txq_ = std::make_unique<DriverQueue>(*mem_, 0x20000, 256);
  }
  // A tx chain: the 12-byte header then the frame, split at `split` bytes
  // into a second descriptor when nonzero.
  void SendFrame(const Frame& f, size_t split = 0, bool writable = false) {
    std::vector<uint8_t> bytes(Net::kHeaderSize, 0);
    bytes.insert(bytes.end(), f.begin(), f.end());
    GuestAddress a = heap_.Alloc(bytes.size());
    ASSERT_TRUE(mem_->Write(a, bytes.data(), bytes.size()).ok());
    uint32_t len = static_cast<uint32_t>(bytes.size());
    if (split == 0 || split >= len) {
      txq_->AddChain({{a, len, writable}});
    } else {
      txq_->AddChain({{a, static_cast<uint32_t>(split), writable},
                      {a + split, static_cast<uint32_t>(len - split), writable}});
    }
  }
  // Posts an rx buffer of len bytes; returns its address.
  GuestAddress PostRx(uint32_t len, bool writable = true) {
    GuestAddress a = heap_.Alloc(len);
    rxq_->AddChain({{a, len, writable}});
    return a;
  }
  std::vector<uint8_t> ReadGuest(GuestAddress a, size_t len) {
    std::vector<uint8_t> b(len);
    EXPECT_TRUE(mem_->Read(a, b.data(), len).ok());
    return b;
  }
  // Runs the loop until pred holds or timeout passes; returns pred().
  template <typename Pred>
  bool RunUntil(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (!pred() && std::chrono::steady_clock::now() < end) EXPECT_TRUE(loop_->RunOnce(5).ok());
    return pred();
  }
  void RunFor(std::chrono::milliseconds d) {
    RunUntil([] { return false; }, d);
  }

  Nanos now_ = 1'000'000'000;
  std::shared_ptr<FakeWire> wire_ = std::make_shared<FakeWire>();
  std::unique_ptr<GuestMemory> mem_;
  std::unique_ptr<EventLoop> loop_;
  std::shared_ptr<CountingInterrupt> irq_;
  std::unique_ptr<MmioTransport> t_;
  Net* net_ = nullptr;
  std::unique_ptr<MmioDriver> drv_;
  std::unique_ptr<DriverQueue> rxq_, txq_;
  GuestHeap heap_{0x40000, kRam - 0x40000};
};

}  // namespace kubicle::vmm::devices::virtio::testing
