#include "vmm/arch/x86_64/zero_page.h"

#include <cstring>
#include <string>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

// Heap end for the real-mode setup code (unused on the 64-bit entry, but the
// protocol wants it set whenever CAN_USE_HEAP is).
constexpr uint16_t kHeapEndPtr = 0xfe00;
// kernel_alignment for an ELF kernel, which has no header of its own: the
// 16 MiB Linux uses by default (CONFIG_PHYSICAL_ALIGN).
constexpr uint32_t kDefaultKernelAlignment = 0x0100'0000;

}  // namespace

Result<std::vector<E820Entry>> BuildE820(std::span<const GuestMemory::Range> ranges) {
  if (ranges.empty() || ranges[0].base != 0 || ranges[0].size <= kHighMemoryStart) {
    return Status::InvalidArgument("guest RAM must start at 0 and extend beyond 1 MiB");
  }
  std::vector<E820Entry> e820;
  e820.push_back({0, kLowMemoryEnd, kE820Ram});
  e820.push_back({kLowMemoryEnd, kHighMemoryStart - kLowMemoryEnd, kE820Reserved});
  e820.push_back({kHighMemoryStart, ranges[0].size - kHighMemoryStart, kE820Ram});
  for (size_t i = 1; i < ranges.size(); ++i) {
    const GuestMemory::Range& prev = ranges[i - 1];
    if (ranges[i].base < prev.base + prev.size) {
      return Status::InvalidArgument("guest RAM ranges are not sorted and disjoint");
    }
    e820.push_back({ranges[i].base, ranges[i].size, kE820Ram});
  }
  if (e820.size() > kE820MaxEntries) {
    return Status::InvalidArgument("too many e820 entries: " + std::to_string(e820.size()));
  }
  return e820;
}

Result<BootParams> BuildZeroPage(const ZeroPageConfig& config) {
  if (config.e820.size() > kE820MaxEntries) {
    return Status::InvalidArgument("too many e820 entries: " + std::to_string(config.e820.size()));
  }
  if (config.cmdline_addr >= (1ull << 32)) {
    return Status::InvalidArgument("command line must lie below 4 GiB");
  }
  if (config.initrd_addr + config.initrd_size > (1ull << 32)) {
    return Status::InvalidArgument("initrd must lie below 4 GiB");
  }
  BootParams bp;
  std::memset(&bp, 0, sizeof(bp));
  SetupHeader& hdr = bp.hdr;
  if (config.kernel_header) {
    hdr = *config.kernel_header;
  } else {
    hdr.kernel_alignment = kDefaultKernelAlignment;
  }
  hdr.boot_flag = kBootFlagMagic;
  hdr.header = kSetupHeaderMagic;
  hdr.type_of_loader = kTypeOfLoaderUndefined;
  hdr.vid_mode = kVidModeNormal;
  hdr.loadflags |= kCanUseHeap;
  hdr.heap_end_ptr = kHeapEndPtr;
  hdr.cmd_line_ptr = static_cast<uint32_t>(config.cmdline_addr);
  hdr.cmdline_size = config.cmdline_size;
  bp.ext_cmd_line_ptr = 0;
  hdr.ramdisk_image = static_cast<uint32_t>(config.initrd_addr);
  hdr.ramdisk_size = static_cast<uint32_t>(config.initrd_size);
  bp.ext_ramdisk_image = 0;
  bp.ext_ramdisk_size = 0;
  bp.e820_entries = static_cast<uint8_t>(config.e820.size());
  for (size_t i = 0; i < config.e820.size(); ++i) bp.e820_table[i] = config.e820[i];
  return bp;
}

Status WriteZeroPage(const GuestMemory& mem, const BootParams& params) {
  return mem.WriteObj(kZeroPageAddr, params).WithContext("writing zero page");
}

}  // namespace kubicle::vmm::arch
