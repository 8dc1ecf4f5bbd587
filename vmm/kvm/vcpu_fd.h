// VcpuFd: one KVM virtual CPU (the fd from KVM_CREATE_VCPU) and its mmapped
// kvm_run area. Wraps KVM_RUN and every get/set of vCPU state that booting,
// pausing, snapshot and restore need (regs, sregs, FPU, MSRs, CPUID, LAPIC,
// MP state, events, XSAVE, XCRs, debug regs, TSC frequency).
//
// Contracts:
// - Move-only; owns the fd and the kvm_run mapping.
// - Run() and all get/set calls must come from the thread that runs the vCPU
//   (KVM requires the vCPU not to be running during state access; we keep it
//   simple by doing both on the vCPU thread). SetImmediateExit() and run()
//   may be used from any thread to kick the vCPU out of the guest.
// - Restore order (see docs): SetRegs before SetVcpuEvents, SetSregs before
//   SetLapic, SetLapic before SetMsrs (TSC-deadline needs the LAPIC).
// - Every failure names the ioctl, the vCPU id and errno.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/mmap_region.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm::kvm {

class VcpuFd {
 public:
  // Used by VmFd::CreateVcpu. xsave_size: KVM_CAP_XSAVE2 value, 0 if absent.
  VcpuFd(UniqueFd fd, MmapRegion run, uint32_t id, size_t xsave_size);
  VcpuFd(VcpuFd&&) noexcept = default;
  VcpuFd& operator=(VcpuFd&&) noexcept = default;
  VcpuFd(const VcpuFd&) = delete;
  VcpuFd& operator=(const VcpuFd&) = delete;

  // KVM_RUN. OK means the guest exited; inspect run()->exit_reason. When a
  // signal (or immediate_exit) interrupted it, the Status is kUnavailable
  // with error_number() == EINTR: test with IsInterrupted(). Other failures
  // carry their errno.
  Status Run();
  static bool IsInterrupted(const Status& s) { return !s.ok() && s.error_number() == EINTR; }
  // The shared kvm_run struct: exit reason and I/O / MMIO data.
  kvm_run* run() const { return reinterpret_cast<kvm_run*>(run_.data()); }
  // Sets kvm_run.immediate_exit: while set, KVM_RUN returns EINTR at once.
  // Pair with a signal to the vCPU thread to kick a running guest out.
  void SetImmediateExit(bool on) const;

  uint32_t id() const { return id_; }
  int fd() const { return fd_.get(); }

  Result<kvm_regs> GetRegs() const;
  Status SetRegs(const kvm_regs& regs) const;
  Result<kvm_sregs> GetSregs() const;
  Status SetSregs(const kvm_sregs& sregs) const;
  Result<kvm_fpu> GetFpu() const;
  Status SetFpu(const kvm_fpu& fpu) const;

  // KVM_GET_MSRS for entries[i].index; fills entries[i].data. Returns how
  // many were read: KVM stops at the first MSR it cannot read, so a result
  // below entries.size() names entries[result] as the first unreadable one.
  Result<size_t> GetMsrs(std::span<kvm_msr_entry> entries) const;
  // KVM_SET_MSRS; fails unless every entry was accepted, naming the first
  // rejected MSR.
  Status SetMsrs(std::span<const kvm_msr_entry> entries) const;

  // KVM_GET/SET_CPUID2.
  Result<std::vector<kvm_cpuid_entry2>> GetCpuid2() const;
  Status SetCpuid2(std::span<const kvm_cpuid_entry2> entries) const;

  Result<kvm_lapic_state> GetLapic() const;
  Status SetLapic(const kvm_lapic_state& lapic) const;
  Result<kvm_mp_state> GetMpState() const;
  Status SetMpState(const kvm_mp_state& state) const;
  Result<kvm_vcpu_events> GetVcpuEvents() const;
  Status SetVcpuEvents(const kvm_vcpu_events& events) const;
  // XSAVE area: KVM_GET_XSAVE2 (size from KVM_CAP_XSAVE2) where available,
  // else the fixed 4 KiB KVM_GET_XSAVE. SetXsave takes what GetXsave gave.
  Result<std::vector<uint8_t>> GetXsave() const;
  Status SetXsave(std::span<const uint8_t> xsave) const;
  Result<kvm_xcrs> GetXcrs() const;
  Status SetXcrs(const kvm_xcrs& xcrs) const;
  Result<kvm_debugregs> GetDebugRegs() const;
  Status SetDebugRegs(const kvm_debugregs& regs) const;
  // KVM_GET/SET_TSC_KHZ: the guest TSC frequency (set needs
  // KVM_CAP_TSC_CONTROL; restore on another host scales the TSC).
  Result<uint32_t> GetTscKhz() const;
  Status SetTscKhz(uint32_t khz) const;
  // KVM_KVMCLOCK_CTRL: tells the guest it was paused so its watchdogs do not
  // fire. Fails with EINVAL when the guest has not enabled kvmclock; callers
  // may ignore that case.
  Status KvmclockCtrl() const;

 private:
  template <typename T>
  Result<T> Get(unsigned long request, const char* name) const;
  template <typename T>
  Status Set(unsigned long request, const T& value, const char* name) const;
  Status Errno(const char* name) const;

  UniqueFd fd_;
  MmapRegion run_;  // kvm_run; the mapping keeps its own reference to the vCPU
  uint32_t id_ = 0;
  size_t xsave_size_ = 0;
};

}  // namespace kubicle::vmm::kvm
