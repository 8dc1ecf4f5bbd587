#include "snapshot/state.h"

#include <cstring>
#include <set>

#include "common/hex.h"
#include "snapshot/disk_chain.h"

namespace kubicle::snapshot {
namespace {

template <typename T>
bool SameBytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

Status ValidateMemory(const MachineConfig& c) {
  if (c.memory.empty()) return Status::InvalidArgument("machine has no memory ranges");
  uint64_t total = 0, next = 0;
  for (size_t i = 0; i < c.memory.size(); ++i) {
    const MemoryRange& m = c.memory[i];
    if (m.size == 0 || m.size % 4096 || m.guest_base % 4096) {
      return Status::InvalidArgument("memory range " + std::to_string(i) +
                                     " is empty or not 4 KiB aligned");
    }
    if (m.guest_base < next || m.guest_base + m.size < m.guest_base) {
      return Status::InvalidArgument("memory range " + std::to_string(i) +
                                     " overlaps or is out of order");
    }
    next = m.guest_base + m.size;
    total += m.size;
  }
  if (total != c.mem_bytes) {
    return Status::InvalidArgument("memory ranges add up to " + std::to_string(total) +
                                   " bytes, machine has " + std::to_string(c.mem_bytes));
  }
  return Status::Ok();
}

Status ValidateVcpus(const MachineState& s) {
  if (s.config.vcpus == 0) return Status::InvalidArgument("machine has no vcpus");
  if (s.vcpus.size() != s.config.vcpus) {
    return Status::InvalidArgument("machine has " + std::to_string(s.config.vcpus) +
                                   " vcpus but state for " + std::to_string(s.vcpus.size()));
  }
  for (size_t i = 0; i < s.vcpus.size(); ++i) {
    if (s.vcpus[i].id != i) {
      return Status::InvalidArgument("vcpu state " + std::to_string(i) + " has id " +
                                     std::to_string(s.vcpus[i].id) + " (ids must be 0..n-1 in order)");
    }
    if (s.vcpus[i].xsave.size() < 4096) {
      return Status::InvalidArgument("vcpu " + std::to_string(i) + " xsave area is " +
                                     std::to_string(s.vcpus[i].xsave.size()) +
                                     " bytes, at least 4096 expected");
    }
  }
  return Status::Ok();
}

Status ValidateDevices(const MachineState& s) {
  std::set<uint32_t> slots;
  size_t serials = 0, virtio = 0;
  for (const DeviceConfig& d : s.config.devices) {
    if (d.kind == kSerialDeviceKind) {
      ++serials;
      continue;
    }
    // Any other kind is a virtio device; whether this build knows it is the
    // VMM's question (vmm/devices/virtio/persist.h), not the container's.
    if (d.kind == 0) return Status::InvalidArgument("device kind 0 is not a device");
    if (!slots.insert(d.slot).second) {
      return Status::InvalidArgument("two virtio devices in slot " + std::to_string(d.slot));
    }
    ++virtio;
  }
  if (serials > 1) return Status::InvalidArgument("more than one serial device");
  if ((serials == 1) != s.serial.has_value()) {
    return Status::InvalidArgument("serial device and serial state do not match");
  }
  if (virtio != s.virtio.size()) {
    return Status::InvalidArgument(std::to_string(virtio) + " virtio devices configured, " +
                                   std::to_string(s.virtio.size()) + " with state");
  }
  for (const VirtioDeviceState& d : s.virtio) {
    bool found = false;
    for (const DeviceConfig& c : s.config.devices) found |= c.kind == d.kind && c.slot == d.slot;
    if (!found) {
      return Status::InvalidArgument("state for " + DeviceKindName(d.kind) +
                                     " in slot " + std::to_string(d.slot) +
                                     " has no configured device");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string DeviceKindName(DeviceKind kind) {
  if (kind == kSerialDeviceKind) return "serial";
  return "device kind " + std::to_string(kind);
}

std::string LayerIdHex(const LayerId& id) { return HexEncode(id); }

bool operator==(const VcpuState& a, const VcpuState& b) {
  return a.id == b.id && SameBytes(a.regs, b.regs) && SameBytes(a.sregs, b.sregs) &&
         SameBytes(a.fpu, b.fpu) && SameBytes(a.msrs, b.msrs) && SameBytes(a.cpuid, b.cpuid) &&
         SameBytes(a.lapic, b.lapic) && SameBytes(a.mp_state, b.mp_state) &&
         SameBytes(a.events, b.events) && a.xsave == b.xsave && SameBytes(a.xcrs, b.xcrs) &&
         SameBytes(a.debugregs, b.debugregs) && a.tsc_khz == b.tsc_khz;
}

bool operator==(const VmState& a, const VmState& b) {
  return SameBytes(a.pic_master, b.pic_master) && SameBytes(a.pic_slave, b.pic_slave) &&
         SameBytes(a.ioapic, b.ioapic) && SameBytes(a.pit, b.pit) &&
         SameBytes(a.clock, b.clock) && a.captured_realtime_ns == b.captured_realtime_ns;
}

bool operator==(const MachineState& a, const MachineState& b) {
  return a.config == b.config && a.vm == b.vm && a.vcpus == b.vcpus && a.serial == b.serial &&
         a.virtio == b.virtio;
}

Status ValidateState(const MachineState& state) {
  RETURN_IF_ERROR(ValidateMemory(state.config));
  RETURN_IF_ERROR(ValidateVcpus(state));
  return ValidateDevices(state);
}

}  // namespace kubicle::snapshot
