#include "vmm/devices/virtio/rng.h"

#include <gtest/gtest.h>

#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/devices/virtio/test_driver.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using testing::CountingInterrupt;
using testing::DriverQueue;
using testing::MmioDriver;

class RngTest : public ::testing::Test {
 protected:
  void Start(uint32_t cap) {
    auto m = GuestMemory::CreateAnonymous({{0, 1 << 20}});
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
    irq_ = std::make_shared<CountingInterrupt>();
    auto t = MmioTransport::Create(std::make_unique<Rng>(cap), *mem_, irq_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    t_ = std::move(*t);
    drv_ = std::make_unique<MmioDriver>(*t_);
    q_ = std::make_unique<DriverQueue>(*mem_, 0x1000, 64);
    ASSERT_EQ(drv_->Read32(0x08), kDeviceIdRng);
    ASSERT_TRUE(drv_->Init(testing::kAllFeatures, {q_.get()}));
  }
  // Number of non-zero bytes in [gpa, gpa+len).
  size_t NonZero(GuestAddress gpa, size_t len) {
    std::vector<uint8_t> b(len);
    EXPECT_TRUE(mem_->Read(gpa, b.data(), len).ok());
    size_t n = 0;
    for (uint8_t x : b) n += x != 0;
    return n;
  }

  std::unique_ptr<GuestMemory> mem_;
  std::shared_ptr<CountingInterrupt> irq_;
  std::unique_ptr<MmioTransport> t_;
  std::unique_ptr<MmioDriver> drv_;
  std::unique_ptr<DriverQueue> q_;
};

TEST_F(RngTest, FillsWritableBuffers) {
  Start(Rng::kDefaultMaxBytesPerRequest);
  q_->AddChain({{0x10000, 256, true}, {0x20000, 256, true}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 512u);
  // 256 random bytes are all zero with probability 2^-2048; a few zeros are normal.
  EXPECT_GT(NonZero(0x10000, 256), 200u);
  EXPECT_GT(NonZero(0x20000, 256), 200u);
  EXPECT_EQ(irq_->count, 1);
}

TEST_F(RngTest, CapsBytesPerRequest) {
  Start(100);
  q_->AddChain({{0x10000, 4096, true}});
  q_->AddChain({{0x20000, 64, true}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 2u);
  EXPECT_EQ(used[0].len, 100u);
  EXPECT_EQ(used[1].len, 64u);
  EXPECT_EQ(NonZero(0x10000 + 100, 4096 - 100), 0u);  // nothing past the cap
  EXPECT_EQ(irq_->count, 1);  // one interrupt for the batch
}

TEST_F(RngTest, ReadOnlyBufferGetsNothing) {
  Start(Rng::kDefaultMaxBytesPerRequest);
  q_->AddChain({{0x10000, 64, false}});
  drv_->Notify(0);
  auto used = q_->TakeUsed();
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].len, 0u);
  EXPECT_EQ(NonZero(0x10000, 64), 0u);
}

// The used ring over the avail ring, the used index one ahead: each used
// entry the device adds moves the avail index on, the zeroed entries it
// writes name head 0 again, and a drain used to go on for ever under the
// transport's lock (device_persist_fuzzer, input in
// fuzz/vmm/corpus/device_persist/regress-used-ring-feeds-avail). The
// queue breaks instead. A guest can set this up through the queue
// registers; the restore path is the shortest way to it.
TEST(RngHostileTest, UsedRingOverTheAvailRingBreaksTheQueue) {
  auto m = GuestMemory::CreateAnonymous({{0, 1 << 20}});
  ASSERT_TRUE(m.ok());
  auto irq = std::make_shared<CountingInterrupt>();
  auto t = MmioTransport::Create(std::make_unique<Rng>(), **m, irq);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // desc[0] at 0x1000 is all zeros: a readable buffer of 0 bytes, so the
  // device writes nothing and every used entry it adds is {id 0, len 0}.
  ASSERT_TRUE((*m)->StoreRelease16(0x2002, 1).ok());  // avail idx = used idx = 1
  MmioTransportState st;
  st.status = kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk;
  st.driver_features = uint64_t{1} << 32;  // VIRTIO_F_VERSION_1
  QueueState q;
  q.size = 16;
  q.ready = true;
  q.desc_table = 0x1000;
  q.avail_ring = 0x2000;
  q.used_ring = 0x2000;
  q.next_avail = 0;
  q.next_used = 1;
  st.queues = {q};
  ASSERT_TRUE((*t)->RestoreState(st).ok());
  (*t)->NotifyQueue(0);  // returns
  EXPECT_NE((*t)->status() & kStatusDeviceNeedsReset, 0u);
  const QueueState after = (*t)->SaveState().queues.at(0);
  EXPECT_LE(after.next_avail, kDrainRingsBound * q.size + 1);
}

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
