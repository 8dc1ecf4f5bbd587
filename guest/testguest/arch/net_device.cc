// virtio-net driver of the test guest (see NetDevice in devices.h). No
// offloads and no MRG_RXBUF are asked for, so every frame arrives whole in
// one buffer behind a 12-byte virtio_net_hdr, and every frame sent is one
// readable descriptor: a zero header, then the frame. Descriptor k is
// always rx buffer k or tx slot k, so a used id maps straight back.
#include "guest/testguest/arch/devices.h"
#include "guest/testguest/freestanding.h"

namespace kubicle::guest::testguest::arch {

namespace {
constexpr uint32_t kRxQueue = 0, kTxQueue = 1;
constexpr uint64_t kFeatureMac = virtio::FeatureBit(virtio::kFeatureNetMac);
constexpr uint32_t kHeaderSize = 12;         // virtio_net_hdr with num_buffers (v1)
constexpr uint32_t kBufferSize = 2048;       // header + the largest frame answered
static_assert(kHeaderSize + kMaxFrameSize <= kBufferSize);
// A ping at a time is the load; 32 frames in flight leaves room for the
// host's IPv6 chatter on the TAP beside it.
constexpr uint32_t kBuffers = 32;
constexpr uint16_t kAvailNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT

// Initialised before use (SetupQueue zeroes the rings, buffers are written
// before they are read), so they live in .bss.large, which boot does not clear.
#define LARGE __attribute__((section(".bss.large")))
LARGE Virtq g_net_rxq, g_net_txq;
LARGE alignas(4096) uint8_t g_net_rx[kBuffers][kBufferSize];
LARGE alignas(4096) uint8_t g_net_tx[kBuffers][kBufferSize];
#undef LARGE

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }
}  // namespace

bool NetDevice::Init(const VirtioMmio& transport, const char** why) {
  transport_ = transport;
  if (!transport_.Negotiate(kFeatureMac, why)) return false;
  if ((transport_.features() & kFeatureMac) == 0) {
    *why = "the device offers no MAC (VIRTIO_NET_F_MAC)";
    return false;
  }
  if (!transport_.SetupQueue(kRxQueue, &g_net_rxq, why) ||
      !transport_.SetupQueue(kTxQueue, &g_net_txq, why)) {
    return false;
  }
  ReadMac();
  if (!IsUnicastMac(me_.mac)) {
    *why = "the device's MAC is multicast or zero";
    return false;
  }
  Copy(me_.ip, kGuestIpv4, 4);
  rx_buffers_ = Min<uint32_t>(g_net_rxq.size, kBuffers);
  tx_slots_ = Min<uint32_t>(g_net_txq.size, kBuffers);
  for (uint32_t k = 0; k < rx_buffers_; ++k) PostRx(k);
  tx_free_count_ = 0;
  for (uint32_t k = 0; k < tx_slots_; ++k) tx_free_[tx_free_count_++] = k;
  // Sent frames are reclaimed on every pass; their completions need no
  // interrupt.
  g_net_txq.avail.flags = kAvailNoInterrupt;
  transport_.DriverOk();
  transport_.Notify(kRxQueue);
  ready_ = true;
  return true;
}

// A consistent MAC (spec 4.2.2.2: re-read while ConfigGeneration moves). A
// device that hands over a multicast or zero MAC later is not followed: the
// guest keeps answering with the one it had.
// Two 32-bit reads rather than six byte reads: every config access is a VM
// exit, and this runs on the clone's way to answering.
void NetDevice::ReadMac() {
  uint8_t mac[6];
  uint32_t generation = 0;
  do {
    generation = transport_.ConfigGeneration();
    const uint32_t low = transport_.ConfigRead32(0);
    const uint32_t high = transport_.ConfigRead32(4);  // mac[4], mac[5], status
    for (uint32_t i = 0; i < 4; ++i) mac[i] = uint8_t(low >> (8 * i));
    mac[4] = uint8_t(high);
    mac[5] = uint8_t(high >> 8);
  } while (transport_.ConfigGeneration() != generation);
  generation_ = generation;
  if (IsUnicastMac(mac) || !ready_) Copy(me_.mac, mac, 6);
}

// The MAC is re-read in Poll, which runs after the agent's vsock work in
// the same pass: a clone answers its host before it looks at its NIC.
void NetDevice::AckInterrupt() {
  if (!ready_) return;
  if ((transport_.AckInterrupt() & virtio::kInterruptConfigChange) != 0) config_changed_ = true;
}

void NetDevice::RefreshMac() {
  if (transport_.ConfigGeneration() != generation_) ReadMac();
}

void NetDevice::PostRx(uint32_t k) {
  g_net_rxq.desc[k] = {Addr(g_net_rx[k]), kBufferSize, virtio::kDescFlagWrite, 0};
  g_net_rxq.Push(uint16_t(k));
}

void NetDevice::DrainTx() {
  uint32_t id = 0, len = 0;
  while (g_net_txq.PopUsed(&id, &len)) {
    if (id >= tx_slots_ || tx_free_count_ == tx_slots_) continue;  // never posted
    tx_free_[tx_free_count_++] = id;
  }
}

bool NetDevice::Poll() {
  if (!ready_) return false;
  DrainTx();
  bool received = false, sent = false;
  uint32_t id = 0, len = 0;
  // A snapshot or fork may catch the guest inside its poll loop, and the
  // clone then answers the first frames before it next looks at the
  // interrupt status: so the generation is checked before every batch,
  // and no reply carries a MAC the device has since replaced.
  if (config_changed_ ||
      __atomic_load_n(&g_net_rxq.used.idx, __ATOMIC_ACQUIRE) != g_net_rxq.last_used) {
    config_changed_ = false;
    RefreshMac();
  }
  while (g_net_rxq.PopUsed(&id, &len)) {
    received = true;
    if (id >= rx_buffers_) continue;  // not a buffer we posted: drop
    if (len > kHeaderSize && len <= kBufferSize && tx_free_count_ > 0) {
      const uint32_t k = tx_free_[tx_free_count_ - 1];
      const uint32_t n = AnswerFrame(me_, g_net_rx[id] + kHeaderSize, len - kHeaderSize,
                                     g_net_tx[k] + kHeaderSize, kBufferSize - kHeaderSize);
      if (n > 0) {
        --tx_free_count_;
        Zero(g_net_tx[k], kHeaderSize);  // no offloads: an all-zero header
        g_net_txq.desc[k] = {Addr(g_net_tx[k]), kHeaderSize + n, 0, 0};
        g_net_txq.Push(uint16_t(k));
        sent = true;
      }
    }
    PostRx(id);
  }
  if (received) transport_.Notify(kRxQueue);
  if (sent) transport_.Notify(kTxQueue);
  return received;
}

}  // namespace kubicle::guest::testguest::arch
