#include "vmm/devices/virtio/vsock.h"

#include <unistd.h>

#include <cstring>

#include "common/log.h"
#include "snapshot/byte_io.h"
#include "vmm/devices/virtio/chain_io.h"
#include "vmm/devices/virtio/layout.h"
#include "vmm/devices/virtio/persist.h"
#include "vmm/devices/virtio/vsock_cid.h"

namespace kubicle::vmm::devices::virtio {

Result<std::unique_ptr<Vsock>> Vsock::Create(const VsockConfig& config) {
  if (!ValidCid(config.guest_cid))
    return Status::InvalidArgument("vsock guest CID must be in [3, 2^32-2]");
  ASSIGN_OR_RETURN(std::unique_ptr<VsockMuxer> muxer, VsockMuxer::Create(config));
  return std::unique_ptr<Vsock>(new Vsock(std::move(muxer)));
}

uint32_t Vsock::device_id() const { return kDeviceIdVsock; }

uint64_t Vsock::device_features() const {
  return FeatureBit(kFeatureVersion1) | FeatureBit(kFeatureRingEventIdx);
}

Status Vsock::SetGuestCid(uint64_t cid) {
  if (!ValidCid(cid)) return Status::InvalidArgument("vsock guest CID must be in [3, 2^32-2]");
  auto lock = LockTransport();
  muxer_->set_guest_cid(cid);
  if (context() != nullptr) context()->SignalConfigChange();
  return Status::Ok();
}

uint64_t Vsock::guest_cid() const {
  auto lock = LockTransport();
  return muxer_->guest_cid();
}

size_t Vsock::connection_count() const {
  auto lock = LockTransport();
  return muxer_->connection_count();
}

void Vsock::SendTransportReset() {
  auto lock = LockTransport();
  muxer_->DropAll();
  if (!active_) return;
  log::Info("vsock transport reset", {{"guest_cid", muxer_->guest_cid()}});
  reset_event_pending_ = true;
  ProcessEvents();
}

void Vsock::ReadConfig(uint64_t offset, std::span<uint8_t> data) {
  uint8_t config[8];
  const uint64_t cid = muxer_->guest_cid();
  std::memcpy(config, &cid, sizeof(cid));
  CopyConfig(config, offset, data);
}

Status Vsock::Activate() {
  RETURN_IF_ERROR(muxer_->Start());
  active_ = true;
  reset_event_pending_ = false;
  return Status::Ok();
}

void Vsock::Reset() {
  muxer_->Stop();
  active_ = false;
  reset_event_pending_ = false;
}

void Vsock::ProcessQueue(uint16_t index) {
  switch (index) {
    case kTxQueue:
      ProcessTx();
      ProcessRx();  // replies, credit updates and unblocked reads
      break;
    case kRxQueue: ProcessRx(); break;
    case kEventQueue: ProcessEvents(); break;
  }
}

void Vsock::HandleHostEvent() {
  muxer_->HandleEvents();
  if (active_) ProcessRx();
}

void Vsock::LogDrop(const char* why, const VsockHeader& h) {
  if (!log_limiter_.Allow()) return;
  log::Warn("vsock packet dropped", {{"why", why},
                                     {"op", h.op},
                                     {"src_cid", h.src_cid},
                                     {"dst_cid", h.dst_cid},
                                     {"type", h.type},
                                     {"len", h.len},
                                     {"suppressed", log_limiter_.TakeSuppressed()}});
}

void Vsock::ProcessTx() {
  // DrainQueue bounds the drain: a ring the device's own used entries keep
  // feeding breaks instead of holding the transport's lock for ever.
  DrainQueue(kTxQueue, &chain_, [this](const DescriptorChain& chain) {
    HandleTxChain(chain);
    return uint32_t{0};
  });
}

void Vsock::HandleTxChain(const DescriptorChain& chain) {
  ChainReader reader(chain);
  auto h = reader.ReadObj<VsockHeader>();
  if (!h.ok()) return LogDrop("header shorter than 44 bytes", VsockHeader{});
  if (h->len != reader.remaining()) return LogDrop("len does not match the descriptors", *h);
  if (h->src_cid != muxer_->guest_cid()) return LogDrop("wrong source CID", *h);
  if (h->dst_cid != kVsockHostCid) return LogDrop("destination is not the host", *h);
  if (h->type != kVsockTypeStream) return LogDrop("type is not STREAM", *h);
  muxer_->HandleGuestPacket(*h, reader);
}

void Vsock::ProcessRx() {
  if (!active_) return;
  Queue& q = context()->queue(kRxQueue);
  const GuestMemory& mem = context()->memory();
  // Buffers too small to use are handed back at once, so only this bound
  // stops a ring that the device's used entries keep refilling.
  const uint32_t pop_bound = kDrainRingsBound * uint32_t{q.state().size};
  uint32_t pops = 0;
  bool any = false;
  while (muxer_->HasRxWork()) {
    auto popped = q.Pop(mem, &chain_);
    if (!popped.ok() || !*popped) break;  // no buffers: wait for the guest's RX kick
    if (++pops > pop_bound) {
      q.UndoPop();  // not taken, so every chain taken is answered once
      (void)q.Break(Status::ResourceExhausted("rx buffers keep coming: the ring feeds itself"));
      break;
    }
    uint32_t used = 0;
    if (chain_.writable_len < sizeof(VsockHeader)) {
      if (log_limiter_.Allow())
        log::Warn("vsock RX buffer too small; returned unused", {{"len", chain_.writable_len}});
    } else if (!muxer_->FillRx(chain_, &used)) {
      q.UndoPop();
      break;
    }
    if (!q.AddUsed(mem, chain_.head, used).ok()) break;
    any = true;
  }
  if (any) context()->SignalUsed(kRxQueue);
}

void Vsock::ProcessEvents() {
  if (!active_ || !reset_event_pending_) return;
  Queue& q = context()->queue(kEventQueue);
  const GuestMemory& mem = context()->memory();
  while (reset_event_pending_) {
    auto popped = q.Pop(mem, &chain_);
    if (!popped.ok() || !*popped) break;  // sent when the guest adds an event buffer
    uint32_t used = 0;
    if (ChainWriter(chain_).WriteObj(kVsockEventTransportReset).ok()) {
      used = sizeof(uint32_t);
      reset_event_pending_ = false;
    }
    if (!q.AddUsed(mem, chain_.head, used).ok()) break;
    context()->SignalUsed(kEventQueue);
  }
}

// ---- persist ----

Result<std::vector<uint8_t>> Vsock::SaveState() const {
  std::vector<uint8_t> out;
  snapshot::ByteWriter(out).U64(guest_cid());
  return out;
}

Result<uint64_t> Vsock::DecodeState(std::span<const uint8_t> bytes, bool newer_minor) {
  snapshot::ByteReader r(bytes, "virtio-vsock state");
  uint64_t cid = 0;
  r.U64(&cid, "vsock guest_cid");
  r.End(newer_minor);
  if (!r.ok()) return r.status();
  return cid;
}

Status Vsock::CheckSaved(std::span<const uint8_t> bytes, bool newer_minor) {
  return DecodeState(bytes, newer_minor).status();
}

Result<std::unique_ptr<VirtioDevice>> Vsock::Restore(std::span<const uint8_t> bytes,
                                                     bool newer_minor,
                                                     const DeviceResources& host) {
  RETURN_IF_ERROR(CheckSaved(bytes, newer_minor));
  if (host.vsock_uds.empty())
    return Status::InvalidArgument("the snapshot has a vsock device: --vsock-uds is required");
  VsockConfig config;
  // A clone never keeps its template's CID: it gets the one given now.
  config.guest_cid = host.guest_cid;
  config.uds_path = host.vsock_uds;
  ::unlink(config.uds_path.c_str());  // a stale socket from an earlier run, as at boot
  ASSIGN_OR_RETURN(std::unique_ptr<Vsock> vsock, Create(config));
  return std::unique_ptr<VirtioDevice>(std::move(vsock));
}

void Vsock::OnRestored() {
  // The restored transport carries the template's config generation: bump
  // it with the (new) CID, and reset the transport, which is when the guest
  // driver drops its old connections and re-reads the CID.
  (void)SetGuestCid(guest_cid());
  SendTransportReset();
}

}  // namespace kubicle::vmm::devices::virtio
