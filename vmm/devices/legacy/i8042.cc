#include "vmm/devices/legacy/i8042.h"

#include <algorithm>

#include "common/log.h"

namespace kubicle::vmm::devices::legacy {
namespace {

constexpr size_t kOutCapacity = 16;

// Status register bits.
constexpr uint8_t kStatusOutputFull = 0x01;
constexpr uint8_t kStatusSystemFlag = 0x04;   // self-test passed
constexpr uint8_t kStatusCommand = 0x08;      // last write went to 0x64
constexpr uint8_t kStatusUnlocked = 0x10;     // keyboard not inhibited

// Command byte (CTR) bits.
constexpr uint8_t kCtrKbdInterrupt = 0x01;
constexpr uint8_t kCtrKbdDisabled = 0x10;
constexpr uint8_t kDefaultCommandByte = 0x45;  // kbd interrupt, system flag, translate

// Output port: bit 0 is the CPU reset line (active low), bit 1 the A20 gate.
constexpr uint8_t kOutputPortReset = 0x01;
constexpr uint8_t kDefaultOutputPort = 0x03;

// Controller commands (port 0x64).
constexpr uint8_t kCmdReadCtr = 0x20;
constexpr uint8_t kCmdWriteCtr = 0x60;
constexpr uint8_t kCmdSelfTest = 0xaa;
constexpr uint8_t kCmdKbdTest = 0xab;
constexpr uint8_t kCmdKbdDisable = 0xad;
constexpr uint8_t kCmdKbdEnable = 0xae;
constexpr uint8_t kCmdReadOutputPort = 0xd0;
constexpr uint8_t kCmdWriteOutputPort = 0xd1;
constexpr uint8_t kCmdWriteKbdBuffer = 0xd2;
constexpr uint8_t kSelfTestOk = 0x55;

// Keyboard commands (port 0x60) and replies.
constexpr uint8_t kKbdAck = 0xfa;
constexpr uint8_t kKbdEcho = 0xee;
constexpr uint8_t kKbdIdentify = 0xf2;
constexpr uint8_t kKbdReset = 0xff;
constexpr uint8_t kKbdSelfTestOk = 0xaa;

}  // namespace

I8042::I8042(std::function<void()> on_reset, std::shared_ptr<InterruptLine> kbd_irq)
    : on_reset_(std::move(on_reset)),
      kbd_irq_(std::move(kbd_irq)),
      command_byte_(kDefaultCommandByte),
      output_port_(kDefaultOutputPort) {}

void I8042::Read(uint64_t offset, std::span<uint8_t> data) {
  if (data.size() != 1) {
    std::fill(data.begin(), data.end(), 0xff);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (offset == kDataOffset) {
    data[0] = ReadData();
  } else if (offset == kCommandOffset) {
    data[0] = StatusRegister();
  } else {
    data[0] = 0xff;
  }
}

void I8042::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (data.size() != 1) return;
  bool reset = false;
  bool raise = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (offset == kDataOffset) {
      reset = Data(data[0]);
    } else if (offset == kCommandOffset) {
      reset = Command(data[0]);
    }
    if (reset) ++resets_;
    raise = std::exchange(raise_, false);
  }
  if (raise && kbd_irq_ != nullptr) {
    Status st = kbd_irq_->Trigger();
    if (!st.ok()) log::Warn("i8042 interrupt failed", {{"error", st.ToString()}});
  }
  if (reset) {
    log::Info("guest requested CPU reset through the i8042");
    if (on_reset_) on_reset_();
  }
}

uint64_t I8042::reset_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resets_;
}

uint8_t I8042::StatusRegister() const {
  uint8_t s = kStatusSystemFlag | kStatusUnlocked;
  if (!out_.empty()) s |= kStatusOutputFull;
  if (last_write_was_command_) s |= kStatusCommand;
  return s;
}

uint8_t I8042::ReadData() {
  if (!out_.empty()) {
    last_data_ = out_.front();
    out_.pop_front();
  }
  return last_data_;  // an empty buffer reads the last byte again, like hardware
}

void I8042::Push(uint8_t byte) {
  if (out_.size() >= kOutCapacity) return;  // the guest is not reading: drop
  out_.push_back(byte);
  if (command_byte_ & kCtrKbdInterrupt) raise_ = true;
}

bool I8042::Command(uint8_t cmd) {
  last_write_was_command_ = true;
  pending_ = Pending::kNone;
  switch (cmd) {
    case kCmdReadCtr: Push(command_byte_); break;
    case kCmdWriteCtr: pending_ = Pending::kWriteCommandByte; break;
    case kCmdSelfTest: Push(kSelfTestOk); break;
    case kCmdKbdTest: Push(0x00); break;
    case kCmdKbdDisable: command_byte_ |= kCtrKbdDisabled; break;
    case kCmdKbdEnable: command_byte_ &= static_cast<uint8_t>(~kCtrKbdDisabled); break;
    case kCmdReadOutputPort: Push(output_port_); break;
    case kCmdWriteOutputPort: pending_ = Pending::kWriteOutputPort; break;
    case kCmdWriteKbdBuffer: pending_ = Pending::kWriteKeyboardBuffer; break;
    default:
      // 0xF0..0xFF pulse output-port lines low for the bits clear in the low
      // nibble; bit 0 is the reset line, so 0xFE (and any even one) resets.
      if ((cmd & 0xf0) == 0xf0 && (cmd & 0x01) == 0) return true;
      break;  // aux-port and vendor commands: ignored
  }
  return false;
}

bool I8042::Data(uint8_t value) {
  last_write_was_command_ = false;
  Pending pending = std::exchange(pending_, Pending::kNone);
  switch (pending) {
    case Pending::kWriteCommandByte: command_byte_ = value; return false;
    case Pending::kWriteOutputPort:
      output_port_ = value;
      return (value & kOutputPortReset) == 0;
    case Pending::kWriteKeyboardBuffer: Push(value); return false;
    case Pending::kNone: KeyboardCommand(value); return false;
  }
  return false;
}

void I8042::KeyboardCommand(uint8_t cmd) {
  switch (cmd) {
    case kKbdEcho: Push(kKbdEcho); break;
    case kKbdReset:
      Push(kKbdAck);
      Push(kKbdSelfTestOk);
      break;
    case kKbdIdentify:  // MF2 keyboard
      Push(kKbdAck);
      Push(0xab);
      Push(0x83);
      break;
    default: Push(kKbdAck); break;
  }
}

}  // namespace kubicle::vmm::devices::legacy
