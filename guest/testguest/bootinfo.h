// Parsers for what the VMM hands the test guest at boot: the kernel command
// line's virtio_mmio.device= entries, the e820 map, and the Intel MP table.
// Portable (no hardware access) so they are unit-tested on the host.
//
// All inputs are treated as untrusted: every length and pointer is bounds
// checked against what the caller says is readable.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest {

struct VirtioMmioDevice {
  uint64_t base = 0;
  uint64_t size = 0;
  uint32_t irq = 0;
};

// Finds every `virtio_mmio.device=<size>@<base>:<irq>[:<id>]` in the
// command line (Linux's syntax: size with optional K/M/G, numbers in C
// notation). Malformed entries are skipped. Returns how many were stored
// (at most `max`).
uint32_t ParseVirtioMmioDevices(const char* cmdline, uint32_t len, VirtioMmioDevice* out,
                                uint32_t max);

// Parses a C-style unsigned number (0x.. hex, else decimal) at s[*pos..len).
// False when there are no digits or it overflows 64 bits.
bool ParseNumber(const char* s, uint32_t len, uint32_t* pos, uint64_t* value);

struct E820Entry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t type = 0;  // 1 = usable RAM
};

// Reads the zero page's e820 table (count at 0x1e8, 20-byte entries at 0x2d0).
uint32_t ReadZeroPageE820(const uint8_t* zero_page, E820Entry* out, uint32_t max);

// Physical memory as the MP parser sees it: returns a pointer to [addr,
// addr+len) or nullptr when that range is not readable RAM.
using PhysReader = const uint8_t* (*)(uint64_t addr, uint32_t len);

struct MpInfo {
  static constexpr uint32_t kMaxCpus = 64;
  uint32_t cpu_count = 0;  // enabled processors, BSP included
  uint8_t apic_ids[kMaxCpus] = {};
  uint8_t bsp_apic_id = 0;
  uint32_t lapic_address = 0;
  const char* error = nullptr;  // why parsing failed, when it did
};

// Looks for the "_MP_" floating pointer in the EBDA's last KiB
// (0x9fc00..0xa0000, where Firecracker-style VMMs put it) and in the BIOS
// area (0xf0000..0x100000), checks checksums and collects processor entries.
bool ParseMpTable(PhysReader read, MpInfo* out);

}  // namespace kubicle::guest::testguest
