// GuestMemory: the guest's physical memory as host mappings, with bounds-checked
// access. Everything that touches guest memory on behalf of an untrusted guest
// (virtqueues, device buffers, boot loaders) goes through this class, so an
// address or length the guest made up can never reach outside its RAM.
//
// Contract: regions do not overlap; an access must lie entirely inside one
// region (a buffer straddling the MMIO hole is rejected, as on real hardware).
// The guest may change memory at any time: callers copy what they parse
// (Read/ReadObj) instead of holding pointers across checks.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "common/mmap_region.h"
#include "common/status.h"

namespace kubicle::vmm {

using GuestAddress = uint64_t;

struct GuestRegion {
  GuestAddress guest_base = 0;
  uint64_t size = 0;
  uint8_t* host = nullptr;  // points into the owning MmapRegion
};

class GuestMemory {
 public:
  struct Range {
    GuestAddress base;
    uint64_t size;
  };

  // Anonymous private memory for each range (zero-filled, lazily allocated).
  static Result<std::unique_ptr<GuestMemory>> CreateAnonymous(const std::vector<Range>& ranges);
  // Takes existing mappings, one per range, in order (used by restore and tests).
  static Result<std::unique_ptr<GuestMemory>> FromMappings(const std::vector<Range>& ranges,
                                                           std::vector<MmapRegion> maps);

  const std::vector<GuestRegion>& regions() const { return regions_; }
  uint64_t total_size() const;
  // The highest guest address + 1.
  GuestAddress end() const;

  // True when [gpa, gpa+len) lies inside one region (len 0 is valid inside a region).
  bool IsValidRange(GuestAddress gpa, uint64_t len) const;
  // Host pointer for [gpa, gpa+len), or nullptr when the range is not valid.
  uint8_t* HostPointer(GuestAddress gpa, uint64_t len) const;
  // Host span for [gpa, gpa+len), or OutOfRange.
  Result<std::span<uint8_t>> Slice(GuestAddress gpa, uint64_t len) const;

  Status Read(GuestAddress gpa, void* dst, uint64_t len) const;
  Status Write(GuestAddress gpa, const void* src, uint64_t len) const;

  template <typename T>
  Result<T> ReadObj(GuestAddress gpa) const {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    RETURN_IF_ERROR(Read(gpa, &v, sizeof(T)));
    return v;
  }
  template <typename T>
  Status WriteObj(GuestAddress gpa, const T& v) const {
    static_assert(std::is_trivially_copyable_v<T>);
    return Write(gpa, &v, sizeof(T));
  }

  // Atomic accessors for fields shared with a running guest (virtqueue indices).
  // gpa must be naturally aligned; returns OutOfRange/InvalidArgument otherwise.
  Result<uint16_t> LoadAcquire16(GuestAddress gpa) const;
  Status StoreRelease16(GuestAddress gpa, uint16_t v) const;

 private:
  GuestMemory() = default;
  std::vector<MmapRegion> maps_;
  std::vector<GuestRegion> regions_;
};

}  // namespace kubicle::vmm
