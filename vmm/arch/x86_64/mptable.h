// Intel MultiProcessor Specification 1.4 table: how a Linux guest without
// ACPI finds its CPUs, its IOAPIC and how ISA IRQs are wired. Written at
// kMptableAddr (Linux scans the last KiB below 640 KiB for "_MP_"): a
// floating pointer followed by the configuration table with one processor
// entry per vCPU (APIC id = index, vCPU 0 the bootstrap processor), an ISA
// bus, the IOAPIC (id = num_cpus, at kIoapicAddr), IRQ 0..23 routed to IOAPIC
// pins 0..23 (as KVM's default GSI routing), LINT0 = ExtINT and LINT1 = NMI.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

// APIC ids are 8-bit, 0xff is broadcast and the IOAPIC takes one id.
inline constexpr uint32_t kMaxVcpus = 254;

// The table bytes for num_cpus vCPUs when placed at guest address base.
// InvalidArgument for 0 or more than kMaxVcpus vCPUs.
Result<std::vector<uint8_t>> BuildMptable(uint32_t num_cpus, uint64_t base);

// Builds the table for kMptableAddr and writes it to guest memory.
Status WriteMptable(const GuestMemory& mem, uint32_t num_cpus);

}  // namespace kubicle::vmm::arch
