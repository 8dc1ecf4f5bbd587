// Rng: virtio-rng (spec 5.4). Fills each device-writable buffer the guest
// offers with bytes from getrandom(2), capped per request so one huge chain
// cannot keep the device thread busy. One request queue, no config space.
//
// Construct, hand to MmioTransport::Create (no event loop needed):
//   auto t = MmioTransport::Create(std::make_unique<Rng>(), mem, irq);
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "vmm/devices/virtio/virtio_device.h"

namespace kubicle::vmm::devices::virtio {

struct DeviceResources;

// Persist: virtio-rng has no state of its own (its record holds only the
// transport's).
class Rng final : public VirtioDevice {
 public:
  static constexpr uint16_t kQueueSize = 256;
  static constexpr uint32_t kDefaultMaxBytesPerRequest = 64 * 1024;
  static constexpr uint32_t kPersistKind = 3;

  explicit Rng(uint32_t max_bytes_per_request = kDefaultMaxBytesPerRequest)
      : max_bytes_(max_bytes_per_request) {}

  std::string_view name() const override { return "virtio-rng"; }
  uint32_t device_id() const override;
  uint64_t device_features() const override;
  uint16_t num_queues() const override { return 1; }
  uint16_t queue_max_size(uint16_t) const override { return kQueueSize; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override {
    CopyConfig({}, offset, data);
  }
  Status Activate() override { return Status::Ok(); }
  void ProcessQueue(uint16_t index) override;
  void Reset() override {}

  uint32_t persist_kind() const override { return kPersistKind; }
  static Status CheckSaved(std::span<const uint8_t> bytes, bool newer_minor);
  static Result<std::unique_ptr<VirtioDevice>> Restore(std::span<const uint8_t> bytes,
                                                       bool newer_minor,
                                                       const DeviceResources& host);

 private:
  // Fills up to max_bytes_ of the chain's writable part; returns bytes written.
  uint32_t Fill(const DescriptorChain& chain);

  uint32_t max_bytes_;
  DescriptorChain chain_;  // reused between requests
};

}  // namespace kubicle::vmm::devices::virtio
