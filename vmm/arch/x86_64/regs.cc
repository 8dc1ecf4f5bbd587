#include "vmm/arch/x86_64/regs.h"

#include <cstring>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

// Access/flags for GDT entries (Firecracker's values): present, DPL 0.
constexpr uint16_t kCode64Flags = 0xa09b;  // G, L, code exec/read accessed
constexpr uint16_t kCode32Flags = 0xc09b;  // G, D/B, code exec/read accessed
constexpr uint16_t kDataFlags = 0xc093;    // G, D/B, data read/write accessed
constexpr uint16_t kTssFlags = 0x808b;     // G, busy 32/64-bit TSS

constexpr uint64_t kPtePresentWrite = 0x3;
constexpr uint64_t kPtePageSize = 0x80;  // 2 MiB page in a PD entry
constexpr uint64_t kRflagsReserved = 0x2;

constexpr uint32_t kApicLvtLint0 = 0x350;
constexpr uint32_t kApicLvtLint1 = 0x360;
constexpr uint32_t kApicModeNmi = 0x4;
constexpr uint32_t kApicModeExtInt = 0x7;

uint32_t ReadApicReg(const kvm_lapic_state& l, uint32_t off) {
  uint32_t v;
  std::memcpy(&v, l.regs + off, 4);
  return v;
}

void WriteApicReg(kvm_lapic_state& l, uint32_t off, uint32_t v) { std::memcpy(l.regs + off, &v, 4); }

uint32_t WithDeliveryMode(uint32_t reg, uint32_t mode) { return (reg & ~0x700u) | (mode << 8); }

}  // namespace

uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit) {
  return ((uint64_t{base} & 0xff000000) << 32) | ((uint64_t{flags} & 0xf0ff) << 40) |
         ((uint64_t{limit} & 0x000f0000) << 32) | ((uint64_t{base} & 0x00ffffff) << 16) |
         (uint64_t{limit} & 0x0000ffff);
}

kvm_segment SegmentFromGdt(uint64_t entry, uint8_t index) {
  kvm_segment s{};
  s.base = ((entry >> 16) & 0x00ffffff) | ((entry >> 32) & 0xff000000);
  uint32_t limit = static_cast<uint32_t>((entry & 0xffff) | ((entry >> 32) & 0xf0000));
  s.g = (entry >> 55) & 1;
  s.limit = s.g ? (limit << 12) | 0xfff : limit;
  s.selector = static_cast<uint16_t>(index * 8);
  s.type = (entry >> 40) & 0xf;
  s.present = (entry >> 47) & 1;
  s.dpl = (entry >> 45) & 0x3;
  s.db = (entry >> 54) & 1;
  s.s = (entry >> 44) & 1;
  s.l = (entry >> 53) & 1;
  s.avl = (entry >> 52) & 1;
  s.unusable = s.present ? 0 : 1;
  return s;
}

std::array<uint64_t, 4> BootGdt(EntryMode mode) {
  uint16_t code = mode == EntryMode::kLinux64 ? kCode64Flags : kCode32Flags;
  return {GdtEntry(0, 0, 0), GdtEntry(code, 0, 0xfffff), GdtEntry(kDataFlags, 0, 0xfffff),
          GdtEntry(kTssFlags, 0, 0xfffff)};
}

Status WriteGdtAndIdt(const GuestMemory& mem, EntryMode mode) {
  std::array<uint64_t, 4> gdt = BootGdt(mode);
  RETURN_IF_ERROR(mem.Write(kGdtAddr, gdt.data(), sizeof(gdt)).WithContext("writing GDT"));
  return mem.WriteObj<uint64_t>(kIdtAddr, 0).WithContext("writing IDT");
}

Status WriteIdentityPageTables(const GuestMemory& mem) {
  RETURN_IF_ERROR(mem.WriteObj<uint64_t>(kPml4Addr, kPdptAddr | kPtePresentWrite));
  RETURN_IF_ERROR(mem.WriteObj<uint64_t>(kPdptAddr, kPdAddr | kPtePresentWrite));
  std::array<uint64_t, 512> pd;
  for (uint64_t i = 0; i < pd.size(); ++i) {
    pd[i] = (i << 21) | kPtePresentWrite | kPtePageSize;
  }
  return mem.Write(kPdAddr, pd.data(), sizeof(pd)).WithContext("writing page tables");
}

kvm_regs BootRegs(EntryMode mode, uint64_t entry) {
  kvm_regs r{};
  r.rflags = kRflagsReserved;
  r.rip = entry;
  if (mode == EntryMode::kLinux64) {
    r.rsp = kBootStackPointer;
    r.rbp = kBootStackPointer;
    r.rsi = kZeroPageAddr;
  } else {
    r.rbx = kPvhStartInfoAddr;
  }
  return r;
}

void ApplyBootSregs(EntryMode mode, kvm_sregs& sregs) {
  std::array<uint64_t, 4> gdt = BootGdt(mode);
  sregs.gdt.base = kGdtAddr;
  sregs.gdt.limit = sizeof(gdt) - 1;
  sregs.idt.base = kIdtAddr;
  sregs.idt.limit = sizeof(uint64_t) - 1;
  kvm_segment code = SegmentFromGdt(gdt[1], 1);
  kvm_segment data = SegmentFromGdt(gdt[2], 2);
  sregs.cs = code;
  sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
  sregs.tr = SegmentFromGdt(gdt[3], 3);
  if (mode == EntryMode::kLinux64) {
    // Caches on (CD/NW clear), protection and paging on, PAE + long mode.
    sregs.cr0 = kCr0Pe | kCr0Et | kCr0Pg;
    sregs.cr3 = kPml4Addr;
    sregs.cr4 = kCr4Pae;
    sregs.efer = kEferLme | kEferLma;
  } else {
    sregs.cr0 = kCr0Pe | kCr0Et;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
  }
}

kvm_fpu BootFpu() {
  kvm_fpu fpu{};
  fpu.fcw = 0x37f;
  fpu.mxcsr = 0x1f80;
  return fpu;
}

void SetupLint(kvm_lapic_state& lapic) {
  WriteApicReg(lapic, kApicLvtLint0,
               WithDeliveryMode(ReadApicReg(lapic, kApicLvtLint0), kApicModeExtInt));
  WriteApicReg(lapic, kApicLvtLint1,
               WithDeliveryMode(ReadApicReg(lapic, kApicLvtLint1), kApicModeNmi));
}

}  // namespace kubicle::vmm::arch
