#include "vmm/kvm/vcpu_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace kubicle::vmm::kvm {
namespace {

// KVM refuses KVM_GET/SET_MSRS with more entries than this (MAX_IO_MSRS).
constexpr size_t kMsrChunk = 256;
// TSC frequencies within 250 ppm are the same clock calibrated twice (the
// tolerance QEMU and Firecracker use); beyond it the guest TSC is scaled.
constexpr int64_t kTscTolerancePpm = 250;

Result<std::vector<kvm_msr_entry>> ReadMsrs(const VcpuFd& vcpu, std::span<const uint32_t> msrs) {
  std::vector<kvm_msr_entry> out(msrs.size());
  for (size_t i = 0; i < msrs.size(); ++i) out[i] = kvm_msr_entry{msrs[i], 0, 0};
  for (size_t at = 0; at < out.size(); at += kMsrChunk) {
    std::span<kvm_msr_entry> chunk(out.data() + at, std::min(kMsrChunk, out.size() - at));
    ASSIGN_OR_RETURN(size_t got, vcpu.GetMsrs(chunk));
    if (got != chunk.size()) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "0x%x", chunk[got].index);
      return Status::FailedPrecondition("KVM_GET_MSRS on vcpu " + std::to_string(vcpu.id()) +
                                        " could not read MSR " + hex);
    }
  }
  return out;
}

Status SetTscFrequency(const VcpuFd& vcpu, uint32_t khz) {
  if (khz == 0) return Status::Ok();  // unknown at capture: keep the host's
  Result<uint32_t> here = vcpu.GetTscKhz();
  if (here.ok()) {
    int64_t diff = std::llabs(static_cast<int64_t>(*here) - static_cast<int64_t>(khz));
    if (diff * 1'000'000 <= static_cast<int64_t>(khz) * kTscTolerancePpm) return Status::Ok();
  }
  Status st = vcpu.SetTscKhz(khz);
  if (!st.ok()) {
    return Status::FailedPrecondition("snapshot TSC runs at " + std::to_string(khz) +
                                      " kHz, this host cannot scale to it: " + st.message());
  }
  return Status::Ok();
}

bool IsDeferred(const kvm_msr_entry& e) { return e.index == kMsrIa32TscDeadline; }

Status SetMsrChunks(const VcpuFd& vcpu, std::span<const kvm_msr_entry> msrs) {
  for (size_t at = 0; at < msrs.size(); at += kMsrChunk) {
    RETURN_IF_ERROR(vcpu.SetMsrs(msrs.subspan(at, std::min(kMsrChunk, msrs.size() - at))));
  }
  return Status::Ok();
}

// Every MSR, then the deferred ones (whatever order the state lists them in).
Status SetMsrsInOrder(const VcpuFd& vcpu, const std::vector<kvm_msr_entry>& msrs) {
  std::vector<kvm_msr_entry> first, last;
  first.reserve(msrs.size());
  for (const kvm_msr_entry& e : msrs) (IsDeferred(e) ? last : first).push_back(e);
  RETURN_IF_ERROR(SetMsrChunks(vcpu, first));
  return SetMsrChunks(vcpu, last);
}

}  // namespace

Result<std::vector<uint32_t>> ReadableMsrs(const Kvm& kvm, const VcpuFd& vcpu) {
  ASSIGN_OR_RETURN(std::vector<uint32_t> all, kvm.MsrIndexList());
  std::vector<uint32_t> readable;
  readable.reserve(all.size());
  size_t at = 0;
  while (at < all.size()) {
    size_t n = std::min(kMsrChunk, all.size() - at);
    std::vector<kvm_msr_entry> chunk(n);
    for (size_t i = 0; i < n; ++i) chunk[i].index = all[at + i];
    ASSIGN_OR_RETURN(size_t got, vcpu.GetMsrs(chunk));
    for (size_t i = 0; i < got; ++i) readable.push_back(all[at + i]);
    at += got;
    if (got < n) ++at;  // KVM stopped at an MSR it cannot read: skip it
  }
  return readable;
}

Status CompletePendingExit(VcpuFd& vcpu) {
  vcpu.SetImmediateExit(true);
  Status st = vcpu.Run();
  vcpu.SetImmediateExit(false);
  if (VcpuFd::IsInterrupted(st)) return Status::Ok();
  if (st.ok()) {
    return Status::Internal("KVM_RUN with immediate_exit returned exit reason " +
                            std::to_string(vcpu.run()->exit_reason) + " instead of EINTR");
  }
  return st;
}

