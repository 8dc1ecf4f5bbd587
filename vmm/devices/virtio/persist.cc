#include "vmm/devices/virtio/persist.h"

#include "snapshot/byte_io.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/net.h"
#include "vmm/devices/virtio/rng.h"
#include "vmm/devices/virtio/vsock.h"

namespace kubicle::vmm::devices::virtio {
namespace {

using snapshot::ByteReader;
using snapshot::ByteWriter;

// Every virtio device this build can restore. A new device adds its line.
constexpr PersistOps kDevices[] = {
    {Block::kPersistKind, "virtio-blk", &Block::CheckSaved, &Block::Restore},
    {Rng::kPersistKind, "virtio-rng", &Rng::CheckSaved, &Rng::Restore},
    {Vsock::kPersistKind, "virtio-vsock", &Vsock::CheckSaved, &Vsock::Restore},
    {Net::kPersistKind, "virtio-net", &Net::CheckSaved, &Net::Restore},
};

constexpr bool KindsAreUnique() {
  for (size_t i = 0; i < std::size(kDevices); ++i) {
    if (kDevices[i].kind == 0 || kDevices[i].kind == snapshot::kSerialDeviceKind) return false;
    for (size_t j = 0; j < i; ++j)
      if (kDevices[i].kind == kDevices[j].kind) return false;
  }
  return true;
}
static_assert(KindsAreUnique(), "persist kinds must be unique, and not 0 or the serial's 1");

void EncodeQueue(const QueueState& q, ByteWriter& w) {
  w.U16(q.size);
  w.Bool(q.ready);
  w.U64(q.desc_table);
  w.U64(q.avail_ring);
  w.U64(q.used_ring);
  w.U16(q.next_avail);
  w.U16(q.next_used);
  w.Bool(q.event_idx);
  w.U16(q.signalled_used);
  w.Bool(q.signalled_used_valid);
}

void DecodeQueue(ByteReader& r, QueueState* q) {
  r.U16(&q->size, "queue size");
  r.Bool(&q->ready, "queue ready");
  r.U64(&q->desc_table, "queue descriptor table");
  r.U64(&q->avail_ring, "queue avail ring");
  r.U64(&q->used_ring, "queue used ring");
  r.U16(&q->next_avail, "queue next_avail");
  r.U16(&q->next_used, "queue next_used");
  r.Bool(&q->event_idx, "queue event_idx");
  r.U16(&q->signalled_used, "queue signalled_used");
  r.Bool(&q->signalled_used_valid, "queue signalled_used_valid");
}

std::string RecordName(const snapshot::VirtioDeviceState& record) {
  const PersistOps* ops = FindPersistOps(record.kind);
  return (ops ? std::string(ops->name) : snapshot::DeviceKindName(record.kind)) + " in slot " +
         std::to_string(record.slot);
}

Result<const PersistOps*> OpsFor(const snapshot::VirtioDeviceState& record) {
  const PersistOps* ops = FindPersistOps(record.kind);
  if (ops == nullptr)
    return Status::FailedPrecondition("the snapshot has a device of kind " +
                                      std::to_string(record.kind) + " (slot " +
                                      std::to_string(record.slot) +
                                      ") that this build cannot restore");
  return ops;
}

}  // namespace

const PersistOps* FindPersistOps(uint32_t kind) {
  for (const PersistOps& ops : kDevices)
    if (ops.kind == kind) return &ops;
  return nullptr;
}

std::vector<uint8_t> EncodeRecord(const MmioTransportState& t,
                                  std::span<const uint8_t> device_state) {
  std::vector<uint8_t> out;
  ByteWriter w(out);
  w.U32(t.status);
  w.U32(t.device_features_sel);
  w.U32(t.driver_features_sel);
  w.U64(t.driver_features);
  w.U32(t.queue_sel);
  w.U32(t.interrupt_status);
  w.U32(t.config_generation);
  w.U32(static_cast<uint32_t>(t.queues.size()));
  for (const QueueState& q : t.queues) EncodeQueue(q, w);
  // Length-prefixed, so a device can grow its fields in a minor version.
  w.Bytes(device_state);
  return out;
}

Status DecodeRecord(std::span<const uint8_t> record, bool newer_minor, MmioTransportState* t,
                    std::vector<uint8_t>* device_state) {
  ByteReader r(record, "virtio device record");
  r.U32(&t->status, "transport status");
  r.U32(&t->device_features_sel, "transport device_features_sel");
  r.U32(&t->driver_features_sel, "transport driver_features_sel");
  r.U64(&t->driver_features, "transport driver_features");
  r.U32(&t->queue_sel, "transport queue_sel");
  r.U32(&t->interrupt_status, "transport interrupt_status");
  r.U32(&t->config_generation, "transport config_generation");
  uint32_t n = 0;
  if (r.Count(&n, kMaxSavedQueues, "virtqueue")) {
    t->queues.resize(n);
    for (QueueState& q : t->queues) DecodeQueue(r, &q);
  }
  // Longer than what is left is truncation (DataLoss), not a cap.
  r.Bytes(device_state, UINT32_MAX, "device-specific state");
  r.End(newer_minor);
  return r.status();
}

Result<snapshot::VirtioDeviceState> SaveDevice(const MmioTransport& transport, uint32_t slot) {
  const VirtioDevice& device = *transport.device();
  if (device.persist_kind() == 0)
    return Status::Unimplemented("no snapshot support for virtio device " +
                                 std::string(device.name()));
  ASSIGN_OR_RETURN(std::vector<uint8_t> own, device.SaveState());
  snapshot::VirtioDeviceState record;
  record.kind = device.persist_kind();
  record.slot = slot;
  record.state = EncodeRecord(transport.SaveState(), own);
  return record;
}

Status CheckDevice(const snapshot::VirtioDeviceState& record, bool newer_minor) {
  ASSIGN_OR_RETURN(const PersistOps* ops, OpsFor(record));
  MmioTransportState transport;
  std::vector<uint8_t> own;
  Status st = DecodeRecord(record.state, newer_minor, &transport, &own);
  if (st.ok()) st = ops->check(own, newer_minor);
  return st.WithContext(RecordName(record));
}

Result<RestoredDevice> RestoreDevice(const snapshot::VirtioDeviceState& record, bool newer_minor,
                                     const DeviceResources& host) {
  ASSIGN_OR_RETURN(const PersistOps* ops, OpsFor(record));
  RestoredDevice out;
  std::vector<uint8_t> own;
  RETURN_IF_ERROR(DecodeRecord(record.state, newer_minor, &out.transport, &own)
                      .WithContext(RecordName(record)));
  auto device = ops->restore(own, newer_minor, host);
  if (!device.ok()) return device.status().WithContext(RecordName(record));
  out.device = std::move(device).value();
  return out;
}

}  // namespace kubicle::vmm::devices::virtio
