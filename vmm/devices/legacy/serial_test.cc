#include "vmm/devices/legacy/serial.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

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

constexpr uint64_t kThr = 0, kIer = 1, kIir = 2, kLcr = 3, kMcr = 4, kLsr = 5, kMsr = 6, kScr = 7;

class SerialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
    read_end_.reset(fds[0]);
    write_end_.reset(::dup(fds[1]));  // same pipe, to fill it from the test
    irq_ = std::make_shared<CountingIrq>();
    serial_ = std::make_unique<Serial>(irq_, UniqueFd(fds[1]));
  }
  uint8_t In(uint64_t reg) {
    uint8_t b = 0;
    serial_->Read(reg, std::span<uint8_t>(&b, 1));
    return b;
  }
  void Out(uint64_t reg, uint8_t v) { serial_->Write(reg, std::span<const uint8_t>(&v, 1)); }
  std::string Drain() {
    char buf[256];
    ssize_t n = ::read(read_end_.get(), buf, sizeof(buf));
    return n > 0 ? std::string(buf, n) : std::string();
  }

  UniqueFd read_end_;
  UniqueFd write_end_;
  std::shared_ptr<CountingIrq> irq_;
  std::unique_ptr<Serial> serial_;
};

TEST_F(SerialTest, WrittenBytesAppearOnTheFd) {
  Out(kThr, 'h');
  Out(kThr, 'i');
  EXPECT_EQ(Drain(), "hi");
  EXPECT_EQ(irq_->count, 0);  // THRE interrupt not enabled
}

TEST_F(SerialTest, LineStatusBits) {
  EXPECT_EQ(In(kLsr), 0x60);  // THR empty + transmitter idle, no data
  const uint8_t in[] = {'a'};
  EXPECT_EQ(serial_->EnqueueInput(in), 1u);
  EXPECT_EQ(In(kLsr), 0x61);  // + data ready
  EXPECT_EQ(In(kThr), 'a');
  EXPECT_EQ(In(kLsr), 0x60);
  EXPECT_EQ(In(kMsr), 0xb0);  // DCD, DSR, CTS
}

TEST_F(SerialTest, InputIsReadBackInOrderAndBounded) {
  std::vector<uint8_t> big(Serial::kInputCapacity + 10, 'x');
  big[0] = 'a';
  big[1] = 'b';
  EXPECT_EQ(serial_->EnqueueInput(big), Serial::kInputCapacity);
  EXPECT_EQ(serial_->input_space(), 0u);
  EXPECT_EQ(In(kThr), 'a');
  EXPECT_EQ(In(kThr), 'b');
  EXPECT_EQ(serial_->input_space(), 2u);
  Out(kIir, 0x03);  // FCR: enable FIFO and clear RX
  EXPECT_EQ(serial_->input_space(), Serial::kInputCapacity);
  EXPECT_EQ(In(kLsr) & 0x01, 0);
  EXPECT_EQ(In(kThr), 0);  // empty FIFO reads 0
}

TEST_F(SerialTest, RxInterruptOnlyWhenEnabled) {
  const uint8_t in[] = {'q'};
  serial_->EnqueueInput(in);
  EXPECT_EQ(irq_->count, 0);
  EXPECT_EQ(In(kIir), 0x01);  // nothing pending while disabled
  Out(kIer, 0x01);            // enabling with data waiting raises at once
  EXPECT_EQ(irq_->count, 1);
  EXPECT_EQ(In(kIir), 0x04);
  serial_->EnqueueInput(in);
  EXPECT_EQ(irq_->count, 2);
  In(kThr);
  In(kThr);
  EXPECT_EQ(In(kIir), 0x01);
}

TEST_F(SerialTest, ThrEmptyInterruptWhenEnabled) {
  Out(kIer, 0x02);  // a 16550 interrupts as soon as THRE is unmasked
  EXPECT_EQ(irq_->count, 1);
  EXPECT_EQ(In(kIir), 0x02);
  EXPECT_EQ(In(kIir), 0x01);  // reading IIR acknowledged it
  Out(kThr, 'z');
  EXPECT_EQ(irq_->count, 2);
  Out(kIir, 0x01);  // FIFO on: IIR high bits set
  EXPECT_EQ(In(kIir), 0xc2);
  Out(kIer, 0x00);
  Out(kThr, 'z');
  EXPECT_EQ(irq_->count, 2);
  EXPECT_EQ(Drain(), "zz");
}

TEST_F(SerialTest, DivisorLatchAndScratch) {
  Out(kIer, 0x01);
  Out(kLcr, 0x80);  // DLAB
  Out(kThr, 0x01);  // DLL: 115200 baud, not output
  Out(kIer, 0x00);  // DLM, IER untouched
  EXPECT_EQ(In(kThr), 0x01);
  EXPECT_EQ(In(kIer), 0x00);
  Out(kLcr, 0x03);
  EXPECT_EQ(In(kIer), 0x01);
  EXPECT_EQ(In(kLcr), 0x03);
  EXPECT_EQ(Drain(), "");
  Out(kScr, 0x5a);
  EXPECT_EQ(In(kScr), 0x5a);
}

TEST_F(SerialTest, LoopbackSendsOutputToInput) {
  Out(kMcr, 0x10 | 0x02 | 0x08);  // loop, RTS, OUT2
  EXPECT_EQ(In(kMsr), 0x10 | 0x80);  // CTS, DCD
  Out(kThr, 'L');
  EXPECT_EQ(Drain(), "");
  EXPECT_EQ(In(kLsr) & 0x01, 0x01);
  EXPECT_EQ(In(kThr), 'L');
}

TEST_F(SerialTest, FullNonBlockingOutputDropsAndCounts) {
  std::string chunk(65536, 'f');
  while (::write(write_end_.get(), chunk.data(), chunk.size()) > 0) {
  }
  Out(kThr, 'x');
  Out(kThr, 'y');
  EXPECT_EQ(serial_->dropped_output_bytes(), 2u);
}

TEST_F(SerialTest, OddAccessesAreHarmless) {
  uint8_t wide[4] = {1, 2, 3, 4};
  serial_->Read(0, std::span<uint8_t>(wide, 4));
  EXPECT_EQ(wide[0], 0xff);
  serial_->Write(0, std::span<const uint8_t>(wide, 4));
  uint8_t b = 0;
  serial_->Read(9, std::span<uint8_t>(&b, 1));
  EXPECT_EQ(b, 0xff);
  serial_->Write(9, std::span<const uint8_t>(&b, 1));
  EXPECT_EQ(Drain(), "");
}

TEST_F(SerialTest, StateRoundTrips) {
  Out(kIer, 0x01);
  Out(kLcr, 0x03);
  Out(kScr, 0x77);
  const uint8_t in[] = {'s', 't'};
  serial_->EnqueueInput(in);
  SerialState st = serial_->GetState();
  EXPECT_EQ(st.input.size(), 2u);
  Serial copy(nullptr, UniqueFd());
  copy.SetState(st);
  SerialState again = copy.GetState();
  EXPECT_EQ(again.ier, 0x01);
  EXPECT_EQ(again.lcr, 0x03);
  EXPECT_EQ(again.scr, 0x77);
  EXPECT_EQ(again.input, st.input);
  uint8_t b = 0;
  copy.Read(0, std::span<uint8_t>(&b, 1));
  EXPECT_EQ(b, 's');
}

}  // namespace
}  // namespace kubicle::vmm::devices::legacy