void FixTscDeadline(std::vector<kvm_msr_entry>& msrs) {
  auto tsc = std::find_if(msrs.begin(), msrs.end(),
                          [](const kvm_msr_entry& e) { return e.index == kMsrIa32Tsc; });
  if (tsc != msrs.end()) {
    for (kvm_msr_entry& e : msrs) {
      if (e.index == kMsrIa32TscDeadline && e.data == 0) e.data = tsc->data;
    }
  }
  std::stable_partition(msrs.begin(), msrs.end(), [](const kvm_msr_entry& e) { return !IsDeferred(e); });
}

Result<snapshot::VcpuState> CaptureVcpu(const VcpuFd& vcpu, std::span<const uint32_t> msrs) {
  snapshot::VcpuState s;
  s.id = vcpu.id();
  // MP state first: KVM_GET_MP_STATE processes pending INIT/SIPI, which can
  // change the registers and LAPIC read below.
  ASSIGN_OR_RETURN(s.mp_state, vcpu.GetMpState());
  ASSIGN_OR_RETURN(s.regs, vcpu.GetRegs());
  ASSIGN_OR_RETURN(s.sregs, vcpu.GetSregs());
  ASSIGN_OR_RETURN(s.fpu, vcpu.GetFpu());
  ASSIGN_OR_RETURN(s.xsave, vcpu.GetXsave());
  ASSIGN_OR_RETURN(s.xcrs, vcpu.GetXcrs());
  ASSIGN_OR_RETURN(s.debugregs, vcpu.GetDebugRegs());
  ASSIGN_OR_RETURN(s.lapic, vcpu.GetLapic());
  Result<uint32_t> khz = vcpu.GetTscKhz();
  s.tsc_khz = khz.ok() ? *khz : 0;
  ASSIGN_OR_RETURN(s.cpuid, vcpu.GetCpuid2());
  ASSIGN_OR_RETURN(s.msrs, ReadMsrs(vcpu, msrs));
  FixTscDeadline(s.msrs);
  // Events last: the other GETs may still move pending exceptions/interrupts.
  ASSIGN_OR_RETURN(s.events, vcpu.GetVcpuEvents());
  return s;
}

Result<snapshot::VcpuState> CaptureVcpu(const Kvm& kvm, const VcpuFd& vcpu) {
  ASSIGN_OR_RETURN(std::vector<uint32_t> msrs, ReadableMsrs(kvm, vcpu));
  return CaptureVcpu(vcpu, msrs);
}

Status ApplyVcpu(const VcpuFd& vcpu, const snapshot::VcpuState& s) {
  if (s.id != vcpu.id()) {
    return Status::InvalidArgument("state of vcpu " + std::to_string(s.id) + " applied to vcpu " +
                                   std::to_string(vcpu.id()));
  }
  RETURN_IF_ERROR(SetTscFrequency(vcpu, s.tsc_khz));
  // CPUID first: several setters validate against the guest's features.
  RETURN_IF_ERROR(vcpu.SetCpuid2(s.cpuid));
  RETURN_IF_ERROR(vcpu.SetMpState(s.mp_state));
  // SET_REGS clears pending exceptions, which SET_VCPU_EVENTS restores last.
  RETURN_IF_ERROR(vcpu.SetRegs(s.regs));
  // SREGS carries the APIC base MSR, which SET_LAPIC needs.
  RETURN_IF_ERROR(vcpu.SetSregs(s.sregs));
  RETURN_IF_ERROR(vcpu.SetFpu(s.fpu));
  RETURN_IF_ERROR(vcpu.SetXsave(s.xsave));  // supersedes the FPU bytes
  RETURN_IF_ERROR(vcpu.SetXcrs(s.xcrs));
  RETURN_IF_ERROR(vcpu.SetDebugRegs(s.debugregs));
  // LAPIC before MSRs: the TSC-deadline MSR is only accepted with the LAPIC
  // in TSC-deadline mode; and it goes after IA32_TSC (FixTscDeadline order).
  RETURN_IF_ERROR(vcpu.SetLapic(s.lapic));
  RETURN_IF_ERROR(SetMsrsInOrder(vcpu, s.msrs));
  RETURN_IF_ERROR(vcpu.SetVcpuEvents(s.events));
  Status st = vcpu.KvmclockCtrl();
  if (!st.ok() && st.error_number() != EINVAL) return st;  // EINVAL: guest has no kvmclock
  return Status::Ok();
}

}  // namespace kubicle::vmm::kvm
