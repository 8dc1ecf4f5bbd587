// The virtio-vsock wire format (spec 5.10.6): the 44-byte packet header that
// precedes every packet on the RX and TX queues, its ops and flags, and the
// event the event queue carries. kubicle-vmm's vsock device and muxer and the
// test guest's VsockEndpoint read and write packets in this layout.
// Little-endian, packed, as the guest sees it.
//
// FREESTANDING, like spec.h: only <stddef.h> and <stdint.h>.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace kubicle::virtio {

inline constexpr uint64_t kVsockHostCid = 2;  // VMADDR_CID_HOST

inline constexpr uint16_t kVsockTypeStream = 1;

enum VsockOp : uint16_t {
  kVsockOpInvalid = 0,
  kVsockOpRequest = 1,
  kVsockOpResponse = 2,
  kVsockOpRst = 3,
  kVsockOpShutdown = 4,
  kVsockOpRw = 5,
  kVsockOpCreditUpdate = 6,
  kVsockOpCreditRequest = 7,
};

// OP_SHUTDOWN flags, from the sender's point of view.
inline constexpr uint32_t kVsockShutdownRcv = 1;   // sender will receive no more
inline constexpr uint32_t kVsockShutdownSend = 2;  // sender will send no more
inline constexpr uint32_t kVsockShutdownBoth = 3;

inline constexpr uint32_t kVsockEventTransportReset = 0;

// struct virtio_vsock_hdr. Packed: fields may sit unaligned in a buffer, so
// copy the header out rather than binding references to its fields.
#pragma pack(push, 1)
struct VsockHeader {
  uint64_t src_cid;
  uint64_t dst_cid;
  uint32_t src_port;
  uint32_t dst_port;
  uint32_t len;
  uint16_t type;
  uint16_t op;
  uint32_t flags;
  uint32_t buf_alloc;
  uint32_t fwd_cnt;
};
#pragma pack(pop)
inline constexpr uint32_t kVsockHeaderSize = 44;
static_assert(sizeof(VsockHeader) == kVsockHeaderSize);
static_assert(offsetof(VsockHeader, len) == 24 && offsetof(VsockHeader, op) == 30 &&
              offsetof(VsockHeader, fwd_cnt) == 40);

}  // namespace kubicle::virtio
