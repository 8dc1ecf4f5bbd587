// The system calls a running kubicle-vmm may make (docs/vmm.md, "Seccomp").
// Installed on every thread once the VM is built and before any vCPU runs,
// so a guest that took over a device emulator finds no exec, no network
// socket, no new namespace, no mount, no ptrace and no ioctl but KVM's and
// the TAP's. A refused call ends the process with ExitCode::kSyscallRefused
// and one line on stderr naming the call's number.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/seccomp_mode.h"

namespace kubicle::vmm {

// The VMM's filter program for `mode` (not kOff).
Result<std::vector<sock_filter>> VmmSeccompProgram(SeccompMode mode);

// Installs the filter on every thread of this process, with the SIGSYS
// reporter for kEnforce. kOff installs nothing.
Status ConfineVmm(SeccompMode mode);

}  // namespace kubicle::vmm
