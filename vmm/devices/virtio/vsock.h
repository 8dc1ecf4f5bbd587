// Vsock: virtio-vsock (spec 5.10) in user space, host side compatible with
// Firecracker's (see VsockMuxer for the Unix-socket protocol).
//
// Queues: 0 = RX (device -> guest), 1 = TX (guest -> device), 2 = event.
// Config space: guest_cid (le64). Features: VERSION_1, RING_EVENT_IDX.
//
// TX packets are validated before anything acts on them: a header shorter
// than 44 bytes, hdr.len different from the payload the descriptors carry,
// src_cid other than the guest's, dst_cid other than 2, or type != STREAM
// is dropped with a (rate-limited) log line; protocol violations on a live
// connection reset it. RX packets are produced only while the guest has
// buffers posted; when it runs out, work waits until it kicks the RX queue.
//
// Threading: SetGuestCid, SendTransportReset and connection_count may be
// called from any thread (they take the transport lock); everything else is
// called by the transport.
//
//   VsockConfig cfg{.guest_cid = 3, .uds_path = "/run/kubicle/vm1.vsock"};
//   ASSIGN_OR_RETURN(auto vsock, Vsock::Create(cfg));
//   Vsock* v = vsock.get();
//   ASSIGN_OR_RETURN(auto t, MmioTransport::Create(std::move(vsock), mem, irq, &loop));
//   ... after a restore or fork: v->SetGuestCid(new_cid); v->SendTransportReset();
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "vmm/devices/virtio/log_limiter.h"
#include "vmm/devices/virtio/virtio_device.h"
#include "vmm/devices/virtio/vsock_muxer.h"

namespace kubicle::vmm::devices::virtio {

struct DeviceResources;

// Persist: a snapshot keeps the CID the guest had (for the record); a
// restored vsock binds the new socket and takes the clone's CID from
// DeviceResources, and OnRestored tells the guest (transport reset).
class Vsock final : public VirtioDevice {
 public:
  static constexpr uint32_t kPersistKind = 4;
  static constexpr uint16_t kQueueSize = 256;
  static constexpr uint16_t kRxQueue = 0;
  static constexpr uint16_t kTxQueue = 1;
  static constexpr uint16_t kEventQueue = 2;

  // Binds config.uds_path (which must not exist) and validates the CID.
  static Result<std::unique_ptr<Vsock>> Create(const VsockConfig& config);

  // Changes the CID in config space (for clones) and bumps ConfigGeneration.
  // The guest driver only re-reads it on a transport reset event, so follow
  // with SendTransportReset(). InvalidArgument for CIDs 0-2 or >= 2^32 - 1.
  Status SetGuestCid(uint64_t cid);
  uint64_t guest_cid() const;
  // Drops every host connection and posts VIRTIO_VSOCK_EVENT_TRANSPORT_RESET
  // (now, or as soon as the guest has an event buffer). The guest then drops
  // its connections; listening sockets survive. No-op while inactive.
  void SendTransportReset();
  size_t connection_count() const;

  std::string_view name() const override { return "virtio-vsock"; }
  uint32_t device_id() const override;
  uint64_t device_features() const override;
  uint16_t num_queues() const override { return 3; }
  uint16_t queue_max_size(uint16_t) const override { return kQueueSize; }
  void ReadConfig(uint64_t offset, std::span<uint8_t> data) override;
  Status Activate() override;
  void ProcessQueue(uint16_t index) override;
  void Reset() override;
  int host_event_fd() const override { return muxer_->epoll_fd(); }
  void HandleHostEvent() override;

  uint32_t persist_kind() const override { return kPersistKind; }
  Result<std::vector<uint8_t>> SaveState() const override;
  void OnRestored() override;
  // The saved CID.
  static Result<uint64_t> DecodeState(std::span<const uint8_t> bytes, bool newer_minor);
  static Status CheckSaved(std::span<const uint8_t> bytes, bool newer_minor);
  static Result<std::unique_ptr<VirtioDevice>> Restore(std::span<const uint8_t> bytes,
                                                       bool newer_minor,
                                                       const DeviceResources& host);

 private:
  explicit Vsock(std::unique_ptr<VsockMuxer> muxer) : muxer_(std::move(muxer)) {}
  void ProcessTx();
  void ProcessRx();
  void ProcessEvents();
  void HandleTxChain(const DescriptorChain& chain);
  void LogDrop(const char* why, const VsockHeader& h);

  std::unique_ptr<VsockMuxer> muxer_;
  bool active_ = false;
  bool reset_event_pending_ = false;
  DescriptorChain chain_;  // reused
  LogLimiter log_limiter_;
};

}  // namespace kubicle::vmm::devices::virtio
