#include "common/mmap_region.h"

namespace kubicle {

Result<MmapRegion> MmapRegion::Anonymous(size_t size, int extra_flags) {
  if (size == 0) return Status::InvalidArgument("mmap of zero bytes");
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags,
                   -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno("mmap anonymous");
  return Adopt(p, size);
}

Result<MmapRegion> MmapRegion::MapFile(int fd, size_t size, int prot, int flags, off_t offset) {
  if (size == 0) return Status::InvalidArgument("mmap of zero bytes");
  void* p = ::mmap(nullptr, size, prot, flags, fd, offset);
  if (p == MAP_FAILED) return Status::FromErrno("mmap file");
  return Adopt(p, size);
}

void MmapRegion::reset() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace kubicle
