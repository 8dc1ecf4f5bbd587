#include "snapshot/state_sections.h"

#include <cstring>

namespace kubicle::snapshot::internal {
namespace {

using vmm::devices::legacy::Serial;
using vmm::devices::legacy::SerialState;
using vmm::devices::virtio::MmioTransportState;
using vmm::devices::virtio::QueueState;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "state files are little-endian");
// The kernel ABI structs stored verbatim (x86-64 uapi layouts).
static_assert(sizeof(kvm_regs) == 144 && sizeof(kvm_sregs) == 312 && sizeof(kvm_fpu) == 416);
static_assert(sizeof(kvm_lapic_state) == 1024 && sizeof(kvm_vcpu_events) == 64);
static_assert(sizeof(kvm_xcrs) == 392 && sizeof(kvm_debugregs) == 128);
static_assert(sizeof(kvm_irqchip) == 520 && sizeof(kvm_pit_state2) == 112);
static_assert(sizeof(kvm_clock_data) == 48 && sizeof(kvm_cpuid_entry2) == 40);
static_assert(sizeof(kvm_msr_entry) == 16 && sizeof(kvm_mp_state) == 4);

// An array of kernel structs: u32 count, u32 element size, elements.
template <typename T>
void EncodeArray(const std::vector<T>& v, ByteWriter& w) {
  w.U32(static_cast<uint32_t>(v.size()));
  w.U32(sizeof(T));
  w.Raw(v.data(), v.size() * sizeof(T));
}

template <typename T>
void DecodeArray(ByteReader& r, size_t max, const char* what, std::vector<T>* v) {
  uint32_t n = 0, size = 0;
  if (!r.Count(&n, max, what) || !r.U32(&size, what)) return;
  if (size != sizeof(T)) {
    r.Fail(StatusCode::kDataLoss, std::string(what) + " entries are " + std::to_string(size) +
                                      " bytes, expected " + std::to_string(sizeof(T)));
    return;
  }
  if (static_cast<uint64_t>(n) * size > r.remaining()) {
    r.Raw(nullptr, static_cast<size_t>(n) * size, what);  // reports truncation
    return;
  }
  v->resize(n);
  r.Raw(v->data(), n * sizeof(T), what);
}

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

void EncodeTransport(const MmioTransportState& t, ByteWriter& w) {
  w.U32(t.status);
  w.U32(t.device_features_sel);
  w.U32(t.driver_features_sel);
  w.U64(t.driver_features);
  w.U32(t.queue_sel);
  w.U32(t.interrupt_status);
  w.U32(t.config_generation);
  w.U32(static_cast<uint32_t>(t.queues.size()));
  for (const QueueState& q : t.queues) EncodeQueue(q, w);
}

void DecodeTransport(ByteReader& r, const DecodeLimits& l, MmioTransportState* t) {
  r.U32(&t->status, "transport status");
  r.U32(&t->device_features_sel, "transport device_features_sel");
  r.U32(&t->driver_features_sel, "transport driver_features_sel");
  r.U64(&t->driver_features, "transport driver_features");
  r.U32(&t->queue_sel, "transport queue_sel");
  r.U32(&t->interrupt_status, "transport interrupt_status");
  r.U32(&t->config_generation, "transport config_generation");
  uint32_t n = 0;
  if (!r.Count(&n, l.max_queues, "virtqueue")) return;
  t->queues.resize(n);
  for (QueueState& q : t->queues) DecodeQueue(r, &q);
}

void EncodeBlock(const BlockDeviceState& b, ByteWriter& w) {
  w.Bool(b.read_only);
  w.String(b.serial);
  w.String(b.chain.base_path);
  w.U64(b.chain.size);
  w.U32(static_cast<uint32_t>(b.chain.layers.size()));
  for (const LayerRef& layer : b.chain.layers) {
    w.String(layer.path);
    w.Raw(layer.id.data(), layer.id.size());
  }
}

void DecodeBlock(ByteReader& r, const DecodeLimits& l, BlockDeviceState* b) {
  r.Bool(&b->read_only, "block read_only");
  r.String(&b->serial, l.max_string_bytes, "block serial");
  r.String(&b->chain.base_path, l.max_string_bytes, "block base path");
  r.U64(&b->chain.size, "block size");
  uint32_t n = 0;
  if (!r.Count(&n, l.max_layers, "block layer")) return;
  b->chain.layers.resize(n);
  for (LayerRef& layer : b->chain.layers) {
    r.String(&layer.path, l.max_string_bytes, "layer path");
    r.Raw(layer.id.data(), layer.id.size(), "layer id");
  }
}

}  // namespace

const char* SectionName(uint32_t type) {
  switch (type) {
    case kSectionMachineConfig: return "machine-config";
    case kSectionVm: return "vm";
    case kSectionVcpu: return "vcpu";
    case kSectionSerial: return "serial";
    case kSectionVirtioDevice: return "virtio-device";
    default: return "unknown";
  }
}

void EncodeMachineConfig(const MachineConfig& c, ByteWriter& w) {
  w.U64(c.mem_bytes);
  w.U32(c.vcpus);
  w.U32(static_cast<uint32_t>(c.memory.size()));
  for (const MemoryRange& m : c.memory) {
    w.U64(m.guest_base);
    w.U64(m.size);
  }
  w.String(c.cmdline);
  w.U32(static_cast<uint32_t>(c.devices.size()));
  for (const DeviceConfig& d : c.devices) {
    w.U32(static_cast<uint32_t>(d.kind));
    w.U32(d.slot);
  }
}

