#include "vmm/devices/legacy/serial.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace kubicle::vmm::devices::legacy {
namespace {

// Register offsets from the base port.
constexpr uint64_t kData = 0;  // RBR / THR, DLL when DLAB
constexpr uint64_t kIer = 1;   // DLM when DLAB
constexpr uint64_t kIir = 2;   // FCR on write
constexpr uint64_t kLcr = 3;
constexpr uint64_t kMcr = 4;
constexpr uint64_t kLsr = 5;
constexpr uint64_t kMsr = 6;
constexpr uint64_t kScr = 7;

constexpr uint8_t kIerRxData = 0x01;
constexpr uint8_t kIerThrEmpty = 0x02;
constexpr uint8_t kIerMask = 0x0f;
constexpr uint8_t kIirNone = 0x01;
constexpr uint8_t kIirThrEmpty = 0x02;
constexpr uint8_t kIirRxData = 0x04;
constexpr uint8_t kIirFifoEnabled = 0xc0;
constexpr uint8_t kFcrEnable = 0x01;
constexpr uint8_t kFcrClearRx = 0x02;
constexpr uint8_t kLcrDlab = 0x80;
constexpr uint8_t kMcrDtr = 0x01;
constexpr uint8_t kMcrRts = 0x02;
constexpr uint8_t kMcrOut1 = 0x04;
constexpr uint8_t kMcrOut2 = 0x08;
constexpr uint8_t kMcrLoop = 0x10;
constexpr uint8_t kMcrMask = 0x1f;
constexpr uint8_t kLsrDataReady = 0x01;
constexpr uint8_t kLsrOverrun = 0x02;
constexpr uint8_t kLsrThrEmpty = 0x20;
constexpr uint8_t kLsrIdle = 0x40;
constexpr uint8_t kMsrCts = 0x10;
constexpr uint8_t kMsrDsr = 0x20;
constexpr uint8_t kMsrRi = 0x40;
constexpr uint8_t kMsrDcd = 0x80;

}  // namespace

Serial::Serial(std::shared_ptr<InterruptLine> irq, std::unique_ptr<ConsoleLog> out)
    : irq_(std::move(irq)), out_(std::move(out)) {}

Serial::Serial(std::shared_ptr<InterruptLine> irq, UniqueFd out_fd)
    : Serial(std::move(irq),
             out_fd ? ConsoleLog::ForFd(std::move(out_fd), ConsoleLogLimits{0, 0, 0, 0}) : nullptr) {}

bool Serial::dlab() const { return (s_.lcr & kLcrDlab) != 0; }
bool Serial::loopback() const { return (s_.mcr & kMcrLoop) != 0; }
bool Serial::rx_interrupt_enabled() const { return (s_.ier & kIerRxData) != 0; }
bool Serial::thre_interrupt_enabled() const { return (s_.ier & kIerThrEmpty) != 0; }

void Serial::Raise() {
  if (irq_ == nullptr) return;
  Status st = irq_->Trigger();
  if (!st.ok()) log::Warn("serial interrupt failed", {{"error", st.ToString()}});
}

void Serial::Read(uint64_t offset, std::span<uint8_t> data) {
  if (data.size() != 1 || offset >= kPortCount) {
    std::fill(data.begin(), data.end(), 0xff);  // 8250 registers are byte-wide
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  data[0] = ReadRegister(offset);
}

void Serial::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (data.size() != 1 || offset >= kPortCount) return;
  bool raise;
  {
    std::lock_guard<std::mutex> lock(mu_);
    raise = WriteRegister(offset, data[0]);
  }
  if (raise) Raise();
}

uint8_t Serial::ReadRegister(uint64_t offset) {
  switch (offset) {
    case kData: {
      if (dlab()) return s_.dll;
      if (input_.empty()) return 0;
      uint8_t b = input_.front();
      input_.pop_front();
      return b;
    }
    case kIer: return dlab() ? s_.dlm : s_.ier;
    case kIir: return ReadIir();
    case kLcr: return s_.lcr;
    case kMcr: return s_.mcr;
    case kLsr: return ReadLsr();
    case kMsr: return ReadMsr();
    case kScr: return s_.scr;
    default: return 0xff;
  }
}

