#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/arch/devices.h"

namespace kubicle::guest::testguest::arch {

namespace {
__attribute__((section(".bss.large"))) Virtq g_rng_queue;  // zeroed by SetupQueue
}  // namespace

bool RngDevice::Init(const VirtioMmio& transport, const char** why) {
  transport_ = transport;
  if (!transport_.Negotiate(0, why)) return false;
  if (!transport_.SetupQueue(0, &g_rng_queue, why)) return false;
  transport_.DriverOk();
  ready_ = true;
  return true;
}

bool RngDevice::Read(uint8_t* out, uint32_t n) {
  if (!ready_) return false;
  Virtq& q = g_rng_queue;
  uint32_t got = 0;
  while (got < n) {
    q.desc[0] = {reinterpret_cast<uint64_t>(out + got), n - got, virtio::kDescFlagWrite, 0};
    q.Push(0);
    transport_.Notify(0);
    uint32_t id = 0, len = 0;
    // Most VMMs answer quickly after the notify exit: poll briefly, then
    // sleep until the device's interrupt. A device that keeps waking us
    // without answering is declared broken.
    int spins = 0;
    while (!q.PopUsed(&id, &len)) {
      if (++spins < 100000) {
        Pause();
      } else if (spins < 100000 + 64) {
        Idle();
      } else {
        ready_ = false;
        return false;
      }
    }
    if (id != 0 || len > n - got) {
      ready_ = false;  // the device returned something we never posted
      return false;
    }
    got += len;
  }
  return true;
}

}  // namespace kubicle::guest::testguest::arch
