#include "vmm/arch/x86_64/msrs.h"

namespace kubicle::vmm::arch {

std::vector<kvm_msr_entry> BootMsrs() {
  auto msr = [](uint32_t index, uint64_t data) {
    kvm_msr_entry e{};
    e.index = index;
    e.data = data;
    return e;
  };
  return {
      msr(kMsrIa32SysenterCs, 0),
      msr(kMsrIa32SysenterEsp, 0),
      msr(kMsrIa32SysenterEip, 0),
      msr(kMsrStar, 0),
      msr(kMsrCstar, 0),
      msr(kMsrKernelGsBase, 0),
      msr(kMsrSyscallMask, 0),
      msr(kMsrLstar, 0),
      msr(kMsrIa32Tsc, 0),
      msr(kMsrIa32MiscEnable, kMiscEnableFastString),
      msr(kMsrMtrrDefType, kMtrrEnable | kMtrrTypeWriteBack),
  };
}

}  // namespace kubicle::vmm::arch
