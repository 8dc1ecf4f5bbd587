// x86-64 primitives for the test guest: port I/O, MMIO, interrupt flag,
// halting. Guest-only (freestanding); nothing here is used by host tests.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::guest::testguest::arch {

inline void Outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" ::"a"(v), "Nd"(port)); }
inline uint8_t Inb(uint16_t port) {
  uint8_t v;
  asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
  return v;
}

inline uint32_t MmioRead32(uint64_t addr) {
  return *reinterpret_cast<volatile uint32_t*>(addr);
}
inline void MmioWrite32(uint64_t addr, uint32_t v) {
  *reinterpret_cast<volatile uint32_t*>(addr) = v;
}
inline uint8_t MmioRead8(uint64_t addr) { return *reinterpret_cast<volatile uint8_t*>(addr); }

inline void Cli() { asm volatile("cli" ::: "memory"); }
inline void Sti() { asm volatile("sti" ::: "memory"); }
// Enables interrupts and halts atomically (STI's one-instruction shadow
// covers HLT), so a wakeup that arrives between the check and the halt is
// not lost. Returns with interrupts disabled again.
inline void SafeHalt() { asm volatile("sti; hlt; cli" ::: "memory"); }
extern "C" void user_halt();
// Set once kmain has dropped to ring 3.
extern bool g_user_mode;
// Sleeps until the next interrupt, from ring 0 or ring 3. Call with
// interrupts disabled (always true in ring 3) after finding no work.
inline void Idle() {
  if (g_user_mode) {
    user_halt();
  } else {
    SafeHalt();
  }
}
inline void Pause() { asm volatile("pause" ::: "memory"); }
inline void CompilerBarrier() { asm volatile("" ::: "memory"); }
[[noreturn]] inline void HaltForever() {
  for (;;) asm volatile("cli; hlt" ::: "memory");
}

}  // namespace kubicle::guest::testguest::arch
