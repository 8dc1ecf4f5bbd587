// The virtio 1.x layout (OASIS virtio v1.2) that both sides of the device
// boundary compile: kubicle-vmm's devices (vmm/devices/virtio/) and the test
// guest's drivers (guest/testguest/). Device types, feature and status bits,
// interrupt bits and the split virtqueue's descriptor and used element. Names
// follow the spec so they can be grepped there; the MMIO register window is
// in mmio.h, the vsock packet header in vsock.h.
//
// FREESTANDING: the test guest compiles this with -ffreestanding and links
// it -nostdlib (guest/testguest/CMakeLists.txt), so only <stdint.h> and
// compiler builtins; no libc, no STL.
#pragma once

#include <stdint.h>

namespace kubicle::virtio {

// virtio structures are little-endian; both sides read them in place.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "virtio 1.x structures are little-endian; the machine must be too");

// Device types (spec 5).
inline constexpr uint32_t kDeviceIdNet = 1;
inline constexpr uint32_t kDeviceIdBlock = 2;
inline constexpr uint32_t kDeviceIdRng = 4;
inline constexpr uint32_t kDeviceIdVsock = 19;

// Feature bits shared by all devices (spec 6).
inline constexpr unsigned kFeatureRingIndirectDesc = 28;  // the VMM does not offer it
inline constexpr unsigned kFeatureRingEventIdx = 29;
inline constexpr unsigned kFeatureVersion1 = 32;

// virtio-net feature bits (spec 5.1.3); only those the VMM offers.
inline constexpr unsigned kFeatureNetMac = 5;
inline constexpr unsigned kFeatureNetStatus = 16;

constexpr uint64_t FeatureBit(unsigned bit) { return uint64_t{1} << bit; }

// Device status bits (spec 2.1).
inline constexpr uint32_t kStatusAcknowledge = 1;
inline constexpr uint32_t kStatusDriver = 2;
inline constexpr uint32_t kStatusDriverOk = 4;
inline constexpr uint32_t kStatusFeaturesOk = 8;
inline constexpr uint32_t kStatusDeviceNeedsReset = 64;
inline constexpr uint32_t kStatusFailed = 128;

// InterruptStatus bits of virtio-mmio (spec 4.2.2).
inline constexpr uint32_t kInterruptUsedBuffer = 1;
inline constexpr uint32_t kInterruptConfigChange = 2;

// Split virtqueue layout (spec 2.7).
inline constexpr uint16_t kDescFlagNext = 1;
inline constexpr uint16_t kDescFlagWrite = 2;
inline constexpr uint16_t kDescFlagIndirect = 4;
inline constexpr uint16_t kAvailFlagNoInterrupt = 1;
inline constexpr uint16_t kUsedFlagNoNotify = 1;

struct VirtqDesc {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};
static_assert(sizeof(VirtqDesc) == 16);

struct VirtqUsedElem {
  uint32_t id;
  uint32_t len;
};
static_assert(sizeof(VirtqUsedElem) == 8);

// The largest queue the spec allows for split rings.
inline constexpr uint16_t kMaxQueueSize = 32768;

}  // namespace kubicle::virtio
