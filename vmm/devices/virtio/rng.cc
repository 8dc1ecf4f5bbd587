#include "vmm/devices/virtio/rng.h"

#include <sys/random.h>

#include <cerrno>
#include <vector>

#include "common/log.h"
#include "snapshot/byte_io.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"

namespace kubicle::vmm::devices::virtio {

uint32_t Rng::device_id() const { return kDeviceIdRng; }

uint64_t Rng::device_features() const {
  return FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx);
}

void Rng::ProcessQueue(uint16_t index) {
  DrainQueue(index, &chain_, [this](const DescriptorChain& chain) { return Fill(chain); });
}

uint32_t Rng::Fill(const DescriptorChain& chain) {
  std::vector<iovec> iov;
  ChainWriter w(chain);
  w.Iovecs(max_bytes_, &iov);
  uint32_t filled = 0;
  for (const iovec& v : iov) {
    auto* p = static_cast<uint8_t*>(v.iov_base);
    size_t left = v.iov_len;
    while (left > 0) {
      ssize_t r = ::getrandom(p, left, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        log::Error("virtio-rng getrandom failed", {{"errno", errno}});
        return filled;  // the guest gets what we have: never fake entropy
      }
      p += r;
      left -= static_cast<size_t>(r);
      filled += static_cast<uint32_t>(r);
    }
  }
  return filled;
}

// ---- persist ----

Status Rng::CheckSaved(std::span<const uint8_t> bytes, bool newer_minor) {
  snapshot::ByteReader r(bytes, "virtio-rng state");
  r.End(newer_minor);
  return r.status();
}

Result<std::unique_ptr<VirtioDevice>> Rng::Restore(std::span<const uint8_t> bytes, bool newer_minor,
                                                   const DeviceResources&) {
  RETURN_IF_ERROR(CheckSaved(bytes, newer_minor));
  return std::unique_ptr<VirtioDevice>(std::make_unique<Rng>());
}

}  // namespace kubicle::vmm::devices::virtio
