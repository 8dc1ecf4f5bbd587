// Minimal virtio 1.x driver side for the test guest: the virtio-mmio
// (version 2) transport and split virtqueues in static memory. The layout
// (registers, bits, descriptors) is virtio/, the one copy the VMM's devices
// compile too.
//
// Physical = virtual in the guest, so descriptor addresses are plain
// pointers. Barriers: x86 keeps stores ordered and loads ordered, so
// publishing the avail index after the ring entry needs only a compiler
// barrier (release store); reading a used entry after the used index needs
// only an acquire load. We always notify (no EVENT_IDX, no NO_NOTIFY checks):
// simpler, and correct.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "virtio/spec.h"

namespace kubicle::guest::testguest::arch {

// "net", "block", "rng", "vsock" or "other", for the boot log.
const char* VirtioDeviceName(uint32_t id);

// One split virtqueue with up to kMax entries; the transport picks
// size = the largest power of two <= min(QueueNumMax, kMax).
struct Virtq {
  static constexpr uint16_t kMax = 128;
  alignas(4096) virtio::VirtqDesc desc[kMax];
  struct {
    uint16_t flags;
    uint16_t idx;
    uint16_t ring[kMax];
    uint16_t used_event;
  } avail __attribute__((aligned(2)));
  struct {
    uint16_t flags;
    uint16_t idx;
    virtio::VirtqUsedElem ring[kMax];
    uint16_t avail_event;
  } used __attribute__((aligned(4096)));

  uint16_t size;
  uint16_t avail_shadow;
  uint16_t last_used;

  // Makes the chain starting at descriptor `head` available to the device.
  void Push(uint16_t head) {
    avail.ring[avail_shadow & (size - 1)] = head;
    ++avail_shadow;
    __atomic_store_n(&avail.idx, avail_shadow, __ATOMIC_RELEASE);
  }
  // Next completed chain, if any.
  bool PopUsed(uint32_t* id, uint32_t* len) {
    if (__atomic_load_n(&used.idx, __ATOMIC_ACQUIRE) == last_used) return false;
    const virtio::VirtqUsedElem e = used.ring[last_used & (size - 1)];
    ++last_used;
    *id = e.id;
    *len = e.len;
    return true;
  }
};

class VirtioMmio {
 public:
  // Reads the registers at `base`; false (with a reason) when there is no
  // modern virtio-mmio device there.
  bool Probe(uint64_t base, uint32_t irq, const char** why);
  uint32_t device_id() const { return device_id_; }
  uint64_t base() const { return base_; }
  uint32_t irq() const { return irq_; }

  // Reset, ACKNOWLEDGE, DRIVER, feature negotiation (VIRTIO_F_VERSION_1 plus
  // `wanted` & offered), FEATURES_OK check. False (device marked FAILED) on
  // refusal. features() then holds what was agreed.
  bool Negotiate(uint64_t wanted, const char** why);
  uint64_t features() const { return features_; }
  bool SetupQueue(uint32_t index, Virtq* q, const char** why);
  void DriverOk();
  void Notify(uint32_t queue) const;
  // Reads and acknowledges InterruptStatus (bit 0: used buffers, bit 1:
  // configuration change).
  uint32_t AckInterrupt() const;
  uint32_t ConfigRead32(uint32_t offset) const;
  uint32_t ConfigGeneration() const;
  // A 64-bit config field read consistently (ConfigGeneration loop).
  uint64_t ConfigRead64(uint32_t offset) const;

 private:
  uint32_t Read(uint32_t off) const;
  void Write(uint32_t off, uint32_t v) const;
  uint64_t base_ = 0;
  uint32_t irq_ = 0;
  uint32_t device_id_ = 0;
  uint64_t features_ = 0;
};

}  // namespace kubicle::guest::testguest::arch
