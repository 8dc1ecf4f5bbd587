// The MSR values every vCPU starts with (as Firecracker's boot MSR list):
// SYSENTER/SYSCALL MSRs cleared, TSC = 0, fast strings enabled in
// MISC_ENABLE, and MTRRs enabled with write-back as the default memory type
// (without it a guest may treat all RAM as uncached).
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <vector>

namespace kubicle::vmm::arch {

inline constexpr uint32_t kMsrIa32Tsc = 0x10;
inline constexpr uint32_t kMsrIa32SysenterCs = 0x174;
inline constexpr uint32_t kMsrIa32SysenterEsp = 0x175;
inline constexpr uint32_t kMsrIa32SysenterEip = 0x176;
inline constexpr uint32_t kMsrIa32MiscEnable = 0x1a0;
inline constexpr uint32_t kMsrMtrrDefType = 0x2ff;
inline constexpr uint32_t kMsrStar = 0xc0000081;
inline constexpr uint32_t kMsrLstar = 0xc0000082;
inline constexpr uint32_t kMsrCstar = 0xc0000083;
inline constexpr uint32_t kMsrSyscallMask = 0xc0000084;
inline constexpr uint32_t kMsrKernelGsBase = 0xc0000102;

inline constexpr uint64_t kMiscEnableFastString = 1;
inline constexpr uint64_t kMtrrEnable = 1u << 11;
inline constexpr uint64_t kMtrrTypeWriteBack = 6;

// The boot MSR entries, in the order they are set.
std::vector<kvm_msr_entry> BootMsrs();

}  // namespace kubicle::vmm::arch
