#include "vmm/arch/x86_64/regs.h"

#include <gtest/gtest.h>

#include <cstring>

#include "vmm/arch/x86_64/layout.h"

namespace kubicle::vmm::arch {
namespace {

TEST(RegsTest, GdtEntriesMatchTheLinuxBootGdt) {
  std::array<uint64_t, 4> gdt = BootGdt(EntryMode::kLinux64);
  EXPECT_EQ(gdt[0], 0u);
  EXPECT_EQ(gdt[1], 0x00af9b000000ffffull);  // 64-bit code
  EXPECT_EQ(gdt[2], 0x00cf93000000ffffull);  // data
  EXPECT_EQ(gdt[3], 0x008f8b000000ffffull);  // TSS
  EXPECT_EQ(BootGdt(EntryMode::kPvh)[1], 0x00cf9b000000ffffull);  // 32-bit code
}

TEST(RegsTest, SegmentFromGdtDecodesEveryField) {
  kvm_segment code = SegmentFromGdt(BootGdt(EntryMode::kLinux64)[1], 1);
  EXPECT_EQ(code.selector, kBootCodeSelector);
  EXPECT_EQ(code.base, 0u);
  EXPECT_EQ(code.limit, 0xffffffffu);
  EXPECT_EQ(code.type, 0xb);
  EXPECT_EQ(code.present, 1);
  EXPECT_EQ(code.s, 1);
  EXPECT_EQ(code.l, 1);
  EXPECT_EQ(code.db, 0);
  EXPECT_EQ(code.g, 1);
  EXPECT_EQ(code.unusable, 0);
  kvm_segment data = SegmentFromGdt(BootGdt(EntryMode::kLinux64)[2], 2);
  EXPECT_EQ(data.selector, kBootDataSelector);
  EXPECT_EQ(data.db, 1);
  EXPECT_EQ(data.l, 0);
  EXPECT_EQ(data.type, 0x3);
  kvm_segment null = SegmentFromGdt(0, 0);
  EXPECT_EQ(null.unusable, 1);
  kvm_segment based = SegmentFromGdt(GdtEntry(0x0093, 0x12345678, 0xabcd), 5);
  EXPECT_EQ(based.base, 0x12345678u);
  EXPECT_EQ(based.limit, 0xabcdu);
  EXPECT_EQ(based.selector, 40);
}

TEST(RegsTest, LongModeSregsAndRegs) {
  kvm_sregs sregs{};
  sregs.apic_base = 0xfee00900;
  ApplyBootSregs(EntryMode::kLinux64, sregs);
  EXPECT_EQ(sregs.cr0, kCr0Pe | kCr0Et | kCr0Pg);
  EXPECT_EQ(sregs.cr3, kPml4Addr);
  EXPECT_EQ(sregs.cr4, kCr4Pae);
  EXPECT_EQ(sregs.efer, kEferLme | kEferLma);
  EXPECT_EQ(sregs.gdt.base, kGdtAddr);
  EXPECT_EQ(sregs.gdt.limit, 31);
  EXPECT_EQ(sregs.cs.selector, kBootCodeSelector);
  EXPECT_EQ(sregs.ss.selector, kBootDataSelector);
  EXPECT_EQ(sregs.tr.selector, kBootTssSelector);
  EXPECT_EQ(sregs.apic_base, 0xfee00900u);  // untouched

  kvm_regs regs = BootRegs(EntryMode::kLinux64, 0x1000000);
  EXPECT_EQ(regs.rip, 0x1000000u);
  EXPECT_EQ(regs.rsp, kBootStackPointer);
  EXPECT_EQ(regs.rbp, kBootStackPointer);
  EXPECT_EQ(regs.rsi, kZeroPageAddr);
  EXPECT_EQ(regs.rflags, 2u);
}

TEST(RegsTest, PvhSregsAndRegs) {
  kvm_sregs sregs{};
  ApplyBootSregs(EntryMode::kPvh, sregs);
  EXPECT_EQ(sregs.cr0 & kCr0Pg, 0u);
  EXPECT_EQ(sregs.cr0 & kCr0Pe, kCr0Pe);
  EXPECT_EQ(sregs.efer, 0u);
  EXPECT_EQ(sregs.cs.db, 1);
  EXPECT_EQ(sregs.cs.l, 0);
  kvm_regs regs = BootRegs(EntryMode::kPvh, 0x1000123);
  EXPECT_EQ(regs.rbx, kPvhStartInfoAddr);
  EXPECT_EQ(regs.rip, 0x1000123u);
}

TEST(RegsTest, IdentityPageTables) {
  Result<std::unique_ptr<GuestMemory>> mem = GuestMemory::CreateAnonymous(MemoryRanges(16 * kMiB));
  ASSERT_TRUE(mem.ok());
  ASSERT_TRUE(WriteIdentityPageTables(**mem).ok());
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kPml4Addr), 0xa003u);
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kPdptAddr), 0xb003u);
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kPdAddr), 0x83u);
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kPdAddr + 8), 0x200083u);
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kPdAddr + 511 * 8), 0x3fe00083u);
  ASSERT_TRUE(WriteGdtAndIdt(**mem, EntryMode::kLinux64).ok());
  EXPECT_EQ(*(*mem)->ReadObj<uint64_t>(kGdtAddr + 8), 0x00af9b000000ffffull);
}

TEST(RegsTest, LintDeliveryModes) {
  kvm_lapic_state lapic{};
  uint32_t masked = 0x10000;  // LVT mask bit must survive
  std::memcpy(lapic.regs + 0x350, &masked, 4);
  std::memcpy(lapic.regs + 0x360, &masked, 4);
  SetupLint(lapic);
  uint32_t lint0, lint1;
  std::memcpy(&lint0, lapic.regs + 0x350, 4);
  std::memcpy(&lint1, lapic.regs + 0x360, 4);
  EXPECT_EQ(lint0, 0x10700u);  // ExtINT
  EXPECT_EQ(lint1, 0x10400u);  // NMI
}

TEST(RegsTest, FpuDefaults) {
  kvm_fpu fpu = BootFpu();
  EXPECT_EQ(fpu.fcw, 0x37f);
  EXPECT_EQ(fpu.mxcsr, 0x1f80u);
}

}  // namespace
}  // namespace kubicle::vmm::arch
