// Interrupt plumbing of the test guest: an IDT whose handlers only
// acknowledge (the main loop polls the devices after every wakeup), the 8259
// PIC pair remapped to vectors 0x20-0x2f with everything masked except the
// devices' lines, and the IOAPIC for lines >= 16 (vectors 0x30 + line,
// delivered to the BSP's LAPIC). Guest-only.
#pragma once

#include <stdint.h>

namespace kubicle::guest::testguest::arch {

inline constexpr uint64_t kLapicBase = 0xfee00000;
inline constexpr uint64_t kIoapicBase = 0xfec00000;

// Ring 0: builds and loads the IDT and the TSS (ring-0 stack for interrupts
// taken in ring 3, I/O bitmap opening ports 0-0x3ff to ring 3).
void InitCpuTables();
// Remaps and masks the PIC, software-enables the LAPIC in virtual-wire mode.
// Runs in ring 3 (port I/O through the TSS bitmap, LAPIC by MMIO).
void InitInterruptControllers();
// Routes device interrupt line `irq` to the CPU (PIC for < 16, else IOAPIC).
// False when the line cannot be routed (> 23).
bool EnableIrqLine(uint32_t irq);
uint32_t LapicId();

}  // namespace kubicle::guest::testguest::arch

extern "C" {
// Interrupts seen since boot (incremented by the stubs).
extern volatile uint64_t irq_count;
}
