// The machine state a snapshot carries, as plain structs, and the versioned
// binary `state` file they are stored in (docs/snapshot-format.md describes
// every byte).
//
// What is here: everything a restore needs besides guest memory and host
// resources — per-vCPU KVM state, the in-kernel irqchips, PIT and kvmclock,
// the machine's shape (memory ranges, vCPUs, command line, device list) and
// every device's guest-visible state, as a record the device encoded itself
// (this layer frames and checks records, it does not read them). Host
// resources (fds, socket paths, mappings) are never serialised: restore
// passes new ones in.
//
// Contracts:
// - EncodeState(s) then DecodeState gives back s exactly (round trip).
// - DecodeState validates before it trusts: wrong magic (InvalidArgument),
//   another major version or architecture (FailedPrecondition), a truncated
//   or over-long file, a bad checksum, section bounds (DataLoss), counts over
//   the caps in DecodeLimits (InvalidArgument). Every error says which.
// - A file written by a newer minor version is read when everything the
//   reader does not understand is marked optional; a section marked required
//   that the reader does not know is refused (FailedPrecondition).
// - Decoding is a single pass over an in-memory buffer: microseconds for a
//   typical microVM (a few tens of KiB).
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::snapshot {

inline constexpr uint16_t kStateFormatMajor = 1;
inline constexpr uint16_t kStateFormatMinor = 0;

struct VcpuState {
  uint32_t id = 0;  // KVM vCPU id (= APIC id); vCPU 0 is the boot CPU
  kvm_regs regs{};
  kvm_sregs sregs{};
  kvm_fpu fpu{};
  std::vector<kvm_msr_entry> msrs;        // in restore order
  std::vector<kvm_cpuid_entry2> cpuid;
  kvm_lapic_state lapic{};
  kvm_mp_state mp_state{};
  kvm_vcpu_events events{};
  std::vector<uint8_t> xsave;             // KVM_GET_XSAVE(2) bytes, >= 4096
  kvm_xcrs xcrs{};
  kvm_debugregs debugregs{};
  uint32_t tsc_khz = 0;                   // 0: unknown (no KVM_GET_TSC_KHZ)
};

struct VmState {
  kvm_irqchip pic_master{};
  kvm_irqchip pic_slave{};
  kvm_irqchip ioapic{};
  kvm_pit_state2 pit{};
  kvm_clock_data clock{};
  // Host CLOCK_REALTIME (ns) when `clock` was read; lets restore advance the
  // guest clock by the time the snapshot spent on disk even on hosts where
  // KVM does not report clock.realtime (KVM_CLOCK_REALTIME).
  uint64_t captured_realtime_ns = 0;
};

struct MemoryRange {
  uint64_t guest_base = 0;
  uint64_t size = 0;
  bool operator==(const MemoryRange&) const = default;
};

// The kind of a device in the machine config and in its state record. The
// container knows one kind itself, the serial port, whose state has a section
// of its own; every other kind number is the device's own
// (vmm/devices/virtio/persist.h), and the bytes of its record are encoded by
// the device. docs/snapshot-format.md lists the numbers in use.
using DeviceKind = uint32_t;
inline constexpr DeviceKind kSerialDeviceKind = 1;
// "serial", or "device kind N".
std::string DeviceKindName(DeviceKind kind);

struct DeviceConfig {
  DeviceKind kind = kSerialDeviceKind;
  uint32_t slot = 0;  // virtio-mmio slot (arch::MmioDeviceAddr); 0 for serial
  bool operator==(const DeviceConfig&) const = default;
};

// The machine's shape: what restore builds before applying any state.
struct MachineConfig {
  uint64_t mem_bytes = 0;
  uint32_t vcpus = 0;
  std::vector<MemoryRange> memory;  // guest RAM ranges, in memory-file order
  std::string cmdline;              // as given to the kernel (for reference)
  std::vector<DeviceConfig> devices;
  bool operator==(const MachineConfig&) const = default;
};

// One virtio-mmio device: its kind and slot, and the state it saved, as it
// encoded it (its transport's state, then its own; opaque to this layer).
struct VirtioDeviceState {
  DeviceKind kind = 0;
  uint32_t slot = 0;
  std::vector<uint8_t> state;
  bool operator==(const VirtioDeviceState&) const = default;
};

struct MachineState {
  MachineConfig config;
  VmState vm;
  std::vector<VcpuState> vcpus;  // config.vcpus entries, by id
  // The serial device's saved state, as it encoded it.
  std::optional<std::vector<uint8_t>> serial;
  std::vector<VirtioDeviceState> virtio;
  // Set by DecodeState when the file is from a newer minor version: device
  // decoders then skip fields appended after theirs. Never written, and not
  // part of equality.
  bool newer_minor = false;
};

// Byte-wise equality (kernel structs compare as bytes).
bool operator==(const VcpuState& a, const VcpuState& b);
bool operator==(const VmState& a, const VmState& b);
bool operator==(const MachineState& a, const MachineState& b);

struct DecodeLimits {
  uint64_t max_file_bytes = 64ull << 20;
  uint32_t max_vcpus = 256;
  uint32_t max_msrs = 4096;
  uint32_t max_cpuid_entries = 4096;
  uint32_t max_xsave_bytes = 1u << 20;
  uint32_t max_devices = 64;
  uint32_t max_memory_ranges = 16;
  uint32_t max_string_bytes = 64u << 10;
  uint32_t max_sections = 1024;
};

// Checks the state's internal consistency (vCPU count and ids, devices
// matching config, memory ranges summing to mem_bytes); Encode and Decode
// both run it. InvalidArgument naming the first problem.
Status ValidateState(const MachineState& state);

Result<std::vector<uint8_t>> EncodeState(const MachineState& state);
Result<MachineState> DecodeState(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

}  // namespace kubicle::snapshot
