// Process exit codes of kubicle-vmm, which kubicle-node turns into a sandbox's
// failure reason. Keep in sync with UsageText() in vmm_config.cc.
#pragma once

namespace kubicle::vmm {

enum class ExitCode : int {
  kGuestShutdown = 0,  // reset, power-off or the shutdown command
  kUsage = 1,          // bad flag, missing file, value out of range
  kSetupFailed = 2,    // KVM, kernel image or a device could not be set up
  kGuestCrashed = 3,   // triple fault, KVM internal error, failed entry
  kInternal = 4,       // a bug or resource failure in kubicle-vmm itself
  kSyscallRefused = 5, // a system call outside the seccomp filter (syscall_policy.h)
};

}  // namespace kubicle::vmm
