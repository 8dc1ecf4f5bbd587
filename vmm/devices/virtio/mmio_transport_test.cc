#include "vmm/devices/virtio/mmio_transport.h"

#include <gtest/gtest.h>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/test_driver.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::CountingInterrupt;
using testing::DriverQueue;
using testing::MmioDriver;

constexpr uint64_t kOffered = FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx) | 1;

// Records what the transport asks of it; consumes every chain it is kicked for.
class FakeDevice : public VirtioDevice {
 public:
  std::string_view name() const override { return "fake"; }
  uint32_t device_id() const override { return 42; }
  uint64_t device_features() const override { return kOffered; }
  uint16_t num_queues() const override { return 2; }
  uint16_t queue_max_size(uint16_t) const override { return 64; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override {
    CopyConfig(config, offset, data);
  }
  void WriteConfig(uint64_t offset, std::span<const uint8_t> data) override { ++config_writes; }
  Status Activate() override {
    ++activations;
    return fail_activate ? Status::Internal("no") : Status::Ok();
  }
  void ProcessQueue(uint16_t index) override {
    kicks.push_back(index);
    Queue& q = context()->queue(index);
    DescriptorChain c;
    while (true) {
      auto r = q.Pop(context()->memory(), &c);
      if (!r.ok() || !*r) break;
      (void)q.AddUsed(context()->memory(), c.head, 0);
    }
    context()->SignalUsed(index);
  }
  void Reset() override { ++resets; }
  void ChangeConfig() {
    auto lock = LockTransport();
    config[0]++;
    context()->SignalConfigChange();
  }
  uint64_t acked() const { return context()->acked_features(); }

  std::array<uint8_t, 8> config{1, 2, 3, 4, 5, 6, 7, 8};
  int activations = 0, resets = 0, config_writes = 0;
  bool fail_activate = false;
  std::vector<uint16_t> kicks;
};

class MmioTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = GuestMemory::CreateAnonymous({{0, 1 << 20}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
    irq_ = std::make_shared<CountingInterrupt>();
    auto dev = std::make_unique<FakeDevice>();
    dev_ = dev.get();
    auto t = MmioTransport::Create(std::move(dev), *mem_, irq_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    t_ = std::move(*t);
    drv_ = std::make_unique<MmioDriver>(*t_);
    q0_ = std::make_unique<DriverQueue>(*mem_, 0x1000, 16);
    q1_ = std::make_unique<DriverQueue>(*mem_, 0x3000, 32);
  }
  bool Init(uint64_t wanted = testing::kAllFeatures) { return drv_->Init(wanted, {q0_.get(), q1_.get()}); }
  uint32_t ReadSized(uint64_t off, size_t n) {
    uint64_t v = 0;
    t_->Read(off, {reinterpret_cast<uint8_t*>(&v), n});
    return static_cast<uint32_t>(v);
  }

  std::unique_ptr<GuestMemory> mem_;
  std::shared_ptr<CountingInterrupt> irq_;
  FakeDevice* dev_ = nullptr;
  std::unique_ptr<MmioTransport> t_;
  std::unique_ptr<MmioDriver> drv_;
  std::unique_ptr<DriverQueue> q0_, q1_;
};

TEST_F(MmioTransportTest, IdentityAndConfigSpace) {
  EXPECT_EQ(drv_->Read32(0x000), 0x74726976u);
  EXPECT_EQ(drv_->Read32(0x004), 2u);
  EXPECT_EQ(drv_->Read32(0x008), 42u);
  EXPECT_EQ(drv_->Read32(0x00c), MmioTransport::kVendorId);
  EXPECT_EQ(drv_->DeviceFeatures(), kOffered);
  EXPECT_EQ(ReadSized(0x100, 1), 1u);
  EXPECT_EQ(ReadSized(0x102, 2), 0x0403u);
  EXPECT_EQ(ReadSized(0x104, 4), 0x08070605u);
  EXPECT_EQ(ReadSized(0x108, 4), 0u);  // past the device's config
  drv_->Write32(0x30, 1);
  EXPECT_EQ(drv_->Read32(0x034), 64u);
  drv_->Write32(0x30, 7);  // no such queue
  EXPECT_EQ(drv_->Read32(0x034), 0u);
}

TEST_F(MmioTransportTest, FullInitActivatesWithNegotiatedFeatures) {
  ASSERT_TRUE(Init());
  EXPECT_EQ(drv_->Read32(0x70), kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk |
                                    kStatusDriverOk);
  EXPECT_EQ(dev_->activations, 1);
  EXPECT_EQ(dev_->acked(), kOffered);
  auto st = t_->SaveState();
  EXPECT_TRUE(st.queues[0].event_idx);
  EXPECT_EQ(st.queues[1].size, 32);
  EXPECT_EQ(st.queues[1].used_ring, q1_->used());
}

TEST_F(MmioTransportTest, RefusesDriverWithoutVersion1) {
  EXPECT_FALSE(drv_->Negotiate(FeatureBit(kFeatureRingEventIdx)));
  drv_->DriverOk();
  EXPECT_FALSE(t_->active());
  EXPECT_EQ(dev_->activations, 0);
}

TEST_F(MmioTransportTest, RefusesFeaturesThatWereNotOffered) {
  drv_->Write32(0x70, kStatusAcknowledge | kStatusDriver);
  drv_->Write32(0x24, 1);
  drv_->Write32(0x20, 1 | 4);  // VERSION_1 and bit 34, not offered
  drv_->Write32(0x70, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk);
  EXPECT_EQ(drv_->Read32(0x70) & kStatusFeaturesOk, 0u);
}

TEST_F(MmioTransportTest, InvalidQueueAtDriverOkNeedsReset) {
  ASSERT_TRUE(drv_->Negotiate(testing::kAllFeatures));
  drv_->SetupQueue(0, *q0_);
  DriverQueue outside(*mem_, (1 << 20) - 0x100, 16);  // rings run past RAM
  drv_->SetupQueue(1, outside);
  drv_->DriverOk();
  EXPECT_FALSE(t_->active());
  EXPECT_EQ(dev_->activations, 0);
  EXPECT_NE(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
  EXPECT_EQ(drv_->AckInterrupts(), kInterruptConfigChange);
  EXPECT_EQ(irq_->count, 1);
}

TEST_F(MmioTransportTest, FailedActivationNeedsReset) {
  dev_->fail_activate = true;
  EXPECT_FALSE(Init());
  EXPECT_NE(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
}

TEST_F(MmioTransportTest, NotifyWriteAndNotifyQueueProcessTheQueue) {
  drv_->Notify(0);  // before DRIVER_OK: ignored
  EXPECT_TRUE(dev_->kicks.empty());
  ASSERT_TRUE(Init());
  q1_->AddChain({{0x8000, 16, true}});
  drv_->Notify(1);
  ASSERT_EQ(dev_->kicks, std::vector<uint16_t>{1});
  EXPECT_EQ(q1_->TakeUsed().size(), 1u);
  EXPECT_EQ(irq_->count, 1);
  EXPECT_EQ(drv_->AckInterrupts(), kInterruptUsedBuffer);
  EXPECT_EQ(drv_->Read32(0x60), 0u);
  t_->NotifyQueue(0);
  t_->NotifyQueue(9);  // unknown queue: ignored
  drv_->Notify(2);
  EXPECT_EQ(dev_->kicks, (std::vector<uint16_t>{1, 0}));
}

TEST_F(MmioTransportTest, ResetTearsDownAndAllowsReinit) {
  ASSERT_TRUE(Init());
  drv_->Write32(0x70, 0);
  EXPECT_EQ(dev_->resets, 1);
  EXPECT_FALSE(t_->active());
  EXPECT_EQ(drv_->Read32(0x70), 0u);
  drv_->Write32(0x30, 0);
  EXPECT_EQ(drv_->Read32(0x44), 0u);
  EXPECT_EQ(drv_->Read32(0x38), 64u);  // QueueNum back to max
  EXPECT_EQ(t_->SaveState().driver_features, 0u);
  ASSERT_TRUE(Init());
  EXPECT_EQ(dev_->activations, 2);
  // Reset of an inactive device does not call the device.
  drv_->Write32(0x70, 0);
  drv_->Write32(0x70, 0);
  EXPECT_EQ(dev_->resets, 2);
}

TEST_F(MmioTransportTest, BadAccessesAreIgnored) {
  EXPECT_EQ(ReadSized(0x000, 2), 0u);  // narrow register read
  EXPECT_EQ(ReadSized(0x002, 4), 0u);  // unaligned
  EXPECT_EQ(ReadSized(0x0e0, 4), 0u);  // unknown register
  EXPECT_EQ(ReadSized(0x101, 2), 0u);  // unaligned config
  EXPECT_EQ(ReadSized(0x100, 3), 0u);  // odd size
  uint64_t big = 0;
  t_->Read(0xffc, {reinterpret_cast<uint8_t*>(&big), 8});  // runs past the window
  EXPECT_EQ(big, 0u);
  uint16_t half = 0xffff;
  t_->Write(0x070, {reinterpret_cast<uint8_t*>(&half), 2});
  EXPECT_EQ(drv_->Read32(0x70), 0u);
  drv_->Write32(0x0e0, 1);
  ASSERT_TRUE(Init());
  // Queue registers are frozen after DRIVER_OK, status bits cannot be cleared.
  drv_->Write32(0x30, 0);
  drv_->Write32(0x38, 4);
  EXPECT_EQ(drv_->Read32(0x38), 16u);
  drv_->Write32(0x70, kStatusAcknowledge);
  EXPECT_TRUE(t_->active());
  EXPECT_EQ(dev_->resets, 0);
}

TEST_F(MmioTransportTest, ConfigChangeBumpsGenerationAndInterrupts) {
  uint32_t gen = drv_->Read32(0xfc);
  dev_->ChangeConfig();  // inactive: no interrupt
  EXPECT_EQ(drv_->Read32(0xfc), gen + 1);
  EXPECT_EQ(irq_->count, 0);
  ASSERT_TRUE(Init());
  dev_->ChangeConfig();
  EXPECT_EQ(drv_->AckInterrupts(), kInterruptConfigChange);
  EXPECT_EQ(irq_->count, 1);
}

TEST_F(MmioTransportTest, SaveAndRestoreReactivates) {
  ASSERT_TRUE(Init());
  q0_->AddChain({{0x8000, 16, true}});
  t_->NotifyQueue(0);
  MmioTransportState saved = t_->SaveState();
  EXPECT_EQ(saved.queues[0].next_avail, 1);

  auto dev = std::make_unique<FakeDevice>();
  FakeDevice* d2 = dev.get();
  auto t2 = MmioTransport::Create(std::move(dev), *mem_, irq_);
  ASSERT_TRUE(t2.ok());
  ASSERT_TRUE((*t2)->RestoreState(saved).ok());
  EXPECT_TRUE((*t2)->active());
  EXPECT_EQ(d2->activations, 1);
  EXPECT_EQ((*t2)->SaveState(), saved);
  (*t2)->KickQueues();
  EXPECT_EQ(d2->kicks, (std::vector<uint16_t>{0, 1}));
  // With no new used entries the queues ask for nothing; the kick still
  // interrupts once so a driver waiting on a stale used_event wakes up.
  int before = irq_->count;
  (*t2)->KickQueues();
  EXPECT_EQ(irq_->count, before + 1);

  saved.queues.pop_back();
  EXPECT_FALSE((*t2)->RestoreState(saved).ok());
}

TEST_F(MmioTransportTest, HostileRingBreaksQueueAndNeedsReset) {
  ASSERT_TRUE(Init());
  q0_->SetAvailIdx(100);  // 100 entries in a 16-entry ring
  drv_->Notify(0);
  EXPECT_NE(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
  EXPECT_EQ(drv_->AckInterrupts() & kInterruptConfigChange, kInterruptConfigChange);
  drv_->Notify(0);  // a broken queue is not kicked again
  EXPECT_EQ(dev_->kicks, std::vector<uint16_t>{0});
  // A reset brings it back.
  q0_->SetAvailIdx(0);
  ASSERT_TRUE(Init());
  q0_->AddChain({{0x8000, 16, true}});
  drv_->Notify(0);
  EXPECT_EQ(q0_->TakeUsed().size(), 1u);
  EXPECT_EQ(drv_->Read32(0x70) & kStatusDeviceNeedsReset, 0u);
}

TEST_F(MmioTransportTest, ConfigWritesReachTheDevice) {
  uint8_t b = 9;
  t_->Write(0x104, {&b, 1});
  EXPECT_EQ(dev_->config_writes, 1);
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
