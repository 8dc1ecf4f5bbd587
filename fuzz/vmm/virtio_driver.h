// The guest driver side for the virtio fuzzers, without GoogleTest: a bump
// allocator for guest buffers, a split virtqueue as the driver lays it out,
// and an MMIO driver that probes a transport the way Linux's virtio_mmio does
// (the same steps as vmm/devices/virtio/test_driver.h, which needs gtest).
// Fuzzers use it to get a device into DRIVER_OK and then hand it hostile
// rings, chains and registers.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "vmm/devices/interrupt.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::fuzz {

using vmm::GuestAddress;
using vmm::GuestMemory;
namespace virtio = vmm::devices::virtio;

class NullInterrupt : public vmm::devices::InterruptLine {
 public:
  Status Trigger() override {
    ++count;
    return Status::Ok();
  }
  uint64_t count = 0;
};

// Hands out guest buffers from [base, end); 0 when exhausted.
class GuestHeap {
 public:
  GuestHeap(GuestAddress base, GuestAddress end) : next_(base), end_(end) {}
  GuestAddress Alloc(uint64_t len, uint64_t align = 16) {
    GuestAddress a = (next_ + align - 1) / align * align;
    if (a + len > end_ || a + len < a) return 0;
    next_ = a + len;
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
  }
  uint16_t size() const { return size_; }
  GuestAddress desc() const { return desc_; }
  GuestAddress avail() const { return avail_; }
  GuestAddress used() const { return used_; }
  GuestAddress end() const { return used_ + 6 + 8ull * size_; }

  void WriteDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    virtio::VirtqDesc d{addr, len, flags, next};
    (void)mem_.WriteObj(desc_ + 16ull * (i % size_), d);
  }
  // Writes the chain into the next descriptors (round robin, no free list:
  // the fuzzers never have more than size() in flight) and makes it available.
  void AddChain(const std::vector<Buf>& bufs) {
    if (bufs.empty()) return;
    const uint16_t head = next_desc_;
    for (size_t i = 0; i < bufs.size(); ++i) {
      const bool last = i + 1 == bufs.size();
      const uint16_t id = next_desc_;
      next_desc_ = static_cast<uint16_t>((next_desc_ + 1) % size_);
      uint16_t flags = (bufs[i].writable ? virtio::kDescFlagWrite : 0) |
                       (last ? 0 : virtio::kDescFlagNext);
      WriteDesc(id, bufs[i].addr, bufs[i].len, flags, next_desc_);
    }
    PushAvail(head);
  }
  void PushAvail(uint16_t head) {
    ++outstanding_[head % size_];
    (void)mem_.WriteObj<uint16_t>(avail_ + 4 + 2ull * (avail_idx_ % size_), head);
    ++avail_idx_;
    (void)mem_.StoreRelease16(avail_ + 2, avail_idx_);
  }
  uint16_t used_idx() const {
    auto v = mem_.ReadObj<uint16_t>(used_ + 2);
    return v.ok() ? *v : 0;
  }
  // Counts one answer to head `id` against the times the driver offered it.
  // False when the device answered it more often than it was offered: the
  // device's half of the rule that every chain taken from the available
  // ring is answered exactly once (spec 2.7.8). Meaningful only while the
  // rings hold what the driver wrote (see StrayWrites).
  bool Settle(uint32_t id) {
    auto it = outstanding_.find(static_cast<uint16_t>(id));
    if (it == outstanding_.end() || it->second == 0) return false;
    --it->second;
    return true;
  }
  // Heads offered and not yet answered.
  size_t outstanding() const {
    size_t n = 0;
    for (const auto& [head, count] : outstanding_) n += count;
    return n;
  }
  // Used entries published since the last call.
  std::vector<virtio::VirtqUsedElem> TakeUsed() {
    std::vector<virtio::VirtqUsedElem> out;
    for (uint16_t now = used_idx(); last_used_ != now; ++last_used_) {
      auto e = mem_.ReadObj<virtio::VirtqUsedElem>(used_ + 4 + 8ull * (last_used_ % size_));
      if (e.ok()) out.push_back(*e);
      if (out.size() > size_) break;  // a device publishing nonsense
    }
    return out;
  }

 private:
  const GuestMemory& mem_;
  uint16_t size_;
  GuestAddress desc_, avail_, used_;
  uint16_t next_desc_ = 0;
  uint16_t avail_idx_ = 0;
  uint16_t last_used_ = 0;
  std::map<uint16_t, uint32_t> outstanding_;
};

