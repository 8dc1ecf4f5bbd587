#include "guest/testguest/arch/virtio.h"

#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest::arch {

namespace {
enum : uint32_t {
  kMagic = 0x000,
  kVersion = 0x004,
  kDeviceId = 0x008,
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
  kConfigGeneration = 0x0fc,
  kConfig = 0x100,
};
constexpr uint32_t kStatusAck = 1, kStatusDriver = 2, kStatusDriverOk = 4, kStatusFeaturesOk = 8,
                   kStatusFailed = 128;
constexpr uint64_t kFeatureVersion1 = 1ull << 32;
}  // namespace

const char* VirtioDeviceName(uint32_t id) {
  switch (id) {
    case kVirtioIdNet: return "net";
    case kVirtioIdBlock: return "block";
    case kVirtioIdRng: return "rng";
    case kVirtioIdVsock: return "vsock";
    default: return "other";
  }
}

uint32_t VirtioMmio::Read(uint32_t off) const { return MmioRead32(base_ + off); }
void VirtioMmio::Write(uint32_t off, uint32_t v) const { MmioWrite32(base_ + off, v); }

bool VirtioMmio::Probe(uint64_t base, uint32_t irq, const char** why) {
  base_ = base;
  irq_ = irq;
  if (base < 0x100000000ull - 0x40000000ull || base >= 0x100000000ull) {
    *why = "base outside the 3-4 GiB MMIO window the guest maps uncached";
    return false;
  }
  if (Read(kMagic) != 0x74726976) {
    *why = "bad magic";
    return false;
  }
  if (Read(kVersion) != 2) {
    *why = "not a modern (version 2) virtio-mmio device";
    return false;
  }
  device_id_ = Read(kDeviceId);
  if (device_id_ == 0) {
    *why = "empty transport";
    return false;
  }
  return true;
}

bool VirtioMmio::Negotiate(uint64_t wanted, const char** why) {
  Write(kStatus, 0);
  for (int i = 0; i < 1000 && Read(kStatus) != 0; ++i) Pause();
  Write(kStatus, kStatusAck);
  Write(kStatus, kStatusAck | kStatusDriver);
  Write(kDeviceFeaturesSel, 0);
  uint64_t offered = Read(kDeviceFeatures);
  Write(kDeviceFeaturesSel, 1);
  offered |= uint64_t(Read(kDeviceFeatures)) << 32;
  if ((offered & kFeatureVersion1) == 0) {
    Write(kStatus, kStatusFailed);
    *why = "device does not offer VIRTIO_F_VERSION_1";
    return false;
  }
  const uint64_t chosen = (wanted & offered) | kFeatureVersion1;
  Write(kDriverFeaturesSel, 0);
  Write(kDriverFeatures, uint32_t(chosen));
  Write(kDriverFeaturesSel, 1);
  Write(kDriverFeatures, uint32_t(chosen >> 32));
  Write(kStatus, kStatusAck | kStatusDriver | kStatusFeaturesOk);
  if ((Read(kStatus) & kStatusFeaturesOk) == 0) {
    Write(kStatus, kStatusFailed);
    *why = "device refused FEATURES_OK";
    return false;
  }
  features_ = chosen;
  return true;
}

bool VirtioMmio::SetupQueue(uint32_t index, Virtq* q, const char** why) {
  Write(kQueueSel, index);
  if (Read(kQueueReady) != 0) {
    *why = "queue already live";
    return false;
  }
  const uint32_t max = Read(kQueueNumMax);
  if (max == 0) {
    *why = "queue not available";
    return false;
  }
  uint16_t size = Virtq::kMax;
  while (size > max) size = uint16_t(size / 2);
  Zero(q, sizeof(*q));
  q->size = size;
  Write(kQueueNum, size);
  const uint64_t desc = reinterpret_cast<uint64_t>(q->desc);
  const uint64_t avail = reinterpret_cast<uint64_t>(&q->avail);
  const uint64_t used = reinterpret_cast<uint64_t>(&q->used);
  Write(kQueueDescLow, uint32_t(desc));
  Write(kQueueDescHigh, uint32_t(desc >> 32));
  Write(kQueueDriverLow, uint32_t(avail));
  Write(kQueueDriverHigh, uint32_t(avail >> 32));
  Write(kQueueDeviceLow, uint32_t(used));
  Write(kQueueDeviceHigh, uint32_t(used >> 32));
  Write(kQueueReady, 1);
  return true;
}

void VirtioMmio::DriverOk() {
  Write(kStatus, kStatusAck | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
}

void VirtioMmio::Notify(uint32_t queue) const { Write(kQueueNotify, queue); }

uint32_t VirtioMmio::AckInterrupt() const {
  const uint32_t s = Read(kInterruptStatus);
  if (s != 0) Write(kInterruptAck, s);
  return s;
}

uint32_t VirtioMmio::ConfigRead32(uint32_t offset) const { return Read(kConfig + offset); }

uint32_t VirtioMmio::ConfigGeneration() const { return Read(kConfigGeneration); }

uint64_t VirtioMmio::ConfigRead64(uint32_t offset) const {
  for (;;) {
    const uint32_t gen = Read(kConfigGeneration);
    const uint64_t v = uint64_t(ConfigRead32(offset)) | (uint64_t(ConfigRead32(offset + 4)) << 32);
    if (Read(kConfigGeneration) == gen) return v;
  }
}

}  // namespace kubicle::guest::testguest::arch
