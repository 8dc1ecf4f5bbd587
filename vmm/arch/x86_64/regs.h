// Boot-time register and descriptor-table setup for x86-64 vCPUs.
//
// Two entry modes, as Firecracker:
// - Linux 64-bit boot protocol: long mode with the VMM's identity-mapped
//   page tables (first GiB, 2 MiB pages) and GDT (0x08 code64, 0x10 data,
//   0x18 TSS); RIP = entry, RSP = RBP = kBootStackPointer, RSI = zero page.
// - PVH: 32-bit protected mode, flat segments, paging off, EBX =
//   hvm_start_info.
// Memory writers (GDT/IDT, page tables) are separate from the pure register
// builders so both are testable; SetupLint edits a LAPIC state in place.
#pragma once

#include <linux/kvm.h>

#include <array>
#include <cstdint>

#include "common/status.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

inline constexpr uint16_t kBootCodeSelector = 0x08;
inline constexpr uint16_t kBootDataSelector = 0x10;
inline constexpr uint16_t kBootTssSelector = 0x18;

inline constexpr uint64_t kCr0Pe = 1;
inline constexpr uint64_t kCr0Et = 1 << 4;
inline constexpr uint64_t kCr0Pg = 1ull << 31;
inline constexpr uint64_t kCr4Pae = 1 << 5;
inline constexpr uint64_t kEferLme = 1 << 8;
inline constexpr uint64_t kEferLma = 1 << 10;

enum class EntryMode { kLinux64, kPvh };

// A GDT descriptor from flags (the 0xf0ff bits of the access/flags bytes),
// base and 20-bit limit.
uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit);
// The kvm_segment KVM_SET_SREGS expects for GDT slot `index`.
kvm_segment SegmentFromGdt(uint64_t entry, uint8_t index);
// [null, code, data, tss]: code is 64-bit for kLinux64, 32-bit for kPvh.
std::array<uint64_t, 4> BootGdt(EntryMode mode);

// Writes BootGdt(mode) at kGdtAddr and an empty IDT at kIdtAddr.
Status WriteGdtAndIdt(const GuestMemory& mem, EntryMode mode);
// Writes PML4/PDPT/PD identity-mapping [0, 1 GiB) with 2 MiB pages.
Status WriteIdentityPageTables(const GuestMemory& mem);

// General registers for the boot CPU.
kvm_regs BootRegs(EntryMode mode, uint64_t entry);
// Applies segments, descriptor tables and control registers for mode on top
// of the vCPU's current sregs (keeps APIC base and the rest).
void ApplyBootSregs(EntryMode mode, kvm_sregs& sregs);
// x87 control word 0x37f and MXCSR 0x1f80 (their reset values per SDM).
kvm_fpu BootFpu();
// LVT LINT0 = ExtINT (PIC interrupts reach the CPU and wake HLT) and LINT1 =
// NMI, as the MP table declares them.
void SetupLint(kvm_lapic_state& lapic);

}  // namespace kubicle::vmm::arch
