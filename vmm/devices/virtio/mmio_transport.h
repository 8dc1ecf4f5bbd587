// MmioTransport: a virtio device behind a virtio-mmio register window
// (virtio 1.x, "version 2" / modern layout only, spec 4.2).
//
// Put it on the MMIO bus at a 4 KiB window (kMmioSize) and declare it to the
// guest kernel as `virtio_mmio.device=4K@<base>:<gsi>`. It implements the
// whole driver handshake: feature banks, FEATURES_OK (refused unless the driver
// accepts VIRTIO_F_VERSION_1 and only offered bits), queue setup, DRIVER_OK
// (every queue validated against guest memory, then VirtioDevice::Activate),
// reset on Status = 0, InterruptStatus/ACK and ConfigGeneration.
// Unaligned, odd-sized and unknown accesses are ignored (reads return 0) and
// logged with a rate limit; no guest access can crash or wedge the VMM.
//
// Threading: one mutex per transport guards the transport and its device.
// Bus Read/Write (vCPU threads), NotifyQueue (event-loop thread), the device's
// host-fd handler (event-loop thread, registered here) and device methods
// called from other threads all take it, so a device is never entered twice.
//
// Queue kicks: the VMM registers a KVM ioeventfd per queue on
// base + kQueueNotifyOffset (4 bytes, datamatch = queue index) and calls
// NotifyQueue(index) from the event-loop thread when it fires. A QUEUE_NOTIFY
// write that still reaches Write() does exactly the same, synchronously.
//
// Broken queues: when a device call leaves a queue broken (the guest wrote a
// malformed ring or chain), the transport logs why, sets DEVICE_NEEDS_RESET
// and raises a config-change interrupt; that queue is not kicked again until
// the driver resets the device. Devices just stop at the Pop error.
//
// Interrupts: InterruptStatus bit 0 (used buffer) / bit 1 (config change) are
// set here and the InterruptLine (an irqfd) is triggered; devices only ask.
//
// Lifetime: memory, the interrupt line and the event loop must outlive the
// transport. Create and destroy it on the event-loop thread or while that
// loop is not running (it adds/removes the device's host fd there).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/event_loop.h"
#include "common/status.h"
#include "vmm/devices/bus.h"
#include "vmm/devices/interrupt.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/log_limiter.h"
#include "vmm/devices/virtio/queue.h"
#include "vmm/devices/virtio/virtio_device.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::devices::virtio {

// Everything the transport knows about the driver, for snapshots. Device
// state (connections, config) is the device's own business.
struct MmioTransportState {
  uint32_t status = 0;
  uint32_t device_features_sel = 0;
  uint32_t driver_features_sel = 0;
  uint64_t driver_features = 0;
  uint32_t queue_sel = 0;
  uint32_t interrupt_status = 0;
  uint32_t config_generation = 0;
  std::vector<QueueState> queues;

  bool operator==(const MmioTransportState&) const = default;
};

class MmioTransport final : public BusDevice, private DeviceContext {
 public:
  static constexpr uint64_t kMmioSize = 0x1000;
  static constexpr uint64_t kQueueNotifyOffset = mmio::kQueueNotify;
  static constexpr uint64_t kConfigOffset = mmio::kConfig;
  static constexpr uint32_t kMagic = mmio::kMagic;   // "virt"
  static constexpr uint32_t kVendorId = 0x4b424c45;  // "KBLE"

  // loop may be null when the device has no host fd (blk, rng).
  static Result<std::unique_ptr<MmioTransport>> Create(std::unique_ptr<VirtioDevice> device,
                                                       const GuestMemory& memory,
                                                       std::shared_ptr<InterruptLine> irq,
                                                       EventLoop* loop = nullptr);
  ~MmioTransport() override;
  MmioTransport(const MmioTransport&) = delete;
  MmioTransport& operator=(const MmioTransport&) = delete;

  // BusDevice: offset is relative to the window base.
  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // A queue kick (from the ioeventfd of queue `index`). Ignored (and logged)
  // when the device is not active or the index is out of range.
  void NotifyQueue(uint16_t index);
  // After a restore/resume: process every queue, then raise the used-buffer
  // interrupt unconditionally, so a stale event index on either side cannot
  // leave a queue silent (firecracker#5969).
  void KickQueues();

  // The device, owned by the transport (same lifetime). Call its thread-safe
  // public methods (e.g. Vsock::SetGuestCid) through this pointer.
  VirtioDevice* device() const { return device_.get(); }
  uint16_t num_queues() const { return static_cast<uint16_t>(queues_.size()); }
  bool active() const;
  uint32_t status() const;

  MmioTransportState SaveState() const;
  // Replaces the driver state; a DRIVER_OK state re-activates the device.
  Status RestoreState(const MmioTransportState& state);

 private:
  MmioTransport(std::unique_ptr<VirtioDevice> device, const GuestMemory& memory,
                std::shared_ptr<InterruptLine> irq, EventLoop* loop);

  // DeviceContext (called by the device under mu_).
  const GuestMemory& memory() const override { return memory_; }
  Queue& queue(uint16_t index) override { return queues_[index]; }
  uint64_t acked_features() const override { return driver_features_; }
  void SignalUsed(uint16_t index) override;
  void SignalConfigChange() override;
  void SetNeedsReset(std::string_view reason) override;
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(mu_); }

  uint32_t ReadRegister(uint64_t offset);
  void WriteRegister(uint64_t offset, uint32_t value);
  void WriteQueueRegister(uint64_t offset, uint32_t value);
  void SetStatus(uint32_t value);
  bool AcceptFeatures();
  Status ActivateDevice();
  void ResetLocked();
  void NotifyQueueLocked(uint32_t index);
  // A device call left a queue broken (hostile ring): DEVICE_NEEDS_RESET.
  void CheckBrokenQueues();
  void RaiseInterrupt(uint32_t bits);
  Queue* SelectedQueue();
  void LogBadAccess(const char* what, uint64_t offset, size_t size);

  mutable std::mutex mu_;
  std::unique_ptr<VirtioDevice> device_;
  const GuestMemory& memory_;
  std::shared_ptr<InterruptLine> irq_;
  EventLoop* loop_;
  int host_fd_ = -1;  // registered on loop_

  std::vector<Queue> queues_;
  uint32_t status_ = 0;
  uint32_t device_features_sel_ = 0;
  uint32_t driver_features_sel_ = 0;
  uint64_t driver_features_ = 0;
  uint32_t queue_sel_ = 0;
  uint32_t interrupt_status_ = 0;
  uint32_t config_generation_ = 0;
  bool active_ = false;
  LogLimiter log_limiter_;
};

}  // namespace kubicle::vmm::devices::virtio
