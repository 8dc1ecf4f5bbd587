// Builds the e820 memory map and the Linux "zero page" (struct boot_params)
// that a 64-bit Linux entry reads through RSI. Building is pure (tested
// byte by byte); WriteZeroPage only copies the result into guest memory.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "vmm/arch/x86_64/boot_params.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

// The e820 map for guest RAM ranges (sorted, the first starting at 0 and
// reaching past 1 MiB): RAM [0, kLowMemoryEnd), reserved [kLowMemoryEnd,
// 1 MiB) for the MP table and legacy area, RAM [1 MiB, end of first range),
// then each further range (RAM above 4 GiB) as RAM.
Result<std::vector<E820Entry>> BuildE820(std::span<const GuestMemory::Range> ranges);

struct ZeroPageConfig {
  // The bzImage's setup header, copied into the zero page so the kernel sees
  // its own fields; absent for an ELF kernel (defaults are filled in).
  std::optional<SetupHeader> kernel_header;
  uint64_t cmdline_addr = 0;
  uint32_t cmdline_size = 0;  // bytes including the terminating NUL
  uint64_t initrd_addr = 0;   // 0 with initrd_size 0: no initrd
  uint64_t initrd_size = 0;
  std::vector<E820Entry> e820;
};

// Fills boot_params: setup header (boot_flag 0xaa55, "HdrS", type_of_loader
// 0xff, vid_mode 0xffff, CAN_USE_HEAP + heap_end_ptr), command line pointer
// and size, initrd image/size (low and ext_ high halves) and the e820 table.
// Fails when there are more than 128 e820 entries or an address does not
// fit the protocol's fields.
Result<BootParams> BuildZeroPage(const ZeroPageConfig& config);

// Writes boot_params at kZeroPageAddr.
Status WriteZeroPage(const GuestMemory& mem, const BootParams& params);

}  // namespace kubicle::vmm::arch