// The guest ranges a device was told to write through raw addresses (a
// chain's device-writable buffers placed anywhere in RAM, rings included).
// A real driver never aims a device's writes at its own rings or at another
// request's buffers; a fuzzed one does, and then what it reads back there
// (republished heads, overwritten status bytes) no longer says anything
// about the device. Checks that read guest memory skip what these cover.
class StrayWrites {
 public:
  void Add(const Buf& b) {
    if (b.writable && b.len > 0) ranges_.push_back(b);
  }
  bool Overlaps(GuestAddress addr, uint64_t len) const {
    for (const Buf& r : ranges_) {
      // Wrapping raw ranges are refused by the device, so they write nothing.
      if (r.addr + r.len < r.addr) continue;
      if (addr < r.addr + r.len && r.addr < addr + len) return true;
    }
    return false;
  }

 private:
  std::vector<Buf> ranges_;
};

// Drives a transport's registers like Linux's virtio_mmio + virtio core.
class MmioDriver {
 public:
  explicit MmioDriver(virtio::MmioTransport& t) : t_(t) {}
  uint32_t Read32(uint64_t off) {
    uint32_t v = 0;
    t_.Read(off, {reinterpret_cast<uint8_t*>(&v), 4});
    return v;
  }
  void Write32(uint64_t off, uint32_t v) {
    t_.Write(off, {reinterpret_cast<const uint8_t*>(&v), 4});
  }
  bool Negotiate(uint64_t wanted) {
    Write32(0x70, 0);
    Write32(0x70, virtio::kStatusAcknowledge);
    Write32(0x70, virtio::kStatusAcknowledge | virtio::kStatusDriver);
    Write32(0x14, 0);
    uint64_t f = Read32(0x10);
    Write32(0x14, 1);
    f |= uint64_t{Read32(0x10)} << 32;
    f &= wanted;
    Write32(0x24, 0);
    Write32(0x20, static_cast<uint32_t>(f));
    Write32(0x24, 1);
    Write32(0x20, static_cast<uint32_t>(f >> 32));
    Write32(0x70, virtio::kStatusAcknowledge | virtio::kStatusDriver | virtio::kStatusFeaturesOk);
    return (Read32(0x70) & virtio::kStatusFeaturesOk) != 0;
  }
  void SetupQueue(uint16_t index, const DriverQueue& q) {
    Write32(0x30, index);
    Write32(0x38, q.size());
    Write32(0x80, static_cast<uint32_t>(q.desc()));
    Write32(0x84, static_cast<uint32_t>(q.desc() >> 32));
    Write32(0x90, static_cast<uint32_t>(q.avail()));
    Write32(0x94, static_cast<uint32_t>(q.avail() >> 32));
    Write32(0xa0, static_cast<uint32_t>(q.used()));
    Write32(0xa4, static_cast<uint32_t>(q.used() >> 32));
    Write32(0x44, 1);
  }
  // The whole probe; true when the device ends up active.
  bool Init(uint64_t wanted, const std::vector<DriverQueue*>& queues) {
    if (!Negotiate(wanted)) return false;
    for (size_t i = 0; i < queues.size(); ++i) SetupQueue(static_cast<uint16_t>(i), *queues[i]);
    Write32(0x70, virtio::kStatusAcknowledge | virtio::kStatusDriver |
                      virtio::kStatusFeaturesOk | virtio::kStatusDriverOk);
    return t_.active();
  }
  void Notify(uint16_t q) { Write32(0x50, q); }

 private:
  virtio::MmioTransport& t_;
};

inline constexpr uint64_t kAllFeatures = ~uint64_t{0};

}  // namespace kubicle::fuzz
