#include "vmm/devices/virtio/rng.h"

#include <gtest/gtest.h>

#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/devices/virtio/test_driver.h"
#include "vmm/devices/virtio/virtio_spec.h"

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

}  // namespace
}  // namespace kubicle::vmm::devices::virtio