bool Serial::WriteRegister(uint64_t offset, uint8_t value) {
  switch (offset) {
    case kData:
      if (dlab()) {
        s_.dll = value;
        return false;
      }
      return WriteThr(value);
    case kIer:
      if (dlab()) {
        s_.dlm = value;
        return false;
      }
      return WriteIer(value);
    case kIir:  // FCR
      s_.fifo_enabled = (value & kFcrEnable) != 0;
      if (value & kFcrClearRx) input_.clear();
      return false;
    case kLcr: s_.lcr = value; return false;
    case kMcr: s_.mcr = value & kMcrMask; return false;
    case kScr: s_.scr = value; return false;
    default: return false;  // LSR and MSR are read-only
  }
}

bool Serial::WriteThr(uint8_t value) {
  if (loopback()) {
    if (input_.size() < kInputCapacity) {
      input_.push_back(value);
    } else {
      s_.overrun = true;
    }
  } else {
    Output(value);
  }
  // The byte left the THR at once: THR-empty again, and (in loopback) data.
  s_.thre_pending = true;
  return thre_interrupt_enabled() || (loopback() && rx_interrupt_enabled());
}

bool Serial::WriteIer(uint8_t value) {
  uint8_t old = s_.ier;
  s_.ier = value & kIerMask;
  bool raise = false;
  if (thre_interrupt_enabled() && !(old & kIerThrEmpty)) {
    s_.thre_pending = true;  // a 16550 interrupts as soon as THRE is unmasked
    raise = true;
  }
  if (rx_interrupt_enabled() && !(old & kIerRxData) && !input_.empty()) raise = true;
  return raise;
}

uint8_t Serial::ReadIir() {
  uint8_t fifo = s_.fifo_enabled ? kIirFifoEnabled : 0;
  if (rx_interrupt_enabled() && !input_.empty()) return kIirRxData | fifo;
  if (thre_interrupt_enabled() && s_.thre_pending) {
    s_.thre_pending = false;  // reading IIR acknowledges THR-empty
    return kIirThrEmpty | fifo;
  }
  return kIirNone | fifo;
}

uint8_t Serial::ReadLsr() {
  uint8_t lsr = kLsrThrEmpty | kLsrIdle;
  if (!input_.empty()) lsr |= kLsrDataReady;
  if (s_.overrun) lsr |= kLsrOverrun;
  s_.overrun = false;  // cleared by reading LSR
  return lsr;
}

uint8_t Serial::ReadMsr() const {
  if (!loopback()) return kMsrDcd | kMsrDsr | kMsrCts;  // a connected terminal
  uint8_t msr = 0;
  if (s_.mcr & kMcrRts) msr |= kMsrCts;
  if (s_.mcr & kMcrDtr) msr |= kMsrDsr;
  if (s_.mcr & kMcrOut1) msr |= kMsrRi;
  if (s_.mcr & kMcrOut2) msr |= kMsrDcd;
  return msr;
}

void Serial::Output(uint8_t byte) {
  if (out_) out_->Write(std::span<const uint8_t>(&byte, 1));
}

size_t Serial::EnqueueInput(std::span<const uint8_t> bytes) {
  size_t accepted;
  bool raise;
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepted = std::min(bytes.size(), kInputCapacity - input_.size());
    input_.insert(input_.end(), bytes.begin(), bytes.begin() + accepted);
    raise = accepted > 0 && rx_interrupt_enabled();
  }
  if (raise) Raise();
  return accepted;
}

size_t Serial::input_space() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kInputCapacity - input_.size();
}

uint64_t Serial::dropped_output_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return out_ ? out_->dropped_bytes() : 0;
}

SerialState Serial::GetState() const {
  std::lock_guard<std::mutex> lock(mu_);
  SerialState s = s_;
  s.input.assign(input_.begin(), input_.end());
  return s;
}

void Serial::SetState(const SerialState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  s_ = state;
  s_.ier &= kIerMask;
  s_.mcr &= kMcrMask;
  size_t n = std::min(state.input.size(), kInputCapacity);
  input_.assign(state.input.begin(), state.input.begin() + n);
  s_.input.clear();
}

}  // namespace kubicle::vmm::devices::legacy
