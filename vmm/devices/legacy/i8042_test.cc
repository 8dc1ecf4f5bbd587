#include "vmm/devices/legacy/i8042.h"

#include <gtest/gtest.h>

#include <atomic>

namespace kubicle::vmm::devices::legacy {
namespace {

class CountingIrq : public InterruptLine {
 public:
  Status Trigger() override {
    ++count;
    return Status::Ok();
  }
  std::atomic<int> count{0};
};

class I8042Test : public ::testing::Test {
 protected:
  I8042Test() : irq_(std::make_shared<CountingIrq>()), dev_([this] { ++resets_; }, irq_) {}
  uint8_t In(uint64_t off) {
    uint8_t b = 0;
    dev_.Read(off, std::span<uint8_t>(&b, 1));
    return b;
  }
  void Out(uint64_t off, uint8_t v) { dev_.Write(off, std::span<const uint8_t>(&v, 1)); }
  uint8_t StatusReg() { return In(I8042::kCommandOffset); }
  void Command(uint8_t c) { Out(I8042::kCommandOffset, c); }
  uint8_t Data() { return In(I8042::kDataOffset); }

  std::shared_ptr<CountingIrq> irq_;
  int resets_ = 0;
  I8042 dev_;
};

TEST_F(I8042Test, StatusIsSaneAtStart) {
  EXPECT_EQ(StatusReg() & 0x01, 0);  // nothing to read
  EXPECT_EQ(StatusReg() & 0x04, 0x04);  // self-test passed
  EXPECT_EQ(StatusReg() & 0x02, 0);  // input buffer never busy
}

TEST_F(I8042Test, ResetCommandCallsTheCallback) {
  Command(0xfe);
  EXPECT_EQ(resets_, 1);
  EXPECT_EQ(dev_.reset_count(), 1u);
  Command(0xff);  // pulses no line: not a reset
  EXPECT_EQ(resets_, 1);
}

TEST_F(I8042Test, OutputPortResetLine) {
  Command(0xd0);
  EXPECT_EQ(Data(), 0x03);
  Command(0xd1);
  Out(I8042::kDataOffset, 0x03);  // reset line high: no reset
  EXPECT_EQ(resets_, 0);
  Command(0xd1);
  Out(I8042::kDataOffset, 0x02);  // reset line low
  EXPECT_EQ(resets_, 1);
}

TEST_F(I8042Test, SelfTestAndCommandByte) {
  Command(0xaa);
  EXPECT_EQ(StatusReg() & 0x09, 0x09);  // output full, last write was a command
  EXPECT_EQ(Data(), 0x55);
  EXPECT_EQ(StatusReg() & 0x01, 0);
  Command(0x20);
  EXPECT_EQ(Data(), 0x45);
  Command(0x60);
  Out(I8042::kDataOffset, 0x44);  // keyboard interrupt off
  Command(0x20);
  EXPECT_EQ(Data(), 0x44);
}

TEST_F(I8042Test, KeyboardCommandsAreAckedWithInterrupts) {
  Out(I8042::kDataOffset, 0xff);  // keyboard reset
  EXPECT_EQ(Data(), 0xfa);
  EXPECT_EQ(Data(), 0xaa);
  EXPECT_GE(irq_->count, 1);
  int before = irq_->count;
  Command(0x60);
  Out(I8042::kDataOffset, 0x44);  // interrupts off
  Out(I8042::kDataOffset, 0xf4);
  EXPECT_EQ(Data(), 0xfa);
  EXPECT_EQ(irq_->count, before);
}

TEST_F(I8042Test, OutputBufferIsBounded) {
  for (int i = 0; i < 100; ++i) Out(I8042::kDataOffset, 0xf4);
  int n = 0;
  while (StatusReg() & 0x01) {
    Data();
    ++n;
  }
  EXPECT_EQ(n, 16);
}

TEST_F(I8042Test, OddAccessesAreHarmless) {
  uint8_t wide[2] = {0xfe, 0xfe};
  dev_.Write(4, std::span<const uint8_t>(wide, 2));
  EXPECT_EQ(resets_, 0);
  EXPECT_EQ(In(2), 0xff);
  Out(2, 0xfe);
  EXPECT_EQ(resets_, 0);
}

}  // namespace
}  // namespace kubicle::vmm::devices::legacy