void DecodeMachineConfig(ByteReader& r, const DecodeLimits& l, MachineConfig* c) {
  r.U64(&c->mem_bytes, "mem_bytes");
  r.U32(&c->vcpus, "vcpus");
  uint32_t n = 0;
  if (!r.Count(&n, l.max_memory_ranges, "memory range")) return;
  c->memory.resize(n);
  for (MemoryRange& m : c->memory) {
    r.U64(&m.guest_base, "memory range base");
    r.U64(&m.size, "memory range size");
  }
  r.String(&c->cmdline, l.max_string_bytes, "cmdline");
  if (!r.Count(&n, l.max_devices, "device")) return;
  c->devices.resize(n);
  for (DeviceConfig& d : c->devices) {
    uint32_t kind = 0;
    r.U32(&kind, "device kind");
    r.U32(&d.slot, "device slot");
    d.kind = static_cast<DeviceKind>(kind);
  }
}

void EncodeVm(const VmState& v, ByteWriter& w) {
  w.Blob(v.pic_master);
  w.Blob(v.pic_slave);
  w.Blob(v.ioapic);
  w.Blob(v.pit);
  w.Blob(v.clock);
  w.U64(v.captured_realtime_ns);
}

void DecodeVm(ByteReader& r, VmState* v) {
  r.Blob(&v->pic_master, "pic master");
  r.Blob(&v->pic_slave, "pic slave");
  r.Blob(&v->ioapic, "ioapic");
  r.Blob(&v->pit, "pit");
  r.Blob(&v->clock, "clock");
  r.U64(&v->captured_realtime_ns, "captured realtime");
}

void EncodeVcpu(const VcpuState& v, ByteWriter& w) {
  w.U32(v.id);
  w.Blob(v.regs);
  w.Blob(v.sregs);
  w.Blob(v.fpu);
  EncodeArray(v.msrs, w);
  EncodeArray(v.cpuid, w);
  w.Blob(v.lapic);
  w.Blob(v.mp_state);
  w.Blob(v.events);
  w.Bytes(v.xsave);
  w.Blob(v.xcrs);
  w.Blob(v.debugregs);
  w.U32(v.tsc_khz);
}

void DecodeVcpu(ByteReader& r, const DecodeLimits& l, VcpuState* v) {
  r.U32(&v->id, "vcpu id");
  r.Blob(&v->regs, "regs");
  r.Blob(&v->sregs, "sregs");
  r.Blob(&v->fpu, "fpu");
  DecodeArray(r, l.max_msrs, "msr", &v->msrs);
  DecodeArray(r, l.max_cpuid_entries, "cpuid", &v->cpuid);
  r.Blob(&v->lapic, "lapic");
  r.Blob(&v->mp_state, "mp_state");
  r.Blob(&v->events, "vcpu_events");
  r.Bytes(&v->xsave, l.max_xsave_bytes, "xsave");
  r.Blob(&v->xcrs, "xcrs");
  r.Blob(&v->debugregs, "debugregs");
  r.U32(&v->tsc_khz, "tsc_khz");
}

void EncodeSerial(const SerialState& s, ByteWriter& w) {
  w.U8(s.ier);
  w.U8(s.lcr);
  w.U8(s.mcr);
  w.U8(s.scr);
  w.U8(s.dll);
  w.U8(s.dlm);
  w.Bool(s.fifo_enabled);
  w.Bool(s.thre_pending);
  w.Bool(s.overrun);
  w.Bytes(s.input);
}

void DecodeSerial(ByteReader& r, SerialState* s) {
  r.U8(&s->ier, "serial ier");
  r.U8(&s->lcr, "serial lcr");
  r.U8(&s->mcr, "serial mcr");
  r.U8(&s->scr, "serial scr");
  r.U8(&s->dll, "serial dll");
  r.U8(&s->dlm, "serial dlm");
  r.Bool(&s->fifo_enabled, "serial fifo_enabled");
  r.Bool(&s->thre_pending, "serial thre_pending");
  r.Bool(&s->overrun, "serial overrun");
  r.Bytes(&s->input, Serial::kInputCapacity, "serial input");
}

void EncodeVirtioDevice(const VirtioDeviceState& d, ByteWriter& w) {
  w.U32(static_cast<uint32_t>(d.kind));
  w.U32(d.slot);
  EncodeTransport(d.transport, w);
  // Device-specific fields, length-prefixed so a device can grow them.
  std::vector<uint8_t> specific;
  ByteWriter sw(specific);
  if (d.kind == DeviceKind::kVirtioBlock) EncodeBlock(d.block, sw);
  if (d.kind == DeviceKind::kVirtioVsock) sw.U64(d.vsock.guest_cid);
  w.Bytes(specific);
}

void DecodeVirtioDevice(ByteReader& r, const DecodeLimits& l, bool allow_unknown_tail,
                        VirtioDeviceState* d) {
  uint32_t kind = 0;
  r.U32(&kind, "device kind");
  d->kind = static_cast<DeviceKind>(kind);
  r.U32(&d->slot, "device slot");
  DecodeTransport(r, l, &d->transport);
  uint32_t len = 0;
  if (!r.U32(&len, "device-specific length")) return;
  if (len > r.remaining()) {
    r.Raw(nullptr, len, "device-specific state");
    return;
  }
  size_t end = r.position() + len;
  if (d->kind == DeviceKind::kVirtioBlock) DecodeBlock(r, l, &d->block);
  if (d->kind == DeviceKind::kVirtioVsock) r.U64(&d->vsock.guest_cid, "vsock guest_cid");
  if (r.ok() && r.position() < end && allow_unknown_tail) {
    r.Skip(end - r.position());  // fields appended by a newer minor version
  } else if (r.ok() && r.position() != end) {
    r.Fail(StatusCode::kDataLoss, "device-specific state is " + std::to_string(len) +
                                      " bytes but its fields end at " +
                                      std::to_string(r.position() - (end - len)));
  }
}

}  // namespace kubicle::snapshot::internal
