// Which vsock context ids a guest may have: the one rule, shared by the vsock
// device, the command line and the control protocol (vmm/control_protocol.h).
// 0 (hypervisor), 1 (local) and 2 (host) are reserved; 2^32-1 is
// VMADDR_CID_ANY. Header-only, so layers that do not link the device (the
// node runtime's control client) use the same rule.
#pragma once

#include <cstdint>

namespace kubicle::vmm::devices::virtio {

inline constexpr uint64_t kMinGuestCid = 3;
inline constexpr uint64_t kMaxGuestCid = 0xfffffffeull;

constexpr bool ValidCid(uint64_t cid) { return cid >= kMinGuestCid && cid <= kMaxGuestCid; }

}  // namespace kubicle::vmm::devices::virtio
