// Per-vCPU CPUID: turns KVM's supported CPUID (KVM_GET_SUPPORTED_CPUID) into
// the table one vCPU of an N-vCPU guest sees, following Firecracker's
// normalisation so Linux finds a sane topology:
// - leaf 1: initial APIC id (EBX[31:24]) = vCPU index, CLFLUSH size 64 B,
//   addressable logical processors = N rounded up to a power of two, HTT
//   when N > 1, hypervisor bit, TSC-deadline (the in-kernel LAPIC has it),
//   PDCM cleared (no IA32_PERF_CAPABILITIES passthrough).
// - leaves 0xB and 0x1F (when present): one thread per core, N cores in one
//   package, x2APIC id in EDX of every subleaf, subleaf 2 terminates.
// - leaf 4 (Intel): cores per package and threads sharing each cache.
// - AMD: 0x80000008 ECX core count, 0x8000001E extended APIC id.
// - leaf 0xD (XSAVE): only the state components the guest can enable given
//   the other leaves (YMM needs AVX, AVX-512 states need AVX512F, PKRU
//   needs PKU, MPX and AMX their flags; none but x87/SSE without XSAVE);
//   sub-leaf 0 EBX/ECX = the XSAVE area size for exactly those, sub-leaf 1
//   EBX the compacted size (no supervisor states), sub-leaves of other
//   components zero. Otherwise Linux warns "XSAVE consistency problem".
// - KVM paravirt leaves 0x40000000 ("KVMKVMKVM\0\0\0", max leaf) and
//   0x40000001 (features as KVM reports them: kvmclock, PV EOI, ...).
// Pure function over plain vectors, so it is unit-tested without KVM.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace kubicle::vmm::arch {

inline constexpr uint32_t kCpuidLeaf1HypervisorBit = 1u << 31;  // ECX
inline constexpr uint32_t kKvmCpuidSignatureLeaf = 0x40000000;
inline constexpr uint32_t kKvmCpuidFeaturesLeaf = 0x40000001;

// InvalidArgument when vcpu_index >= num_vcpus, num_vcpus is 0 or above
// kMaxVcpus, or leaf 0 / leaf 1 are missing from supported.
Result<std::vector<kvm_cpuid_entry2>> NormalizeCpuid(std::vector<kvm_cpuid_entry2> supported,
                                                     uint32_t vcpu_index, uint32_t num_vcpus);

// The entry for (function, index), or nullptr. Subleaf-insensitive leaves
// match any index.
const kvm_cpuid_entry2* FindCpuid(const std::vector<kvm_cpuid_entry2>& table, uint32_t function,
                                  uint32_t index = 0);

}  // namespace kubicle::vmm::arch
