#include "vmm/arch/x86_64/layout.h"

#include <string>

namespace kubicle::vmm::arch {
namespace {

std::string Bytes(uint64_t v) {
  if (v % kMiB == 0) return std::to_string(v / kMiB) + " MiB";
  return std::to_string(v) + " bytes";
}

}  // namespace

Status ValidateMemorySize(uint64_t mem_bytes) {
  if (mem_bytes % kPageSize != 0) {
    return Status::InvalidArgument("guest memory size " + std::to_string(mem_bytes) +
                                   " bytes is not a multiple of 4 KiB");
  }
  if (mem_bytes < kMinMemoryBytes) {
    return Status::InvalidArgument("guest memory size " + Bytes(mem_bytes) +
                                   " is below the minimum of " + Bytes(kMinMemoryBytes));
  }
  if (mem_bytes > kMaxMemoryBytes) {
    return Status::InvalidArgument("guest memory size " + Bytes(mem_bytes) +
                                   " is above the maximum of " + Bytes(kMaxMemoryBytes));
  }
  return Status::Ok();
}

std::vector<GuestMemory::Range> MemoryRanges(uint64_t mem_bytes) {
  if (mem_bytes <= kMmioHoleStart) return {{0, mem_bytes}};
  return {{0, kMmioHoleStart}, {kRamAboveHoleStart, mem_bytes - kMmioHoleStart}};
}

}  // namespace kubicle::vmm::arch
