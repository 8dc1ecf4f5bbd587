// Queue: the device side of one split virtqueue (virtio 1.x, spec 2.7).
//
// The driver (guest) owns the rings; this class reads the available ring,
// copies each descriptor chain out of guest memory after validating it, and
// publishes used entries. Everything the guest wrote is treated as hostile:
// chains that loop, run past the table, point outside RAM, overflow, use the
// (not offered) INDIRECT flag or put readable after writable buffers, and an
// avail index that jumps by more than the queue size, are all rejected with a
// Status and mark the queue broken(): the device stops using it and the
// transport sets DEVICE_NEEDS_RESET; only a device reset revives it. Nothing the guest does can make Pop
// loop for longer than the queue size or read outside guest memory.
//
// Notification suppression: without VIRTIO_RING_F_EVENT_IDX the device honours
// VIRTQ_AVAIL_F_NO_INTERRUPT and never suppresses driver notifications. With
// it, Pop publishes avail_event (= next_avail) each time it finds the ring
// empty, re-checking after a full fence so a kick cannot be lost, and
// NeedsInterrupt implements vring_need_event on used_event.
//
// All mutable state is in QueueState, a plain struct, so snapshots can save
// it and restore it with Restore(). Not thread-safe: the owning transport
// serialises all calls under its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::devices::virtio {

// Driver-visible and device-private state of one queue. Saved and restored
// verbatim; host resources (memory, fds) are never part of it.
struct QueueState {
  uint16_t size = 0;  // QueueNum as written by the driver
  bool ready = false;
  GuestAddress desc_table = 0;
  GuestAddress avail_ring = 0;  // "driver area"
  GuestAddress used_ring = 0;   // "device area"
  uint16_t next_avail = 0;      // next avail ring slot the device will read
  uint16_t next_used = 0;       // next used ring slot the device will write
  bool event_idx = false;       // VIRTIO_RING_F_EVENT_IDX negotiated
  // Used index at the last interrupt, for EVENT_IDX; invalid forces the next
  // NeedsInterrupt to say yes (after restore, nothing is known).
  uint16_t signalled_used = 0;
  bool signalled_used_valid = false;

  bool operator==(const QueueState&) const = default;
};

// One buffer of a chain, as copied out of the descriptor table. host points
// at the same bytes in the VMM's mapping (validated at Pop; guest memory is
// never remapped while a device is active).
struct Descriptor {
  GuestAddress addr = 0;
  uint32_t len = 0;
  bool device_writable = false;
  uint8_t* host = nullptr;
};

struct DescriptorChain {
  uint16_t head = 0;
  // Device-readable descriptors first, then device-writable ones (enforced).
  std::vector<Descriptor> descriptors;
  uint32_t readable_len = 0;  // total bytes of the readable part
  uint32_t writable_len = 0;  // total bytes of the writable part
};

class Queue {
 public:
  explicit Queue(uint16_t max_size);

  uint16_t max_size() const { return max_size_; }
  const QueueState& state() const { return state_; }
  // Replaces the state (restore). Validate() runs again at activation.
  void Restore(const QueueState& state) {
    state_ = state;
    broken_ = false;
    broken_reason_.clear();
  }
  // Power-on values: size = max_size, not ready, addresses and indices 0.
  void Reset();

  // Driver-side configuration (MMIO registers); the transport only allows
  // these before DRIVER_OK.
  void set_size(uint16_t size) { state_.size = size; }
  void set_ready(bool ready) { state_.ready = ready; }
  void set_desc_table(GuestAddress a) { state_.desc_table = a; }
  void set_avail_ring(GuestAddress a) { state_.avail_ring = a; }
  void set_used_ring(GuestAddress a) { state_.used_ring = a; }
  void set_event_idx(bool on) { state_.event_idx = on; }

  // Checks size (power of two, 1..max_size), ring alignment and that every
  // ring lies inside guest memory. Called at DRIVER_OK for ready queues.
  Status Validate(const GuestMemory& mem) const;

  // Takes the next available chain into *out (reusing its storage). Returns
  // false when the ring is empty. On a malformed ring or chain returns an
  // error and marks the queue broken.
  Result<bool> Pop(const GuestMemory& mem, DescriptorChain* out);
  // Convenience form that allocates a fresh chain.
  Result<std::optional<DescriptorChain>> Pop(const GuestMemory& mem);
  // Gives back the chain returned by the last successful Pop, so a device
  // that found nothing to put in it can use it later.
  void UndoPop() { --state_.next_avail; }

  // Publishes head with written_len bytes written by the device.
  Status AddUsed(const GuestMemory& mem, uint16_t head, uint32_t written_len);

  // True when the driver wants an interrupt for the used entries added since
  // the last call that returned true. Call once per batch, after AddUsed.
  bool NeedsInterrupt(const GuestMemory& mem);

  // Marks the queue broken for a reason the device found (DrainQueue's
  // bound), exactly as a failed Pop would; returns `why`.
  Status Break(Status why) { return Fail(std::move(why)); }
  bool broken() const { return broken_; }
  // Why the queue broke (the first error), for the transport's log line.
  const std::string& broken_reason() const { return broken_reason_; }
  bool ready() const { return state_.ready; }

 private:
  Status Fail(Status s) {
    broken_ = true;
    broken_reason_ = s.ToString();
    return s;
  }
  Status ReadChain(const GuestMemory& mem, uint16_t head, DescriptorChain* out);
  Result<uint16_t> AvailIdx(const GuestMemory& mem) const;
  Status PublishAvailEvent(const GuestMemory& mem);

  uint16_t max_size_;
  QueueState state_;
  bool broken_ = false;
  std::string broken_reason_;
};

}  // namespace kubicle::vmm::devices::virtio
