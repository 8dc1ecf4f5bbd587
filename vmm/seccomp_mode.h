// How kubicle-vmm applies its seccomp filter (`--seccomp`), a word the node
// passes to every VMM it starts (`kubicle-node --vmm-seccomp`). The filter
// itself is vmm/syscall_policy.h; docs/vmm.md, "Seccomp".
#pragma once

#include <string>

#include "common/status.h"

namespace kubicle::vmm {

enum class SeccompMode {
  kEnforce,  // refused calls end the VMM (the default)
  kLog,      // refused calls are logged by the kernel (audit) and run
  kOff,      // no filter (debugging only)
};

// "enforce", "log" or "off"; anything else is InvalidArgument naming `flag`.
Result<SeccompMode> ParseSeccompMode(const std::string& text, const std::string& flag = "--seccomp");
const char* SeccompModeName(SeccompMode mode);

}  // namespace kubicle::vmm
