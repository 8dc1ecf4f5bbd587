#include "guest/testguest/arch/interrupts.h"

#include <stddef.h>

#include "guest/testguest/arch/console.h"
#include "guest/testguest/arch/cpu.h"

extern "C" {
void isr_exc_0();
void isr_exc_1();
void isr_exc_3();
void isr_exc_4();
void isr_exc_5();
void isr_exc_6();
void isr_exc_7();
void isr_exc_8();
void isr_exc_9();
void isr_exc_10();
void isr_exc_11();
void isr_exc_12();
void isr_exc_13();
void isr_exc_14();
void isr_exc_15();
void isr_exc_16();
void isr_exc_17();
void isr_exc_18();
void isr_exc_19();
void isr_exc_20();
void isr_exc_21();
void isr_ignore();
void isr_pic_master();
void isr_pic_slave();
void isr_lapic();
extern uint64_t gdt_tss[2];
extern uint8_t ring0_stack_top[];

struct __attribute__((packed)) IdtPointer {
  uint16_t limit;
  uint64_t base;
};
// Shared with the AP trampoline, which loads the same IDT.
IdtPointer idt_ptr;

// Called by the exception stubs with {vector, error, rip, cs, rflags, rsp, ss}.
[[noreturn]] void ExceptionHandler(const uint64_t* frame) {
  using namespace kubicle::guest::testguest::arch;
  Print("kubicle-testguest: exception ");
  PrintDec(frame[0]);
  Print(" error ");
  PrintHex(frame[1]);
  Print(" rip ");
  PrintHex(frame[2]);
  Print("\n");
  HaltForever();
}
}

