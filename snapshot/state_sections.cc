#include "snapshot/state_sections.h"

#include <cstring>

namespace kubicle::snapshot::internal {
namespace {

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
    w.U32(d.kind);
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
    r.U32(&d.kind, "device kind");
    r.U32(&d.slot, "device slot");
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

void EncodeSerial(const std::vector<uint8_t>& s, ByteWriter& w) { w.Raw(s.data(), s.size()); }

void DecodeSerial(ByteReader& r, std::vector<uint8_t>* s) { r.Rest(s); }

void EncodeVirtioDevice(const VirtioDeviceState& d, ByteWriter& w) {
  w.U32(d.kind);
  w.U32(d.slot);
  w.Raw(d.state.data(), d.state.size());
}

void DecodeVirtioDevice(ByteReader& r, VirtioDeviceState* d) {
  r.U32(&d->kind, "device kind");
  r.U32(&d->slot, "device slot");
  r.Rest(&d->state);
}

}  // namespace kubicle::snapshot::internal
