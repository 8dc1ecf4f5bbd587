// What kubicle-agent does when it is the guest's PID 1 (the initramfs init
// execs it, directly or after switch_root): orderly shutdown on request.
#pragma once

namespace kubicle::guest::agent {

// Stops every other process (SIGTERM, up to `grace_ms`, then SIGKILL),
// syncs and remounts filesystems read-only, then resets the machine with
// reboot(RB_AUTOBOOT). With `reboot=k` on the kernel command line that is an
// i8042 reset, which kubicle-vmm treats as a clean exit (code 0). Returns
// only if the reboot call fails.
void PowerOff(int grace_ms);

}  // namespace kubicle::guest::agent
