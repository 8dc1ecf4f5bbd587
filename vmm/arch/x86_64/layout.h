// The x86-64 guest physical memory map of a kubicle-vmm microVM, in one place
// (as Firecracker's arch/x86_64/layout). Every boot structure, the MMIO
// window for devices and the RAM split around it are defined here; nothing
// else in the VMM hard-codes a guest address.
//
//   0x0000_0500  GDT (4 entries)            0x0000_0520  IDT (empty)
//   0x0000_6000  PVH hvm_start_info, then modlist and memmap (PVH boot only)
//   0x0000_7000  zero page (struct boot_params, Linux 64-bit boot only)
//   0x0000_8ff0  boot stack pointer (grows down)
//   0x0000_9000  PML4, 0xa000 PDPT, 0xb000 PD: identity map of the first GiB
//   0x0002_0000  kernel command line (up to kCmdlineMaxSize bytes)
//   0x0009_fc00  MP table (floating pointer + config table), reserved to 1 MiB
//   0x0010_0000  kernel (1 MiB)... RAM ... initrd at the top of low RAM
//   0xd000_0000  MMIO hole up to 4 GiB: virtio-mmio devices (4 KiB each),
//                IOAPIC 0xfec0_0000, LAPIC 0xfee0_0000, KVM TSS/identity map
//   0x1_0000_0000 RAM above the hole (guests larger than 3.25 GiB)
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kPageSize = 4 * kKiB;

// Descriptor tables written by the VMM for the boot CPU.
inline constexpr uint64_t kGdtAddr = 0x500;
inline constexpr uint64_t kIdtAddr = 0x520;
// PVH boot: struct hvm_start_info, its module list and its memory map.
inline constexpr uint64_t kPvhStartInfoAddr = 0x6000;
inline constexpr uint64_t kPvhModlistAddr = 0x6040;
inline constexpr uint64_t kPvhMemmapAddr = 0x6100;
inline constexpr uint64_t kPvhMemmapMaxEntries = (0x7000 - kPvhMemmapAddr) / 24;
// Linux boot protocol: struct boot_params ("zero page").
inline constexpr uint64_t kZeroPageAddr = 0x7000;
inline constexpr uint64_t kBootStackPointer = 0x8ff0;
// Identity-mapped page tables: PML4 -> PDPT -> PD of 512 2 MiB pages (1 GiB).
inline constexpr uint64_t kPml4Addr = 0x9000;
inline constexpr uint64_t kPdptAddr = 0xa000;
inline constexpr uint64_t kPdAddr = 0xb000;
inline constexpr uint64_t kIdentityMappedBytes = 1 * kGiB;
// Kernel command line, NUL included. Linux's own limit (COMMAND_LINE_SIZE,
// 2048 on x86) is enforced by the kernel; bzImages advertise theirs.
inline constexpr uint64_t kCmdlineAddr = 0x20000;
inline constexpr uint64_t kCmdlineMaxSize = 4096;
// Intel MP table. Linux scans the last KiB below 640 KiB for "_MP_". The
// area from here to 1 MiB is reported reserved in e820 (it also covers the
// legacy VGA/BIOS range), so a large table may run past 0xa0000.
inline constexpr uint64_t kMptableAddr = 0x9fc00;
inline constexpr uint64_t kLowMemoryEnd = kMptableAddr;  // end of usable RAM below 1 MiB
inline constexpr uint64_t kHighMemoryStart = 1 * kMiB;    // kernel load address
inline constexpr uint64_t kKernelLoadAddr = kHighMemoryStart;

// The MMIO hole: no RAM between kMmioHoleStart and 4 GiB.
inline constexpr uint64_t kMmioHoleStart = 0xd000'0000;
inline constexpr uint64_t kMmioHoleEnd = 4 * kGiB;
inline constexpr uint64_t kRamAboveHoleStart = kMmioHoleEnd;
// virtio-mmio devices: slot i is at kMmioDeviceBase + i * kMmioDeviceSize
// and raises GSI kFirstDeviceGsi + i (IOAPIC pins 5..23).
inline constexpr uint64_t kMmioDeviceBase = kMmioHoleStart;
inline constexpr uint64_t kMmioDeviceSize = 4 * kKiB;
inline constexpr uint32_t kFirstDeviceGsi = 5;
inline constexpr uint32_t kLastGsi = 23;  // IOAPIC has 24 pins
inline constexpr uint32_t kMaxMmioDevices = kLastGsi - kFirstDeviceGsi + 1;
inline constexpr uint64_t MmioDeviceAddr(uint32_t slot) {
  return kMmioDeviceBase + slot * kMmioDeviceSize;
}
inline constexpr uint32_t MmioDeviceGsi(uint32_t slot) { return kFirstDeviceGsi + slot; }

// Fixed platform devices inside the hole.
inline constexpr uint64_t kIoapicAddr = 0xfec0'0000;
inline constexpr uint64_t kLapicAddr = 0xfee0'0000;
// KVM_SET_IDENTITY_MAP_ADDR (one page) and KVM_SET_TSS_ADDR (three pages).
inline constexpr uint64_t kKvmIdentityMapAddr = 0xfffb'c000;
inline constexpr uint64_t kKvmTssAddr = 0xfffb'd000;

// Legacy devices on the port-I/O bus.
inline constexpr uint16_t kSerialPort = 0x3f8;  // COM1, 8 ports
inline constexpr uint32_t kSerialGsi = 4;
inline constexpr uint16_t kI8042DataPort = 0x60;
inline constexpr uint16_t kI8042CommandPort = 0x64;
inline constexpr uint32_t kI8042Gsi = 1;

// Guest memory size limits.
inline constexpr uint64_t kMinMemoryBytes = 16 * kMiB;
inline constexpr uint64_t kMaxMemoryBytes = 1024 * kGiB;

// Ok when mem_bytes is a multiple of 4 KiB within [kMinMemoryBytes,
// kMaxMemoryBytes]; otherwise InvalidArgument saying which rule it broke.
Status ValidateMemorySize(uint64_t mem_bytes);

// The guest RAM ranges for mem_bytes of memory: [0, mem) when it fits below
// the MMIO hole, else [0, kMmioHoleStart) plus the rest from 4 GiB.
// Precondition: ValidateMemorySize(mem_bytes) is ok.
std::vector<GuestMemory::Range> MemoryRanges(uint64_t mem_bytes);

}  // namespace kubicle::vmm::arch
