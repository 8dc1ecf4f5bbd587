// Starts the application processors listed in the MP table with
// INIT-SIPI-SIPI through the BSP's LAPIC and a real-mode trampoline at
// 0x6000 (trampoline.S). Each AP increments ap_running and halts. Guest-only.
#pragma once

#include <stdint.h>

#include "guest/testguest/bootinfo.h"

namespace kubicle::guest::testguest::arch {

// Returns the number of APs that checked in.
uint32_t StartApplicationProcessors(const MpInfo& mp);
// CPUs running: the BSP plus every AP that checked in.
uint32_t CpusRunning();

}  // namespace kubicle::guest::testguest::arch
