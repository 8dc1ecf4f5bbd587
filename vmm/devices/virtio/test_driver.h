// Test-only helpers that play the guest driver: a counting InterruptLine, a
// bump allocator for guest buffers, a split virtqueue as the driver sees it,
// and an MMIO driver that probes a transport like Linux's virtio_mmio does.
// Used by the unit tests of this folder; not part of the library.
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/devices/interrupt.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::devices::virtio::testing {

class CountingInterrupt : public InterruptLine {
 public:
  Status Trigger() override {
    ++count;
    return Status::Ok();
  }
  std::atomic<int> count{0};
};

// Hands out guest buffers from [base, base+size).
class GuestHeap {
 public:
  GuestHeap(GuestAddress base, uint64_t size) : next_(base), end_(base + size) {}
  GuestAddress Alloc(uint64_t len, uint64_t align = 16) {
    next_ = (next_ + align - 1) / align * align;
    GuestAddress a = next_;
    next_ += len;
    EXPECT_LE(next_, end_) << "test guest heap exhausted";
    return a;
  }

 private:
  GuestAddress next_;
  GuestAddress end_;
};

struct Buf {
  GuestAddress addr;
  uint32_t len;
  bool writable;
};

// The driver's view of one split virtqueue laid out at `base`.
class DriverQueue {
 public:
  DriverQueue(const GuestMemory& mem, GuestAddress base, uint16_t size)
      : mem_(mem), size_(size), desc_(base), avail_(base + 16ull * size) {
    used_ = (avail_ + 6 + 2ull * size + 3) / 4 * 4;
    for (uint16_t i = 0; i < size; ++i) free_.push_back(static_cast<uint16_t>(size - 1 - i));
  }
  uint16_t size() const { return size_; }
  GuestAddress desc() const { return desc_; }
  GuestAddress avail() const { return avail_; }
  GuestAddress used() const { return used_; }

  void WriteDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    VirtqDesc d{addr, len, flags, next};
    ASSERT_TRUE(mem_.WriteObj(desc_ + 16ull * i, d).ok());
  }
  // Writes the chain into free descriptors and makes it available.
  uint16_t AddChain(const std::vector<Buf>& bufs) {
    std::vector<uint16_t> ids;
    for (size_t i = 0; i < bufs.size(); ++i) {
      EXPECT_FALSE(free_.empty()) << "driver queue out of descriptors";
      ids.push_back(free_.back());
      free_.pop_back();
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
      bool last = i + 1 == bufs.size();
      uint16_t flags = (bufs[i].writable ? kDescFlagWrite : 0) | (last ? 0 : kDescFlagNext);
      WriteDesc(ids[i], bufs[i].addr, bufs[i].len, flags, last ? 0 : ids[i + 1]);
    }
    inflight_[ids[0]] = ids;
    PushAvail(ids[0]);
    return ids[0];
  }
  void PushAvail(uint16_t head) {
    uint16_t idx = avail_idx();
    ASSERT_TRUE(mem_.WriteObj<uint16_t>(avail_ + 4 + 2ull * (idx % size_), head).ok());
    SetAvailIdx(static_cast<uint16_t>(idx + 1));
  }
  // Moves both rings' indices to idx (as if idx entries were already used).
  void StartAt(uint16_t idx) {
    SetAvailIdx(idx);
    ASSERT_TRUE(mem_.StoreRelease16(used_ + 2, idx).ok());
    last_used_ = idx;
  }
  uint16_t avail_idx() const { return *mem_.ReadObj<uint16_t>(avail_ + 2); }
  void SetAvailIdx(uint16_t v) { ASSERT_TRUE(mem_.StoreRelease16(avail_ + 2, v).ok()); }
  void SetAvailFlags(uint16_t f) { ASSERT_TRUE(mem_.WriteObj<uint16_t>(avail_, f).ok()); }
  void SetUsedEvent(uint16_t v) {
    ASSERT_TRUE(mem_.WriteObj<uint16_t>(avail_ + 4 + 2ull * size_, v).ok());
  }
  uint16_t avail_event() const { return *mem_.ReadObj<uint16_t>(used_ + 4 + 8ull * size_); }
  uint16_t used_idx() const { return *mem_.ReadObj<uint16_t>(used_ + 2); }

  // Used entries published since the last call; their descriptors are freed.
  std::vector<VirtqUsedElem> TakeUsed() {
    std::vector<VirtqUsedElem> out;
    for (uint16_t now = used_idx(); last_used_ != now; ++last_used_) {
      auto e = *mem_.ReadObj<VirtqUsedElem>(used_ + 4 + 8ull * (last_used_ % size_));
      out.push_back(e);
      auto it = inflight_.find(static_cast<uint16_t>(e.id));
      if (it != inflight_.end()) {
        for (uint16_t id : it->second) free_.push_back(id);
        inflight_.erase(it);
      }
    }
    return out;
  }

 private:
  const GuestMemory& mem_;
  uint16_t size_;
  GuestAddress desc_, avail_, used_;
  std::vector<uint16_t> free_;
  std::map<uint16_t, std::vector<uint16_t>> inflight_;
  uint16_t last_used_ = 0;
};

