// The virtio-mmio register window (virtio 1.x, spec 4.2.2), "version 2"
// (modern) layout only: kubicle-vmm's MmioTransport serves these registers,
// the test guest's VirtioMmio driver reads and writes them. All registers are
// 32 bits wide and 4-byte aligned; the device's configuration space starts at
// kConfig.
//
// FREESTANDING, like spec.h: only <stdint.h>.
#pragma once

#include <stdint.h>

namespace kubicle::virtio::mmio {

// MagicValue reads "virt" (little-endian).
inline constexpr uint32_t kMagic = 0x74726976;
// Version reads 2 for the modern transport; 1 is the legacy one, which
// neither side speaks.
inline constexpr uint32_t kVersionModern = 2;

// Register offsets from the window's base.
enum Register : uint32_t {
  kMagicValue = 0x000,
  kVersion = 0x004,
  kDeviceId = 0x008,
  kVendorId = 0x00c,
  kDeviceFeatures = 0x010,
  kDeviceFeaturesSel = 0x014,
  kDriverFeatures = 0x020,
  kDriverFeaturesSel = 0x024,
  kQueueSel = 0x030,
  kQueueNumMax = 0x034,
  kQueueNum = 0x038,
  kQueueReady = 0x044,
  kQueueNotify = 0x050,
  kInterruptStatus = 0x060,
  kInterruptAck = 0x064,
  kStatus = 0x070,
  kQueueDescLow = 0x080,
  kQueueDescHigh = 0x084,
  kQueueDriverLow = 0x090,
  kQueueDriverHigh = 0x094,
  kQueueDeviceLow = 0x0a0,
  kQueueDeviceHigh = 0x0a4,
  kShmSel = 0x0ac,
  kShmLenLow = 0x0b0,
  kShmLenHigh = 0x0b4,
  kShmBaseLow = 0x0b8,
  kShmBaseHigh = 0x0bc,
  kConfigGeneration = 0x0fc,
  kConfig = 0x100,  // the device-specific configuration space
};

}  // namespace kubicle::virtio::mmio
