// Capture and apply of one vCPU's KVM state, in the order Firecracker
// established as safe (docs/snapshot-format.md, "Restore order"). The state
// is a plain struct of the snapshot format (snapshot::VcpuState); reading and
// writing it through KVM is the VMM's.
//
// Contracts:
// - Call from the vCPU's own thread while it is not in KVM_RUN (the monitor's
//   VcpuSet::ForEachPaused). Every vCPU of the VM must be paused: reading
//   vcpu_events while another vCPU runs is not consistent.
// - Before capturing a vCPU that last exited for port I/O or MMIO, run
//   CompletePendingExit: KVM finishes an I/O instruction only on the next
//   KVM_RUN, and that pending state is not visible to (nor saved through)
//   any GET ioctl. Without it a restored guest replays or loses the access.
// - ApplyVcpu expects a freshly created vCPU of a VM whose irqchip exists
//   (and, for vCPU ids > 0, the same id as captured). It sets CPUID, MP
//   state, registers, FPU/XSAVE, XCRs, debug registers, LAPIC, MSRs (the
//   TSC-deadline MSR last) and events, then KVM_KVMCLOCK_CTRL so the guest
//   does not report soft lockups for the time it spent paused.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "snapshot/state.h"
#include "vmm/kvm/kvm.h"
#include "vmm/kvm/vcpu_fd.h"

namespace kubicle::vmm::kvm {

inline constexpr uint32_t kMsrIa32Tsc = 0x10;
inline constexpr uint32_t kMsrIa32TscDeadline = 0x6e0;

// The MSRs of Kvm::MsrIndexList that KVM_GET_MSRS can read on this vCPU, in
// KVM's order. Compute once per VM and pass to CaptureVcpu (each unreadable
// MSR costs one extra ioctl to discover).
Result<std::vector<uint32_t>> ReadableMsrs(const Kvm& kvm, const VcpuFd& vcpu);

// KVM_RUN with immediate_exit set: completes a pending I/O or MMIO exit
// without executing guest instructions. Returns OK once KVM reports EINTR.
Status CompletePendingExit(VcpuFd& vcpu);

Result<snapshot::VcpuState> CaptureVcpu(const VcpuFd& vcpu, std::span<const uint32_t> msrs);
// Convenience: ReadableMsrs + CaptureVcpu.
Result<snapshot::VcpuState> CaptureVcpu(const Kvm& kvm, const VcpuFd& vcpu);

Status ApplyVcpu(const VcpuFd& vcpu, const snapshot::VcpuState& state);

// If the TSC-deadline MSR is 0 (timer disarmed at the instant of capture,
// often with its interrupt still in flight), stores the captured TSC there
// so the restored LAPIC timer fires at once instead of never. Moves the
// deadline MSR last, the order ApplyVcpu needs. Pure; exposed for tests.
void FixTscDeadline(std::vector<kvm_msr_entry>& msrs);

}  // namespace kubicle::vmm::kvm
