#include "vmm/memory/guest_memory.h"

#include <string>

namespace kubicle::vmm {
namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<std::unique_ptr<GuestMemory>> GuestMemory::CreateAnonymous(const std::vector<Range>& ranges) {
  std::vector<MmapRegion> maps;
  for (const Range& r : ranges) {
    ASSIGN_OR_RETURN(MmapRegion m, MmapRegion::Anonymous(r.size));
    // Guest RAM may be large and mostly untouched; let the kernel back it with
    // huge pages where it can (fork and restore copy fewer page-table entries).
    (void)::madvise(m.data(), m.size(), MADV_HUGEPAGE);
    maps.push_back(std::move(m));
  }
  return FromMappings(ranges, std::move(maps));
}

Result<std::unique_ptr<GuestMemory>> GuestMemory::FromMappings(const std::vector<Range>& ranges,
                                                               std::vector<MmapRegion> maps) {
  if (ranges.empty()) return Status::InvalidArgument("guest memory needs at least one range");
  if (ranges.size() != maps.size()) return Status::InvalidArgument("one mapping per range expected");
  std::unique_ptr<GuestMemory> mem(new GuestMemory());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.size == 0 || r.base + r.size < r.base)
      return Status::InvalidArgument("bad guest memory range at " + Hex(r.base));
    if (maps[i].size() < r.size)
      return Status::InvalidArgument("mapping smaller than guest range at " + Hex(r.base));
    for (const GuestRegion& g : mem->regions_) {
      if (r.base < g.guest_base + g.size && g.guest_base < r.base + r.size)
        return Status::InvalidArgument("overlapping guest memory ranges at " + Hex(r.base));
    }
    mem->regions_.push_back({r.base, r.size, maps[i].data()});
    mem->maps_.push_back(std::move(maps[i]));
  }
  return mem;
}

uint64_t GuestMemory::total_size() const {
  uint64_t t = 0;
  for (const GuestRegion& r : regions_) t += r.size;
  return t;
}

GuestAddress GuestMemory::end() const {
  GuestAddress e = 0;
  for (const GuestRegion& r : regions_) e = std::max(e, r.guest_base + r.size);
  return e;
}

uint8_t* GuestMemory::HostPointer(GuestAddress gpa, uint64_t len) const {
  for (const GuestRegion& r : regions_) {
    if (gpa < r.guest_base) continue;
    uint64_t off = gpa - r.guest_base;
    if (off > r.size) continue;
    if (len > r.size - off) return nullptr;
    if (off == r.size && len > 0) continue;
    return r.host + off;
  }
  return nullptr;
}

bool GuestMemory::IsValidRange(GuestAddress gpa, uint64_t len) const {
  return HostPointer(gpa, len) != nullptr;
}

Result<std::span<uint8_t>> GuestMemory::Slice(GuestAddress gpa, uint64_t len) const {
  uint8_t* p = HostPointer(gpa, len);
  if (p == nullptr)
    return Status::OutOfRange("guest range " + Hex(gpa) + "+" + Hex(len) + " is outside guest memory");
  return std::span<uint8_t>(p, len);
}

Status GuestMemory::Read(GuestAddress gpa, void* dst, uint64_t len) const {
  ASSIGN_OR_RETURN(std::span<uint8_t> s, Slice(gpa, len));
  std::memcpy(dst, s.data(), len);
  return Status::Ok();
}

Status GuestMemory::Write(GuestAddress gpa, const void* src, uint64_t len) const {
  ASSIGN_OR_RETURN(std::span<uint8_t> s, Slice(gpa, len));
  std::memcpy(s.data(), src, len);
  return Status::Ok();
}

Result<uint16_t> GuestMemory::LoadAcquire16(GuestAddress gpa) const {
  if (gpa % 2) return Status::InvalidArgument("unaligned 16-bit guest access at " + Hex(gpa));
  ASSIGN_OR_RETURN(std::span<uint8_t> s, Slice(gpa, 2));
  return __atomic_load_n(reinterpret_cast<uint16_t*>(s.data()), __ATOMIC_ACQUIRE);
}

Status GuestMemory::StoreRelease16(GuestAddress gpa, uint16_t v) const {
  if (gpa % 2) return Status::InvalidArgument("unaligned 16-bit guest access at " + Hex(gpa));
  ASSIGN_OR_RETURN(std::span<uint8_t> s, Slice(gpa, 2));
  __atomic_store_n(reinterpret_cast<uint16_t*>(s.data()), v, __ATOMIC_RELEASE);
  return Status::Ok();
}

}  // namespace kubicle::vmm
