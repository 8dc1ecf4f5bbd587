// The virtio-blk layout (spec 5.2): its feature bits, request types, status
// bytes and the 16-byte request header that opens every request chain.
// kubicle-vmm's Block serves requests in this layout, the test guest's
// BlockDevice sends them.
//
// FREESTANDING, like spec.h: only <stdint.h>.
#pragma once

#include <stdint.h>

namespace kubicle::virtio {

// Feature bits (spec 5.2.3); only those the VMM offers.
inline constexpr unsigned kFeatureBlkSizeMax = 1;
inline constexpr unsigned kFeatureBlkSegMax = 2;
inline constexpr unsigned kFeatureBlkRo = 5;
inline constexpr unsigned kFeatureBlkFlush = 9;

// Request types (spec 5.2.6).
inline constexpr uint32_t kBlkTypeIn = 0;
inline constexpr uint32_t kBlkTypeOut = 1;
inline constexpr uint32_t kBlkTypeFlush = 4;
inline constexpr uint32_t kBlkTypeGetId = 8;

// The status byte the device writes last.
inline constexpr uint8_t kBlkStatusOk = 0;
inline constexpr uint8_t kBlkStatusIoErr = 1;
inline constexpr uint8_t kBlkStatusUnsupp = 2;

// The device-readable header of a request (type, reserved, sector).
struct BlkRequestHeader {
  uint32_t type;
  uint32_t reserved;
  uint64_t sector;
};
static_assert(sizeof(BlkRequestHeader) == 16);

}  // namespace kubicle::virtio
