// VirtioDevice: the interface between a virtio device model (blk, net, rng,
// vsock) and the transport that exposes it to the guest (MmioTransport).
//
// Threading contract. A device never runs on its own: the transport calls
// every method below while holding its mutex, from whichever thread the event
// arrived on (a vCPU thread for MMIO, the device event-loop thread for queue
// kicks and host fds). Device methods therefore need no locking of their own
// and must not block for long. A device's own public methods that other
// threads call (Vsock::SetGuestCid, ...) take the same lock with
// LockTransport() first; nothing else may.
//
// Life cycle: constructed by the VMM, handed to MmioTransport::Create, which
// attaches it (context() becomes non-null) and owns it from then on.
// Activate() runs at DRIVER_OK with every queue validated; Reset() runs when
// the driver writes 0 to Status and must drop every guest-visible effect
// (connections, in-flight requests) so Activate can run again.
//
// Host fds: a device that waits on host fds (vsock's sockets) gathers them in
// one epoll fd of its own and returns it from host_event_fd(); the transport
// registers that single fd on the VMM's EventLoop once, at Create, and calls
// HandleHostEvent() under the lock when it becomes readable. So no device ever
// adds or removes fds on the shared loop from a vCPU thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "vmm/devices/virtio/queue.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::devices::virtio {

// What a device may ask of its transport. Valid from attachment until the
// transport is destroyed; queue() only while the device is active.
class DeviceContext {
 public:
  virtual const GuestMemory& memory() const = 0;
  virtual Queue& queue(uint16_t index) = 0;
  virtual uint64_t acked_features() const = 0;
  // Raises the used-buffer interrupt if the driver wants one for the entries
  // added to queue `index` since the last signal. Call once per batch.
  virtual void SignalUsed(uint16_t index) = 0;
  // Bumps ConfigGeneration; raises the config-change interrupt when active.
  virtual void SignalConfigChange() = 0;
  // The device cannot go on (broken queue): sets DEVICE_NEEDS_RESET and
  // raises a config-change interrupt. The driver must reset the device.
  virtual void SetNeedsReset(std::string_view reason) = 0;
  // Takes the transport lock. Only for device methods called from outside
  // the transport (see the threading contract above); re-entry deadlocks.
  virtual std::unique_lock<std::mutex> Lock() = 0;

 protected:
  ~DeviceContext() = default;
};

// VirtioDevice::DrainQueue completes at most this many rings' worth of
// chains in one drain (why: at DrainQueue).
inline constexpr uint32_t kDrainRingsBound = 4;

class VirtioDevice {
 public:
  virtual ~VirtioDevice() = default;

  virtual std::string_view name() const = 0;  // for logs: "virtio-blk", ...
  virtual uint32_t device_id() const = 0;     // spec 5: kDeviceIdBlock, ...
  // Offered features; must include VIRTIO_F_VERSION_1.
  virtual uint64_t device_features() const = 0;
  virtual uint16_t num_queues() const = 0;
  virtual uint16_t queue_max_size(uint16_t index) const = 0;

  // Device configuration space (offset from 0x100). Bytes past the end of
  // the device's config read as 0; the transport checks width and alignment.
  virtual void ReadConfig(uint64_t offset, std::span<uint8_t> data) = 0;
  // Default: config space is read-only; writes are ignored.
  virtual void WriteConfig(uint64_t offset, std::span<const uint8_t> data) {}

  // DRIVER_OK: queues are ready and valid, features negotiated. An error
  // leaves the device inactive and the transport sets DEVICE_NEEDS_RESET.
  virtual Status Activate() = 0;
  // The driver kicked queue `index` (only called while active). On a Pop
  // error, stop using the queue: the transport notices it is broken.
  virtual void ProcessQueue(uint16_t index) = 0;
  // Back to the pre-Activate state; only called while active.
  virtual void Reset() = 0;

  // See "Host fds" above. -1: the device has none.
  virtual int host_event_fd() const { return -1; }
  virtual void HandleHostEvent() {}

  // Persist (snapshots and fork; persist.h). A device saves its own state as
  // bytes it encodes itself (its transport's state is saved beside them),
  // and comes back through its entry in persist.cc's table, which rebuilds it
  // from those bytes and the host resources the VM passes in.
  //
  // The device's kind in snapshot records; 0: it cannot be snapshotted.
  virtual uint32_t persist_kind() const { return 0; }
  // Its state, encoded. Called on the event-loop thread with every vCPU
  // paused (the guest cannot change it meanwhile).
  virtual Result<std::vector<uint8_t>> SaveState() const { return std::vector<uint8_t>{}; }
  // Called once a restored device is attached and its transport state is
  // back, before any vCPU runs: the clone takes its new identity (vsock
  // announces its new CID with a transport reset).
  virtual void OnRestored() {}

 protected:
  // Null until the device is attached to a transport.
  DeviceContext* context() const { return context_; }
  // For public methods called from other threads: serialises with the
  // transport. An unlocked lock when not attached yet (single-threaded setup).
  std::unique_lock<std::mutex> LockTransport() const {
    return context_ != nullptr ? context_->Lock() : std::unique_lock<std::mutex>();
  }
  // Completes every available chain of queue `index` with `complete(chain)`,
  // which returns the bytes written into it, then signals once for the batch.
  // Stops at a ring error (the transport reports the broken queue). `chain` is
  // reused storage owned by the device.
  //
  // Bounded: the used entries of a drain are signalled at its end, so a
  // driver cannot recycle descriptors during one and offers at most a ring's
  // worth. Many more means the device's own writes keep feeding the ring
  // (the used ring over the avail ring, or a buffer over either: the used
  // index then keeps moving the avail index), which would hold the
  // transport's lock forever; the queue breaks instead (found by fuzzing
  // restored device records; a guest reaches it through the registers).
  template <typename Complete>
  void DrainQueue(uint16_t index, DescriptorChain* chain, Complete&& complete) {
    Queue& q = context_->queue(index);
    const GuestMemory& mem = context_->memory();
    const uint32_t bound = kDrainRingsBound * uint32_t{q.state().size};
    bool any = false;
    for (uint32_t done = 0;;) {
      auto popped = q.Pop(mem, chain);
      if (!popped.ok() || !*popped) break;
      if (++done > bound) {
        q.UndoPop();  // not taken, so every chain taken is answered once
        (void)q.Break(Status::ResourceExhausted(
            "more than " + std::to_string(bound) +
            " chains in one drain: the device's writes are feeding the avail ring"));
        break;
      }
      uint32_t written = complete(*chain);
      if (!q.AddUsed(mem, chain->head, written).ok()) break;
      any = true;
    }
    if (any) context_->SignalUsed(index);
  }
  // Copies config bytes [offset, offset+out.size()) into out; 0 past the end.
  static void CopyConfig(std::span<const uint8_t> config, uint64_t offset, std::span<uint8_t> out);

 private:
  friend class MmioTransport;
  DeviceContext* context_ = nullptr;
};

inline void VirtioDevice::CopyConfig(std::span<const uint8_t> config, uint64_t offset,
                                     std::span<uint8_t> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t at = offset + i;
    out[i] = at < config.size() ? config[at] : 0;
  }
}

}  // namespace kubicle::vmm::devices::virtio
