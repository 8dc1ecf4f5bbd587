// Capture and apply of the VM-wide KVM state: both PICs, the IOAPIC, the PIT
// and the kvmclock. The state is a plain struct of the snapshot format
// (snapshot::VmState); reading and writing it through KVM is the VMM's.
//
// Contracts:
// - CaptureVm runs with every vCPU paused. ApplyVm runs on a new VM whose
//   in-kernel irqchip and PIT exist (arch::ConfigureVm), before its vCPUs are
//   resumed; calling it before or after ApplyVcpu is equally valid.
// - The clock: with ClockPolicy::kAdvance (the default) the guest's kvmclock
//   continues from the captured value plus the host wall time that passed
//   since the capture, so guest wall time does not jump back to snapshot
//   time (E2B infra#638). KVM does it atomically (KVM_CLOCK_REALTIME) when
//   the host supports it; otherwise the same adjustment is computed here.
//   kExact restores the captured value as is (tests, debugging).
#pragma once

#include "common/status.h"
#include "snapshot/state.h"
#include "vmm/kvm/vm_fd.h"

namespace kubicle::vmm::kvm {

Result<snapshot::VmState> CaptureVm(const VmFd& vm);

enum class ClockPolicy { kAdvance, kExact };
Status ApplyVm(const VmFd& vm, const snapshot::VmState& state,
               ClockPolicy clock = ClockPolicy::kAdvance);

// The kvmclock value to set for a capture taken at captured_realtime_ns when
// the host wall clock now reads now_realtime_ns (never steps backwards).
uint64_t AdvancedClock(uint64_t clock_ns, uint64_t captured_realtime_ns, uint64_t now_realtime_ns);

// Host CLOCK_REALTIME in nanoseconds.
uint64_t HostRealtimeNs();

}  // namespace kubicle::vmm::kvm
