// virtio-vsock driver: RX buffers are (44-byte header, 4 KiB data) descriptor
// pairs, TX packets are a header descriptor plus an optional data descriptor
// (the layout Linux 6.1 uses, which every vsock device accepts); the event
// queue holds 4-byte event buffers. Descriptor 2k/2k+1 always belong to
// buffer or slot k, so a used id maps straight back to its buffer.
#include "guest/testguest/arch/devices.h"
#include "guest/testguest/freestanding.h"
#include "guest/protocol/wire.h"

namespace kubicle::guest::testguest::arch {

namespace {
constexpr uint32_t kRxQueue = 0, kTxQueue = 1, kEventQueue = 2;
constexpr uint32_t kPairs = Virtq::kMax / 2;
constexpr uint32_t kDataSize = VsockEndpoint::kMaxPacketData;

// Everything here is initialised before use (SetupQueue zeroes the rings),
// so it lives in .bss.large, which boot does not clear.
#define LARGE __attribute__((section(".bss.large")))
LARGE Virtq g_rxq, g_txq, g_evq;
LARGE alignas(64) uint8_t g_rx_hdr[kPairs][64];
LARGE alignas(64) uint8_t g_tx_hdr[kPairs][64];
LARGE alignas(4) uint8_t g_events[Virtq::kMax][4];
LARGE alignas(4096) uint8_t g_rx_data[kPairs][kDataSize];
LARGE alignas(4096) uint8_t g_tx_data[kPairs][kDataSize];
#undef LARGE

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }
constexpr uint16_t kAvailNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT
}  // namespace

bool VsockDevice::Init(const VirtioMmio& transport, VsockEndpoint* endpoint, Agent* agent,
                       const char** why) {
  transport_ = transport;
  endpoint_ = endpoint;
  agent_ = agent;
  if (!transport_.Negotiate(0, why)) return false;  // stream sockets only, no SEQPACKET
  if (!transport_.SetupQueue(kRxQueue, &g_rxq, why) || !transport_.SetupQueue(kTxQueue, &g_txq, why) ||
      !transport_.SetupQueue(kEventQueue, &g_evq, why)) {
    return false;
  }
  cid_ = transport_.ConfigRead64(0);
  rx_buffers_ = g_rxq.size / 2;
  tx_slots_ = g_txq.size / 2;
  event_buffers_ = g_evq.size;
  for (uint32_t i = 0; i < rx_buffers_; ++i) PostRx(i);
  for (uint32_t i = 0; i < event_buffers_; ++i) PostEvent(i);
  tx_free_count_ = 0;
  for (uint32_t i = 0; i < tx_slots_; ++i) tx_free_[tx_free_count_++] = tx_slots_ - 1 - i;
  transport_.DriverOk();
  transport_.Notify(kRxQueue);
  transport_.Notify(kEventQueue);
  ready_ = true;
  return true;
}

void VsockDevice::PostRx(uint32_t k) {
  g_rxq.desc[2 * k] = {Addr(g_rx_hdr[k]), virtio::kVsockHeaderSize,
                       virtio::kDescFlagWrite | virtio::kDescFlagNext, uint16_t(2 * k + 1)};
  g_rxq.desc[2 * k + 1] = {Addr(g_rx_data[k]), kDataSize, virtio::kDescFlagWrite, 0};
  g_rxq.Push(uint16_t(2 * k));
}

void VsockDevice::PostEvent(uint32_t k) {
  g_evq.desc[k] = {Addr(g_events[k]), 4, virtio::kDescFlagWrite, 0};
  g_evq.Push(uint16_t(k));
}

bool VsockDevice::DrainRx() {
  bool any = false;
  uint32_t id = 0, len = 0;
  while (g_rxq.PopUsed(&id, &len)) {
    any = true;
    if (id % 2 != 0 || id / 2 >= rx_buffers_) continue;  // not a head we posted: drop
    const uint32_t k = id / 2;
    if (len >= virtio::kVsockHeaderSize) {
      const uint32_t data = Min(len - virtio::kVsockHeaderSize, kDataSize);
      endpoint_->OnPacket(g_rx_hdr[k], g_rx_data[k], data);
    }
    PostRx(k);
  }
  if (any) transport_.Notify(kRxQueue);
  return any;
}

bool VsockDevice::DrainEvents() {
  bool any = false;
  uint32_t id = 0, len = 0;
  while (g_evq.PopUsed(&id, &len)) {
    any = true;
    if (id >= event_buffers_) continue;
    if (len >= 4 && protocol::LoadLe32(g_events[id]) == virtio::kVsockEventTransportReset) {
      // Snapshot restore or fork: drop every connection (keep listening)
      // and pick up the clone's new CID.
      endpoint_->OnTransportReset();
      cid_ = transport_.ConfigRead64(0);
      endpoint_->SetCid(cid_);
      agent_->SetCid(cid_);
    }
    PostEvent(id);
  }
  if (any) transport_.Notify(kEventQueue);
  return any;
}

bool VsockDevice::DrainTx() {
  bool any = false;
  uint32_t id = 0, len = 0;
  while (g_txq.PopUsed(&id, &len)) {
    any = true;
    if (id % 2 != 0 || id / 2 >= tx_slots_ || tx_free_count_ == tx_slots_) continue;
    tx_free_[tx_free_count_++] = id / 2;
  }
  return any;
}

bool VsockDevice::Send(const virtio::VsockHeader& hdr, const uint8_t* data, uint32_t len) {
  if (tx_free_count_ == 0 || len > kDataSize) return false;
  const uint32_t k = tx_free_[--tx_free_count_];
  EncodeVsockHdr(hdr, g_tx_hdr[k]);
  if (len > 0) {
    Copy(g_tx_data[k], data, len);
    g_txq.desc[2 * k] = {Addr(g_tx_hdr[k]), virtio::kVsockHeaderSize, virtio::kDescFlagNext,
                         uint16_t(2 * k + 1)};
    g_txq.desc[2 * k + 1] = {Addr(g_tx_data[k]), len, 0, 0};
  } else {
    g_txq.desc[2 * k] = {Addr(g_tx_hdr[k]), virtio::kVsockHeaderSize, 0, 0};
  }
  g_txq.Push(uint16_t(2 * k));
  tx_notify_ = true;
  return true;
}

bool VsockDevice::Poll() {
  if (!ready_) return false;
  bool any = DrainEvents();
  any |= DrainRx();
  DrainTx();  // reclaiming TX slots is not work that needs another pass
  any |= endpoint_->Pump(this);
  if (tx_notify_) {
    tx_notify_ = false;
    transport_.Notify(kTxQueue);
  }
  // TX completions need no interrupt while slots are free: they are
  // reclaimed on every pass. Only a guest blocked on a full TX ring asks to
  // be woken (then re-checks, so a completion racing with the switch is seen).
  if (tx_free_count_ > 0) {
    g_txq.avail.flags = kAvailNoInterrupt;
  } else {
    __atomic_store_n(&g_txq.avail.flags, uint16_t{0}, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (DrainTx()) any = true;
  }
  return any;
}

}  // namespace kubicle::guest::testguest::arch
