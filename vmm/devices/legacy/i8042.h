// I8042: the PS/2 keyboard controller at ports 0x60 (data) and 0x64
// (status/command), just enough for a Linux guest booted with
// "i8042.noaux i8042.nomux i8042.dumbkbd": the controller self-test, the
// command byte, keyboard ACKs, and above all CPU reset (command 0xFE, or an
// output-port write clearing the reset line), which `reboot=k` uses. Reset
// calls on_reset, which kubicle-vmm maps to "guest asked to reset/power off".
//
// Contracts: insert on the PIO bus at kI8042DataPort with length 5, so
// offset 0 is the data port and offset 4 the status/command port. Thread-
// safe; on_reset runs on the calling vCPU thread, outside the device lock,
// and must not block. Unknown commands are ignored, as real controllers do.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>

#include "vmm/devices/bus.h"
#include "vmm/devices/interrupt.h"

namespace kubicle::vmm::devices::legacy {

class I8042 : public BusDevice {
 public:
  static constexpr uint64_t kPortSpan = 5;  // 0x60..0x64
  static constexpr uint64_t kDataOffset = 0;
  static constexpr uint64_t kCommandOffset = 4;

  // kbd_irq (GSI 1) may be null.
  explicit I8042(std::function<void()> on_reset, std::shared_ptr<InterruptLine> kbd_irq = nullptr);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  uint64_t reset_count() const;

 private:
  // What the next data-port write means, after a command that takes one.
  enum class Pending { kNone, kWriteCommandByte, kWriteOutputPort, kWriteKeyboardBuffer };

  uint8_t StatusRegister() const;
  uint8_t ReadData();
  // These return true when the CPU must be reset.
  bool Command(uint8_t cmd);
  bool Data(uint8_t value);
  void KeyboardCommand(uint8_t cmd);
  void Push(uint8_t byte);

  std::function<void()> on_reset_;
  std::shared_ptr<InterruptLine> kbd_irq_;
  mutable std::mutex mu_;
  std::deque<uint8_t> out_;  // bytes for the guest to read at 0x60
  uint8_t command_byte_;
  uint8_t output_port_;
  uint8_t last_data_ = 0;
  bool last_write_was_command_ = false;
  Pending pending_ = Pending::kNone;
  uint64_t resets_ = 0;
  bool raise_ = false;  // set by Push, consumed after the lock is released
};

}  // namespace kubicle::vmm::devices::legacy
