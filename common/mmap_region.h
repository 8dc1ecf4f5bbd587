// MmapRegion: sole owner of one mmap(2) mapping; munmaps on destruction.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "common/status.h"

namespace kubicle {

class MmapRegion {
 public:
  MmapRegion() = default;
  ~MmapRegion() { reset(); }
  MmapRegion(MmapRegion&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  MmapRegion& operator=(MmapRegion&& o) noexcept {
    if (this != &o) {
      reset();
      addr_ = std::exchange(o.addr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  MmapRegion(const MmapRegion&) = delete;
  MmapRegion& operator=(const MmapRegion&) = delete;

  // Anonymous private read-write memory, zero-filled, pages allocated lazily.
  static Result<MmapRegion> Anonymous(size_t size, int extra_flags = MAP_NORESERVE);
  // Maps fd at offset with the given protection and flags (MAP_SHARED or MAP_PRIVATE).
  static Result<MmapRegion> MapFile(int fd, size_t size, int prot, int flags, off_t offset = 0);
  // Takes ownership of an existing mapping.
  static MmapRegion Adopt(void* addr, size_t size) {
    MmapRegion r;
    r.addr_ = static_cast<uint8_t*>(addr);
    r.size_ = size;
    return r;
  }

  uint8_t* data() const { return addr_; }
  size_t size() const { return size_; }
  bool valid() const { return addr_ != nullptr; }
  void reset();

 private:
  uint8_t* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kubicle
