#include "guest/testguest/arch/smp.h"

#include "guest/testguest/arch/console.h"
#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/arch/interrupts.h"
#include "guest/testguest/freestanding.h"

extern "C" {
extern const uint8_t ap_trampoline_start[];
extern const uint8_t ap_trampoline_end[];
volatile uint32_t ap_running = 0;
}

namespace kubicle::guest::testguest::arch {

namespace {
constexpr uint64_t kTrampolineBase = 0x6000;
constexpr uint32_t kIcrLow = 0x300, kIcrHigh = 0x310;
constexpr uint32_t kIcrInitAssert = 0x00004500;
constexpr uint32_t kIcrStartup = 0x00004600 | (kTrampolineBase >> 12);
constexpr uint32_t kIcrBusy = 1u << 12;

void SendIpi(uint32_t apic_id, uint32_t low) {
  MmioWrite32(kLapicBase + kIcrHigh, apic_id << 24);
  MmioWrite32(kLapicBase + kIcrLow, low);
  for (int i = 0; i < 100000 && (MmioRead32(kLapicBase + kIcrLow) & kIcrBusy) != 0; ++i) Pause();
}
}  // namespace

uint32_t CpusRunning() { return 1 + __atomic_load_n(&ap_running, __ATOMIC_ACQUIRE); }

uint32_t StartApplicationProcessors(const MpInfo& mp) {
  const uint32_t bsp = LapicId();
  uint32_t expected = 0;
  Copy(reinterpret_cast<void*>(kTrampolineBase), ap_trampoline_start,
       size_t(ap_trampoline_end - ap_trampoline_start));
  CompilerBarrier();
  for (uint32_t i = 0; i < mp.cpu_count; ++i) {
    const uint32_t id = mp.apic_ids[i];
    if (id == bsp) continue;
    // KVM handles INIT then SIPI in order even when both are pending, so
    // the classic 10 ms / 200 us delays are not needed; the second SIPI is
    // ignored by an AP that already started.
    SendIpi(id, kIcrInitAssert);
    SendIpi(id, kIcrStartup);
    SendIpi(id, kIcrStartup);
    ++expected;
  }
  // Bounded wait (each AP needs a few dozen instructions).
  for (uint32_t spin = 0; spin < 2000000 && CpusRunning() - 1 < expected; ++spin) Pause();
  return CpusRunning() - 1;
}

}  // namespace kubicle::guest::testguest::arch
