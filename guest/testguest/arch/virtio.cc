#include "guest/testguest/arch/virtio.h"

#include "guest/testguest/arch/cpu.h"
#include "guest/testguest/freestanding.h"
#include "virtio/mmio.h"

namespace kubicle::guest::testguest::arch {

namespace {
namespace mmio = ::kubicle::virtio::mmio;
constexpr uint64_t kVersion1 = virtio::FeatureBit(virtio::kFeatureVersion1);
constexpr uint32_t kAckDriver = virtio::kStatusAcknowledge | virtio::kStatusDriver;
}  // namespace

const char* VirtioDeviceName(uint32_t id) {
  switch (id) {
    case virtio::kDeviceIdNet: return "net";
    case virtio::kDeviceIdBlock: return "block";
    case virtio::kDeviceIdRng: return "rng";
    case virtio::kDeviceIdVsock: return "vsock";
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
  if (Read(mmio::kMagicValue) != mmio::kMagic) {
    *why = "bad magic";
    return false;
  }
  if (Read(mmio::kVersion) != mmio::kVersionModern) {
    *why = "not a modern (version 2) virtio-mmio device";
    return false;
  }
  device_id_ = Read(mmio::kDeviceId);
  if (device_id_ == 0) {
    *why = "empty transport";
    return false;
  }
  return true;
}

bool VirtioMmio::Negotiate(uint64_t wanted, const char** why) {
  Write(mmio::kStatus, 0);
  for (int i = 0; i < 1000 && Read(mmio::kStatus) != 0; ++i) Pause();
  Write(mmio::kStatus, virtio::kStatusAcknowledge);
  Write(mmio::kStatus, kAckDriver);
  Write(mmio::kDeviceFeaturesSel, 0);
  uint64_t offered = Read(mmio::kDeviceFeatures);
  Write(mmio::kDeviceFeaturesSel, 1);
  offered |= uint64_t(Read(mmio::kDeviceFeatures)) << 32;
  if ((offered & kVersion1) == 0) {
    Write(mmio::kStatus, virtio::kStatusFailed);
    *why = "device does not offer VIRTIO_F_VERSION_1";
    return false;
  }
  const uint64_t chosen = (wanted & offered) | kVersion1;
  Write(mmio::kDriverFeaturesSel, 0);
  Write(mmio::kDriverFeatures, uint32_t(chosen));
  Write(mmio::kDriverFeaturesSel, 1);
  Write(mmio::kDriverFeatures, uint32_t(chosen >> 32));
  Write(mmio::kStatus, kAckDriver | virtio::kStatusFeaturesOk);
  if ((Read(mmio::kStatus) & virtio::kStatusFeaturesOk) == 0) {
    Write(mmio::kStatus, virtio::kStatusFailed);
    *why = "device refused FEATURES_OK";
    return false;
  }
  features_ = chosen;
  return true;
}

bool VirtioMmio::SetupQueue(uint32_t index, Virtq* q, const char** why) {
  Write(mmio::kQueueSel, index);
  if (Read(mmio::kQueueReady) != 0) {
    *why = "queue already live";
    return false;
  }
  const uint32_t max = Read(mmio::kQueueNumMax);
  if (max == 0) {
    *why = "queue not available";
    return false;
  }
  uint16_t size = Virtq::kMax;
  while (size > max) size = uint16_t(size / 2);
  Zero(q, sizeof(*q));
  q->size = size;
  Write(mmio::kQueueNum, size);
  const uint64_t desc = reinterpret_cast<uint64_t>(q->desc);
  const uint64_t avail = reinterpret_cast<uint64_t>(&q->avail);
  const uint64_t used = reinterpret_cast<uint64_t>(&q->used);
  Write(mmio::kQueueDescLow, uint32_t(desc));
  Write(mmio::kQueueDescHigh, uint32_t(desc >> 32));
  Write(mmio::kQueueDriverLow, uint32_t(avail));
  Write(mmio::kQueueDriverHigh, uint32_t(avail >> 32));
  Write(mmio::kQueueDeviceLow, uint32_t(used));
  Write(mmio::kQueueDeviceHigh, uint32_t(used >> 32));
  Write(mmio::kQueueReady, 1);
  return true;
}

void VirtioMmio::DriverOk() {
  Write(mmio::kStatus, kAckDriver | virtio::kStatusFeaturesOk | virtio::kStatusDriverOk);
}

void VirtioMmio::Notify(uint32_t queue) const { Write(mmio::kQueueNotify, queue); }

uint32_t VirtioMmio::AckInterrupt() const {
  const uint32_t s = Read(mmio::kInterruptStatus);
  if (s != 0) Write(mmio::kInterruptAck, s);
  return s;
}

uint32_t VirtioMmio::ConfigRead32(uint32_t offset) const { return Read(mmio::kConfig + offset); }

uint32_t VirtioMmio::ConfigGeneration() const { return Read(mmio::kConfigGeneration); }

uint64_t VirtioMmio::ConfigRead64(uint32_t offset) const {
  for (;;) {
    const uint32_t gen = Read(mmio::kConfigGeneration);
    const uint64_t v = uint64_t(ConfigRead32(offset)) | (uint64_t(ConfigRead32(offset + 4)) << 32);
    if (Read(mmio::kConfigGeneration) == gen) return v;
  }
}

}  // namespace kubicle::guest::testguest::arch
