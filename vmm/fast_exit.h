// ExitLeavingTeardown: ends kubicle-vmm without waiting for the kernel to
// tear the KVM VM down. Closing the last fd of a KVM VM (and freeing its
// guest memory) costs ~15 ms on this host and, at process exit, happens
// before the parent can reap the process: whoever waits for the VMM to be
// gone (the node daemon stopping a sandbox) would wait for it.
//
// So the VM's fds and the address space are handed to a tiny helper made by
// clone(CLONE_VM | CLONE_FILES): it shares the fd table and the memory, waits
// (pidfd) until this process has exited, and exits itself, which is when
// the kernel destroys the VM and frees guest memory. Everything else
// (listening and connected sockets, eventfds, files, stdio) is closed here
// first, so peers see the VM gone at once. The helper is reparented to init (or
// the nearest subreaper) and reaped there. It stays in the VMM's cgroups
// until it exits (the VMM cannot tell its sandbox's cgroup from an outer
// one it must not leave), so removing a sandbox cgroup right after the VMM
// is reaped may see EBUSY for those milliseconds: retry, as noderuntime's
// Cgroups does.
//
// Contract: call after every vCPU and device thread has stopped (the helper
// runs no libc code that could hold a lock, but nothing else may run on
// the shared memory). Never returns. If the helper cannot be made, exits
// normally (teardown then happens before the exit is visible).
#pragma once

namespace kubicle::vmm {

[[noreturn]] void ExitLeavingTeardown(int code);

}  // namespace kubicle::vmm
