// The x86-64 boot path in two calls, for the VM builder:
//
//   ASSIGN_OR_RETURN(BootInfo boot, ConfigureBoot(mem, {kernel, initrd, cmdline, n}));
//   for each vCPU i: RETURN_IF_ERROR(SetupVcpu(kvm, vcpu[i], i, n, boot, supported_cpuid));
//
// ConfigureBoot fills guest memory: kernel (+ initrd), command line, zero
// page or PVH start info, MP table, GDT/IDT and identity page tables.
// SetupVcpu programs one vCPU: CPUID, boot MSRs, FPU, LAPIC LINT0/LINT1 and,
// on vCPU 0 only, the entry registers. Application processors stay in KVM's
// wait-for-SIPI state; the in-kernel irqchip delivers the INIT/SIPI Linux
// sends them. ConfigureVm and RegisterGuestMemory are the VM-level steps
// that must precede vCPU creation.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/arch/x86_64/kernel_loader.h"
#include "vmm/arch/x86_64/regs.h"
#include "vmm/kvm/kvm.h"
#include "vmm/kvm/vcpu_fd.h"
#include "vmm/kvm/vm_fd.h"
#include "vmm/memory/guest_memory.h"

namespace kubicle::vmm::arch {

enum class BootProtocol {
  kAuto,     // 64-bit Linux entry when the kernel has one, else PVH
  kLinux64,  // Linux boot protocol, 64-bit entry, zero page in RSI
  kPvh,      // PVH: 32-bit entry from the ELF note, hvm_start_info in EBX
};

struct BootConfig {
  std::string kernel_path;
  std::optional<std::string> initrd_path;
  std::string cmdline;
  uint32_t num_vcpus = 1;
  BootProtocol protocol = BootProtocol::kAuto;
};

struct BootInfo {
  EntryMode mode = EntryMode::kLinux64;
  uint64_t entry = 0;  // guest-physical entry point for vCPU 0
  LoadedKernel kernel;
  std::optional<LoadedInitrd> initrd;
  uint32_t num_vcpus = 1;
};

// KVM_SET_IDENTITY_MAP_ADDR and KVM_SET_TSS_ADDR at their layout addresses,
// then the in-kernel irqchip and PIT. Call once, before creating vCPUs.
Status ConfigureVm(const kvm::VmFd& vm);
// Registers every guest memory region as KVM memory slot 0, 1, ...
Status RegisterGuestMemory(const kvm::VmFd& vm, const GuestMemory& mem);

// Loads and lays out everything vCPU 0 needs to boot. Fails with a message
// naming the file or limit when the kernel, initrd or command line is bad,
// num_vcpus is 0 or above kMaxVcpus, or the protocol asked for is not
// supported by the kernel.
Result<BootInfo> ConfigureBoot(const GuestMemory& mem, const BootConfig& config);

// Programs vCPU `index` of `num_vcpus` for boot. `supported` is
// Kvm::SupportedCpuid() (fetch once per VM). Boot MSRs that this KVM does not
// list in KVM_GET_MSR_INDEX_LIST are skipped.
Status SetupVcpu(const kvm::Kvm& kvm, const kvm::VcpuFd& vcpu, uint32_t index, uint32_t num_vcpus,
                 const BootInfo& boot, const std::vector<kvm_cpuid_entry2>& supported);

}  // namespace kubicle::vmm::arch
