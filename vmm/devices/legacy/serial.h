// Serial: an 8250/16550A UART (COM1 at ports 0x3f8..0x3ff, IRQ 4), the guest
// console. Implements every register the Linux 8250 driver touches: THR/RBR,
// IER, IIR/FCR, LCR (with the DLAB divisor latch), MCR (with loopback), LSR,
// MSR and SCR.
//
// Contracts:
// - Output: each byte the guest writes to THR goes to a ConsoleLog
//   (console_log.h: rotated, capped and rate limited) with one write(2), or
//   nowhere. The vCPU must never block forever on a slow reader, so give it
//   a regular file or a non-blocking fd; bytes dropped (rate, cap, a full
//   non-blocking fd) are counted (dropped_output_bytes()).
// - Input: EnqueueInput queues bytes for the guest in a bounded FIFO and
//   returns how many fit; the caller keeps the rest and retries later.
// - Interrupts: raised through the InterruptLine (an irqfd on GSI 4, edge)
//   whenever a received-data or THR-empty condition arises that IER enables,
//   as a 16550 does (enabling the THR-empty interrupt with an empty THR
//   raises it at once). Reading IIR acknowledges THR-empty. OUT2 gating is
//   not modelled (Linux does not need it).
// - Thread-safe: vCPU threads (Read/Write) and the event loop (EnqueueInput)
//   may call concurrently. Guest input is untrusted and cannot crash it: any
//   offset or access size is handled.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/unique_fd.h"
#include "vmm/devices/bus.h"
#include "vmm/devices/interrupt.h"
#include "vmm/devices/legacy/console_log.h"

namespace kubicle::vmm::devices::legacy {

// Everything the guest can observe, for snapshots (host fds excluded).
struct SerialState {
  uint8_t ier = 0;
  uint8_t lcr = 0;
  uint8_t mcr = 0;
  uint8_t scr = 0;
  uint8_t dll = 0x0c;  // 9600 baud, the usual firmware setting
  uint8_t dlm = 0;
  bool fifo_enabled = false;
  bool thre_pending = false;
  bool overrun = false;
  std::vector<uint8_t> input;
};

class Serial : public BusDevice {
 public:
  static constexpr uint64_t kPortCount = 8;
  static constexpr size_t kInputCapacity = 1024;

  // irq may be null (no interrupts); out may be null (output discarded).
  Serial(std::shared_ptr<InterruptLine> irq, std::unique_ptr<ConsoleLog> out);
  // Output to out_fd without limits; out_fd may be invalid (discarded).
  Serial(std::shared_ptr<InterruptLine> irq, UniqueFd out_fd);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // Queues host input for the guest; returns how many bytes were accepted.
  size_t EnqueueInput(std::span<const uint8_t> bytes);
  // Free space in the input FIFO.
  size_t input_space() const;
  uint64_t dropped_output_bytes() const;

  SerialState GetState() const;
  // Restores guest-visible state; input beyond kInputCapacity is dropped.
  void SetState(const SerialState& state);

 private:
  uint8_t ReadRegister(uint64_t offset);
  // Returns true when an interrupt must be raised.
  bool WriteRegister(uint64_t offset, uint8_t value);
  bool WriteThr(uint8_t value);
  bool WriteIer(uint8_t value);
  uint8_t ReadIir();
  uint8_t ReadLsr();
  uint8_t ReadMsr() const;
  void Output(uint8_t byte);
  bool dlab() const;
  bool loopback() const;
  bool rx_interrupt_enabled() const;
  bool thre_interrupt_enabled() const;
  void Raise();

  std::shared_ptr<InterruptLine> irq_;
  mutable std::mutex mu_;
  std::unique_ptr<ConsoleLog> out_;  // guarded by mu_
  SerialState s_;  // s_.input unused: input_ holds the FIFO
  std::deque<uint8_t> input_;
};

}  // namespace kubicle::vmm::devices::legacy