// Drives a transport's registers like Linux's virtio_mmio + virtio core.
class MmioDriver {
 public:
  explicit MmioDriver(MmioTransport& t) : t_(t) {}
  uint32_t Read32(uint64_t off) {
    uint32_t v = 0;
    t_.Read(off, {reinterpret_cast<uint8_t*>(&v), 4});
    return v;
  }
  void Write32(uint64_t off, uint32_t v) {
    t_.Write(off, {reinterpret_cast<const uint8_t*>(&v), 4});
  }
  uint64_t DeviceFeatures() {
    Write32(0x14, 0);
    uint64_t lo = Read32(0x10);
    Write32(0x14, 1);
    return lo | (uint64_t{Read32(0x10)} << 32);
  }
  // Reset, ACK, DRIVER, negotiate (offered & wanted), FEATURES_OK. Returns
  // whether the device kept FEATURES_OK.
  bool Negotiate(uint64_t wanted) {
    Write32(0x70, 0);
    Write32(0x70, kStatusAcknowledge);
    Write32(0x70, kStatusAcknowledge | kStatusDriver);
    uint64_t f = DeviceFeatures() & wanted;
    Write32(0x24, 0);
    Write32(0x20, static_cast<uint32_t>(f));
    Write32(0x24, 1);
    Write32(0x20, static_cast<uint32_t>(f >> 32));
    Write32(0x70, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk);
    return (Read32(0x70) & kStatusFeaturesOk) != 0;
  }
  void SetupQueue(uint16_t index, const DriverQueue& q) {
    Write32(0x30, index);
    EXPECT_EQ(Read32(0x44), 0u);
    EXPECT_GE(Read32(0x34), q.size());
    Write32(0x38, q.size());
    Write32(0x80, static_cast<uint32_t>(q.desc()));
    Write32(0x84, static_cast<uint32_t>(q.desc() >> 32));
    Write32(0x90, static_cast<uint32_t>(q.avail()));
    Write32(0x94, static_cast<uint32_t>(q.avail() >> 32));
    Write32(0xa0, static_cast<uint32_t>(q.used()));
    Write32(0xa4, static_cast<uint32_t>(q.used() >> 32));
    Write32(0x44, 1);
  }
  void DriverOk() {
    Write32(0x70, kStatusAcknowledge | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  }
  // The whole probe; true when the device ends up DRIVER_OK without NEEDS_RESET.
  bool Init(uint64_t wanted, const std::vector<DriverQueue*>& queues) {
    if (Read32(0x0) != MmioTransport::kMagic || Read32(0x4) != 2) return false;
    if (!Negotiate(wanted)) return false;
    for (size_t i = 0; i < queues.size(); ++i) SetupQueue(static_cast<uint16_t>(i), *queues[i]);
    DriverOk();
    return (Read32(0x70) & kStatusDeviceNeedsReset) == 0 && t_.active();
  }
  void Notify(uint16_t q) { Write32(0x50, q); }
  uint32_t AckInterrupts() {
    uint32_t isr = Read32(0x60);
    Write32(0x64, isr);
    return isr;
  }

 private:
  MmioTransport& t_;
};

inline constexpr uint64_t kAllFeatures = ~uint64_t{0};

}  // namespace kubicle::vmm::devices::virtio::testing