namespace kubicle::guest::testguest::arch {

namespace {
struct IdtGate {
  uint16_t offset_low;
  uint16_t selector;
  uint8_t ist;
  uint8_t type;
  uint16_t offset_mid;
  uint32_t offset_high;
  uint32_t reserved;
};
static_assert(sizeof(IdtGate) == 16);

// Every gate is written before lidt, so no zeroing needed.
__attribute__((section(".bss.large"))) alignas(16) IdtGate g_idt[256];

// 64-bit TSS: rsp0 (the stack for interrupts taken in ring 3) and the I/O
// permission bitmap.
struct __attribute__((packed)) Tss {
  uint32_t reserved0;
  uint64_t rsp[3];
  uint64_t reserved1;
  uint64_t ist[7];
  uint64_t reserved2;
  uint16_t reserved3;
  uint16_t iomap_base;
  uint8_t iomap[0x400 / 8 + 1];  // ports 0-0x3ff open (0 bits), then the 0xff terminator
};
alignas(16) Tss g_tss;

void LoadTss() {
  g_tss.rsp[0] = reinterpret_cast<uint64_t>(ring0_stack_top);
  // Ring 3 reaches the serial port and the PIC through the I/O bitmap. (This
  // hypervisor ignores RFLAGS.IOPL for ring-3 port I/O but honours the
  // bitmap; IOPL stays 0 so ring 3 cannot toggle IF.)
  g_tss.iomap_base = offsetof(Tss, iomap);
  for (uint8_t& b : g_tss.iomap) b = 0;
  g_tss.iomap[sizeof(g_tss.iomap) - 1] = 0xff;
  const uint64_t base = reinterpret_cast<uint64_t>(&g_tss);
  gdt_tss[0] = uint64_t(sizeof(Tss) - 1) | ((base & 0xffffff) << 16) | (0x89ull << 40) |
               (((base >> 24) & 0xff) << 56);
  gdt_tss[1] = base >> 32;
  asm volatile("ltr %w0" ::"r"(uint16_t(0x30)));
}

void SetGate(uint32_t vector, void (*handler)()) {
  const uint64_t a = reinterpret_cast<uint64_t>(handler);
  g_idt[vector] = IdtGate{uint16_t(a), 0x08, 0, 0x8e, uint16_t(a >> 16), uint32_t(a >> 32), 0};
}

constexpr uint16_t kPic1Cmd = 0x20, kPic1Data = 0x21, kPic2Cmd = 0xa0, kPic2Data = 0xa1;
uint8_t g_mask1 = 0xff, g_mask2 = 0xff;

void InitPic() {
  Outb(kPic1Cmd, 0x11);  // ICW1: edge, cascade, ICW4 follows
  Outb(kPic2Cmd, 0x11);
  Outb(kPic1Data, 0x20);  // ICW2: vector base
  Outb(kPic2Data, 0x28);
  Outb(kPic1Data, 0x04);  // ICW3: slave on IRQ2
  Outb(kPic2Data, 0x02);
  Outb(kPic1Data, 0x01);  // ICW4: 8086 mode
  Outb(kPic2Data, 0x01);
  Outb(kPic1Data, g_mask1);
  Outb(kPic2Data, g_mask2);
}

void IoapicWrite(uint32_t reg, uint32_t v) {
  MmioWrite32(kIoapicBase, reg);
  MmioWrite32(kIoapicBase + 0x10, v);
}
}  // namespace

uint32_t LapicId() { return MmioRead32(kLapicBase + 0x20) >> 24; }

void InitCpuTables() {
  static void (*const kExceptions[22])() = {
      isr_exc_0,  isr_exc_1,  isr_ignore, isr_exc_3,  isr_exc_4,  isr_exc_5,
      isr_exc_6,  isr_exc_7,  isr_exc_8,  isr_exc_9,  isr_exc_10, isr_exc_11,
      isr_exc_12, isr_exc_13, isr_exc_14, isr_exc_15, isr_exc_16, isr_exc_17,
      isr_exc_18, isr_exc_19, isr_exc_20, isr_exc_21};
  for (uint32_t v = 0; v < 256; ++v) SetGate(v, isr_ignore);
  for (uint32_t v = 0; v < 22; ++v) SetGate(v, kExceptions[v]);  // vector 2 (NMI) is ignored
  for (uint32_t v = 0x20; v < 0x28; ++v) SetGate(v, isr_pic_master);
  for (uint32_t v = 0x28; v < 0x30; ++v) SetGate(v, isr_pic_slave);
  for (uint32_t v = 0x30; v < 0x50; ++v) SetGate(v, isr_lapic);
  idt_ptr.limit = sizeof(g_idt) - 1;
  idt_ptr.base = reinterpret_cast<uint64_t>(g_idt);
  asm volatile("lidt %0" ::"m"(idt_ptr));
  LoadTss();
}

void InitInterruptControllers() {
  InitPic();
  // Software-enable the LAPIC (spurious vector 0xff, routed to isr_ignore):
  // needed for IOAPIC delivery and for sending INIT/SIPI.
  MmioWrite32(kLapicBase + 0xf0, 0x1ff);
  // Virtual-wire mode: LINT0 = ExtINT (the PIC), LINT1 = NMI. The VMM sets
  // this already (as Firecracker does); firmware such as qboot does not.
  MmioWrite32(kLapicBase + 0x350, 0x700);
  MmioWrite32(kLapicBase + 0x360, 0x400);
}

bool EnableIrqLine(uint32_t irq) {
  if (irq < 8) {
    g_mask1 &= uint8_t(~(1u << irq));
    Outb(kPic1Data, g_mask1);
    return true;
  }
  if (irq < 16) {
    g_mask2 &= uint8_t(~(1u << (irq - 8)));
    g_mask1 &= uint8_t(~(1u << 2));  // the cascade
    Outb(kPic2Data, g_mask2);
    Outb(kPic1Data, g_mask1);
    return true;
  }
  if (irq > 23) return false;
  // Edge-triggered, active high, fixed delivery, physical destination = BSP.
  IoapicWrite(0x10 + 2 * irq + 1, LapicId() << 24);
  IoapicWrite(0x10 + 2 * irq, 0x30 + irq);
  return true;
}

}  // namespace kubicle::guest::testguest::arch
