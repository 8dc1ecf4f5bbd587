// Persist: how virtio devices save and restore their own state (the idea of
// Firecracker's persist.rs). Each device has a plain state struct in its own
// header, saves it as bytes it encodes itself (VirtioDevice::SaveState), and
// comes back through its line in persist.cc's table: a check of saved bytes
// and a restore that rebuilds the device from them plus the host resources
// the VM passes in (sockets, disks, the clone's identity: never saved).
//
// So a new device is a change in this folder only — its state struct and
// codec, SaveState, a restore, a persist kind and its line in the table —
// plus, if it needs a host resource no device needed before, a field of
// DeviceResources that the VM fills (vmm/vm_snapshot.cc).
//
// The record of one virtio-mmio device in a snapshot (snapshot::
// VirtioDeviceState::state; docs/snapshot-format.md, 2.4.5): the transport's
// state, then u32 length + the device's own bytes. Decoding never trusts:
// counts are capped, every read is bounds-checked, bytes left over are
// DataLoss unless the snapshot is from a newer minor version.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "snapshot/state.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/devices/virtio/net_backend.h"
#include "vmm/devices/virtio/rate_limiter.h"
#include "vmm/devices/virtio/virtio_device.h"

namespace kubicle::vmm::devices::virtio {

struct BlockState;

// Host resources restored devices are built on. The VM fills in what it has;
// a device whose resource is missing refuses with a clear error.
struct DeviceResources {
  // vsock: the Unix socket to bind (empty: none was given) and the clone's CID.
  std::string vsock_uds;
  uint64_t guest_cid = 0;
  // block: opens the backend a saved disk was on (its read-only image, or
  // its frozen chain under a new private overlay).
  std::function<Result<std::unique_ptr<BlockBackend>>(const BlockState&)> open_disk;
  // net: opens this VM's backend (its TAP; empty: no --net was given) and the
  // clone's MAC and limits (unset: the saved ones).
  std::function<Result<std::unique_ptr<NetBackend>>()> open_net;
  std::optional<std::array<uint8_t, 6>> net_mac;
  std::optional<RateLimit> net_rx, net_tx;
};

// One restorable device kind: a line of persist.cc's table.
struct PersistOps {
  uint32_t kind;
  std::string_view name;
  // Decodes saved bytes and drops the result, so a restore can refuse a bad
  // snapshot before it builds anything.
  Status (*check)(std::span<const uint8_t> state, bool newer_minor);
  // The device rebuilt from its saved bytes over new host resources.
  Result<std::unique_ptr<VirtioDevice>> (*restore)(std::span<const uint8_t> state, bool newer_minor,
                                                   const DeviceResources& host);
};
// The entry for kind, or null when this build has no such device.
const PersistOps* FindPersistOps(uint32_t kind);

// The record of the device behind transport, in virtio-mmio slot `slot`.
// Unimplemented for a device that cannot be snapshotted.
Result<snapshot::VirtioDeviceState> SaveDevice(const MmioTransport& transport, uint32_t slot);
// Checks a record whole (kind known, transport state, device bytes) without
// building anything.
Status CheckDevice(const snapshot::VirtioDeviceState& record, bool newer_minor);

struct RestoredDevice {
  std::unique_ptr<VirtioDevice> device;
  MmioTransportState transport;  // for MmioTransport::RestoreState
};
Result<RestoredDevice> RestoreDevice(const snapshot::VirtioDeviceState& record, bool newer_minor,
                                     const DeviceResources& host);

// The record codec (exposed for tests).
inline constexpr size_t kMaxSavedQueues = 64;
std::vector<uint8_t> EncodeRecord(const MmioTransportState& transport,
                                  std::span<const uint8_t> device_state);
Status DecodeRecord(std::span<const uint8_t> record, bool newer_minor,
                    MmioTransportState* transport, std::vector<uint8_t>* device_state);

}  // namespace kubicle::vmm::devices::virtio
