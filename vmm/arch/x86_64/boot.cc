#include "vmm/arch/x86_64/boot.h"

#include <algorithm>

#include "vmm/arch/x86_64/cmdline.h"
#include "vmm/arch/x86_64/cpuid.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/arch/x86_64/mptable.h"
#include "vmm/arch/x86_64/msrs.h"
#include "vmm/arch/x86_64/pvh.h"
#include "vmm/arch/x86_64/zero_page.h"

namespace kubicle::vmm::arch {
namespace {

Result<EntryMode> ChooseEntry(const LoadedKernel& k, BootProtocol protocol,
                              const std::string& path, uint64_t* entry) {
  bool want_pvh = protocol == BootProtocol::kPvh ||
                  (protocol == BootProtocol::kAuto && !k.entry64 && k.pvh_entry);
  if (want_pvh) {
    if (!k.pvh_entry) {
      return Status::InvalidArgument("kernel " + path + " has no PVH entry note");
    }
    *entry = *k.pvh_entry;
    return EntryMode::kPvh;
  }
  if (!k.entry64) return Status::InvalidArgument("kernel " + path + " has no 64-bit entry point");
  *entry = *k.entry64;
  return EntryMode::kLinux64;
}

std::vector<GuestMemory::Range> Ranges(const GuestMemory& mem) {
  std::vector<GuestMemory::Range> ranges;
  for (const GuestRegion& r : mem.regions()) ranges.push_back({r.guest_base, r.size});
  std::sort(ranges.begin(), ranges.end(),
            [](const GuestMemory::Range& a, const GuestMemory::Range& b) { return a.base < b.base; });
  return ranges;
}

Status WriteBootTables(const GuestMemory& mem, const BootInfo& info, uint32_t cmdline_size) {
  std::vector<GuestMemory::Range> ranges = Ranges(mem);
  ASSIGN_OR_RETURN(std::vector<E820Entry> e820, BuildE820(ranges));
  if (info.mode == EntryMode::kPvh) {
    RETURN_IF_ERROR(WritePvhStartInfo(mem, e820, kCmdlineAddr, info.initrd));
  } else {
    ZeroPageConfig zp;
    zp.kernel_header = info.kernel.setup_header;
    zp.cmdline_addr = kCmdlineAddr;
    zp.cmdline_size = cmdline_size;
    if (info.initrd) {
      zp.initrd_addr = info.initrd->addr;
      zp.initrd_size = info.initrd->size;
    }
    zp.e820 = std::move(e820);
    ASSIGN_OR_RETURN(BootParams params, BuildZeroPage(zp));
    RETURN_IF_ERROR(WriteZeroPage(mem, params));
    RETURN_IF_ERROR(WriteIdentityPageTables(mem));
  }
  RETURN_IF_ERROR(WriteGdtAndIdt(mem, info.mode));
  return WriteMptable(mem, info.num_vcpus);
}

// The boot MSRs KVM knows; on a KVM lacking one we skip it rather than fail.
Result<std::vector<kvm_msr_entry>> SupportedBootMsrs(const kvm::Kvm& kvm) {
  ASSIGN_OR_RETURN(std::vector<uint32_t> supported, kvm.MsrIndexList());
  std::vector<kvm_msr_entry> msrs = BootMsrs();
  std::erase_if(msrs, [&](const kvm_msr_entry& e) {
    return std::find(supported.begin(), supported.end(), e.index) == supported.end();
  });
  return msrs;
}

}  // namespace

Status ConfigureVm(const kvm::VmFd& vm) {
  RETURN_IF_ERROR(vm.SetIdentityMapAddress(kKvmIdentityMapAddr));
  RETURN_IF_ERROR(vm.SetTssAddress(kKvmTssAddr));
  RETURN_IF_ERROR(vm.CreateIrqchip());
  return vm.CreatePit2();
}

Status RegisterGuestMemory(const kvm::VmFd& vm, const GuestMemory& mem) {
  uint32_t slot = 0;
  for (const GuestRegion& r : mem.regions()) {
    RETURN_IF_ERROR(vm.SetUserMemoryRegion(slot++, r.guest_base, r.size, r.host));
  }
  return Status::Ok();
}

Result<BootInfo> ConfigureBoot(const GuestMemory& mem, const BootConfig& config) {
  if (config.num_vcpus == 0 || config.num_vcpus > kMaxVcpus) {
    return Status::InvalidArgument("vCPU count " + std::to_string(config.num_vcpus) +
                                   " is outside 1.." + std::to_string(kMaxVcpus));
  }
  BootInfo info;
  info.num_vcpus = config.num_vcpus;
  ASSIGN_OR_RETURN(info.kernel, LoadKernel(mem, config.kernel_path));
  ASSIGN_OR_RETURN(info.mode, ChooseEntry(info.kernel, config.protocol, config.kernel_path,
                                          &info.entry));
  if (config.initrd_path) {
    ASSIGN_OR_RETURN(info.initrd, LoadInitrd(mem, *config.initrd_path, info.kernel));
  }
  uint64_t max_cmdline = kCmdlineMaxSize - 1;
  if (info.kernel.setup_header && info.kernel.setup_header->cmdline_size != 0) {
    max_cmdline = info.kernel.setup_header->cmdline_size;
  }
  ASSIGN_OR_RETURN(uint32_t cmdline_size, WriteCmdline(mem, config.cmdline, max_cmdline));
  RETURN_IF_ERROR(WriteBootTables(mem, info, cmdline_size));
  return info;
}

Status SetupVcpu(const kvm::Kvm& kvm, const kvm::VcpuFd& vcpu, uint32_t index, uint32_t num_vcpus,
                 const BootInfo& boot, const std::vector<kvm_cpuid_entry2>& supported) {
  ASSIGN_OR_RETURN(std::vector<kvm_cpuid_entry2> cpuid, NormalizeCpuid(supported, index, num_vcpus));
  RETURN_IF_ERROR(vcpu.SetCpuid2(cpuid));
  ASSIGN_OR_RETURN(std::vector<kvm_msr_entry> msrs, SupportedBootMsrs(kvm));
  RETURN_IF_ERROR(vcpu.SetMsrs(msrs));
  if (index == 0) {
    RETURN_IF_ERROR(vcpu.SetRegs(BootRegs(boot.mode, boot.entry)));
    ASSIGN_OR_RETURN(kvm_sregs sregs, vcpu.GetSregs());
    ApplyBootSregs(boot.mode, sregs);
    RETURN_IF_ERROR(vcpu.SetSregs(sregs));
  }
  RETURN_IF_ERROR(vcpu.SetFpu(BootFpu()));
  ASSIGN_OR_RETURN(kvm_lapic_state lapic, vcpu.GetLapic());
  SetupLint(lapic);
  return vcpu.SetLapic(lapic);
}

}  // namespace kubicle::vmm::arch
