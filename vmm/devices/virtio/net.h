// Net: virtio-net (spec 5.1) over a NetBackend (a TAP in kubicle-vmm, an
// in-memory fake in tests). One rx/tx queue pair, no control queue.
//
// Queues: 0 = receiveq (host -> guest), 1 = transmitq (guest -> host).
// Config space: mac[6], status (le16, LINK_UP). Features: VERSION_1,
// RING_EVENT_IDX, NET_F_MAC, NET_F_STATUS; no checksum or segmentation
// offloads and no MRG_RXBUF, so every frame is whole, checksummed by the
// guest, and carried by one chain after a 12-byte virtio_net_hdr that is
// all zero except num_buffers = 1 (docs/virtio.md, "Net").
//
// Guest chains are checked before anything is done with them: a tx chain
// whose readable part is shorter than the header, empty past it, or longer
// than kMaxFrameBytes past it is dropped and counted; an rx buffer shorter
// than the header is returned unused; a frame larger than the guest's rx
// buffer is dropped and the buffer kept. Frames from the backend over
// kMaxFrameBytes are dropped.
//
// Rate limits (RateLimiter, per direction, bytes and packets per second):
// a frame that would exceed them waits (tx: its chain stays on the ring;
// rx: it is held, and the TAP is not read meanwhile) until a timerfd fires
// when the tokens are back. No busy loop: the device's epoll fd watches the
// TAP only while it has room for a frame.
//
// Threading: SetMac, mac and stats may be called from any thread (they
// take the transport lock); everything else is called by the transport.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "vmm/devices/virtio/log_limiter.h"
#include "vmm/devices/virtio/mac_address.h"
#include "vmm/devices/virtio/net_backend.h"
#include "vmm/devices/virtio/rate_limiter.h"
#include "vmm/devices/virtio/virtio_device.h"

namespace kubicle::vmm::devices::virtio {

struct DeviceResources;

struct NetConfig {
  MacAddress mac{};
  RateLimit rx;
  RateLimit tx;
  // Monotonic time for the rate limiters; empty: CLOCK_MONOTONIC. Tests
  // inject one (the limiter's timer still runs on the real clock).
  std::function<Nanos()> clock;
};

// Counters, for tests and logs. A frame dropped is counted once.
struct NetStats {
  uint64_t tx_frames = 0, tx_bytes = 0, tx_dropped = 0;
  uint64_t rx_frames = 0, rx_bytes = 0, rx_dropped = 0;
  uint64_t oversize = 0;     // of the dropped frames, those over kMaxFrameBytes
  uint64_t bad_chains = 0;   // tx chains too short, rx buffers too small
};

// Persist: the MAC and the limits are saved; the backend is a host resource
// (DeviceResources::open_net), and a restore may be given a new MAC, which
// OnRestored announces with a config change (the guest re-reads status).
class Net final : public VirtioDevice {
 public:
  static constexpr uint32_t kPersistKind = 5;
  static constexpr uint16_t kQueueSize = 256;
  static constexpr uint16_t kRxQueue = 0;
  static constexpr uint16_t kTxQueue = 1;
  static constexpr uint32_t kHeaderSize = 12;  // virtio_net_hdr with num_buffers
  // The largest Ethernet frame taken either way (Firecracker's bound).
  static constexpr uint32_t kMaxFrameBytes = 65562;
  // Frames moved per direction in one call, so a flood cannot hold the
  // lock; the rest follow at the next loop turn (rx: the TAP is still
  // readable; tx: a timer of 1 ns).
  static constexpr uint32_t kBatch = 64;

  static Result<std::unique_ptr<Net>> Create(std::unique_ptr<NetBackend> backend,
                                             const NetConfig& config);

  // Changes the MAC in config space (for clones): bumps ConfigGeneration and,
  // while the driver is up, raises the config-change interrupt. The MAC
  // must be valid (unicast, non-zero).
  Status SetMac(const MacAddress& mac);
  MacAddress mac() const;
  NetStats stats() const;
  bool timer_armed() const;

  std::string_view name() const override { return "virtio-net"; }
  uint32_t device_id() const override;
  uint64_t device_features() const override;
  uint16_t num_queues() const override { return 2; }
  uint16_t queue_max_size(uint16_t) const override { return kQueueSize; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  Status Activate() override;
  void ProcessQueue(uint16_t index) override;
  void Reset() override;
  int host_event_fd() const override { return epoll_.get(); }
  void HandleHostEvent() override;

  uint32_t persist_kind() const override { return kPersistKind; }
  Result<std::vector<uint8_t>> SaveState() const override;
  void OnRestored() override;
  struct SavedState {
    MacAddress mac{};
    RateLimit rx, tx;
  };
  static Result<SavedState> DecodeState(std::span<const uint8_t> bytes, bool newer_minor);
  static Status CheckSaved(std::span<const uint8_t> bytes, bool newer_minor);
  static Result<std::unique_ptr<VirtioDevice>> Restore(std::span<const uint8_t> bytes,
                                                       bool newer_minor,
                                                       const DeviceResources& host);

 private:
  Net(std::unique_ptr<NetBackend> backend, const NetConfig& config, UniqueFd epoll,
      UniqueFd timer);
  Nanos Now() const;
  void ProcessTx();
  void ProcessRx();
  void SendChain(const DescriptorChain& chain, uint32_t frame_len);
  bool FetchRxFrame();
  void WatchBackend();
  void ArmTimer(Nanos wait);
  void LogDrop(const char* why, uint64_t len);

  std::unique_ptr<NetBackend> backend_;
  NetConfig config_;
  UniqueFd epoll_;
  UniqueFd timer_;
  RateLimiter rx_limit_;
  RateLimiter tx_limit_;
  bool active_ = false;
  bool watching_ = false;
  bool timer_armed_ = false;
  // One frame read from the backend and not yet delivered (no rx buffer or
  // no tokens yet); while it waits the backend is not read.
  std::vector<uint8_t> rx_buf_;
  uint32_t rx_len_ = 0;
  bool rx_pending_ = false;
  NetStats stats_;
  DescriptorChain chain_;  // reused
  std::vector<iovec> iov_;  // reused
  LogLimiter log_limiter_;
};

}  // namespace kubicle::vmm::devices::virtio
