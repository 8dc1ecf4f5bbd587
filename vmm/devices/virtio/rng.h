// Rng: virtio-rng (spec 5.4). Fills each device-writable buffer the guest
// offers with bytes from getrandom(2), capped per request so one huge chain
// cannot keep the device thread busy. One request queue, no config space.
//
// Construct, hand to MmioTransport::Create (no event loop needed):
//   auto t = MmioTransport::Create(std::make_unique<Rng>(), mem, irq);
#pragma once

#include <cstdint>

#include "vmm/devices/virtio/virtio_device.h"

namespace kubicle::vmm::devices::virtio {

class Rng final : public VirtioDevice {
 public:
  static constexpr uint16_t kQueueSize = 256;
  static constexpr uint32_t kDefaultMaxBytesPerRequest = 64 * 1024;

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

 private:
  // Fills up to max_bytes_ of the chain's writable part; returns bytes written.
  uint32_t Fill(const DescriptorChain& chain);

  uint32_t max_bytes_;
  DescriptorChain chain_;  // reused between requests
};

}  // namespace kubicle::vmm::devices::virtio
