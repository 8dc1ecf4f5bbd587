#include "vmm/kvm/vcpu_fd.h"

#include <cstring>
#include <string>

#include "vmm/kvm/ioctl.h"

namespace kubicle::vmm::kvm {
namespace {

constexpr size_t kMaxCpuidEntries = 4096;
constexpr size_t kLegacyXsaveSize = sizeof(internal::XsaveFixed);  // 4096

std::string HexMsr(uint32_t index) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%x", index);
  return buf;
}

}  // namespace

VcpuFd::VcpuFd(UniqueFd fd, MmapRegion run, uint32_t id, size_t xsave_size)
    : fd_(std::move(fd)), run_(std::move(run)), id_(id), xsave_size_(xsave_size) {}

Status VcpuFd::Errno(const char* name) const {
  return Status::FromErrno(std::string(name) + " on vcpu " + std::to_string(id_));
}

template <typename T>
Result<T> VcpuFd::Get(unsigned long request, const char* name) const {
  T value{};
  if (internal::IoctlRetry(fd_.get(), request, &value) < 0) return Errno(name);
  return value;
}

template <typename T>
Status VcpuFd::Set(unsigned long request, const T& value, const char* name) const {
  T copy = value;  // several KVM setters take a non-const pointer
  if (internal::IoctlRetry(fd_.get(), request, &copy) < 0) return Errno(name);
  return Status::Ok();
}

Status VcpuFd::Run() {
  // No EINTR retry here: an interrupted KVM_RUN is how other threads pause us.
  if (::ioctl(fd_.get(), KVM_RUN, 0) == 0) return Status::Ok();
  int err = errno;
  if (err == EINTR) {
    return Status(StatusCode::kUnavailable, "KVM_RUN on vcpu " + std::to_string(id_) + " interrupted",
                  EINTR);
  }
  return Status::FromErrno("KVM_RUN on vcpu " + std::to_string(id_), err);
}

void VcpuFd::SetImmediateExit(bool on) const {
  __atomic_store_n(&run()->immediate_exit, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

Result<kvm_regs> VcpuFd::GetRegs() const { return Get<kvm_regs>(KVM_GET_REGS, "KVM_GET_REGS"); }
Status VcpuFd::SetRegs(const kvm_regs& r) const { return Set(KVM_SET_REGS, r, "KVM_SET_REGS"); }
Result<kvm_sregs> VcpuFd::GetSregs() const { return Get<kvm_sregs>(KVM_GET_SREGS, "KVM_GET_SREGS"); }
Status VcpuFd::SetSregs(const kvm_sregs& s) const { return Set(KVM_SET_SREGS, s, "KVM_SET_SREGS"); }
Result<kvm_fpu> VcpuFd::GetFpu() const { return Get<kvm_fpu>(KVM_GET_FPU, "KVM_GET_FPU"); }
Status VcpuFd::SetFpu(const kvm_fpu& f) const { return Set(KVM_SET_FPU, f, "KVM_SET_FPU"); }

Result<size_t> VcpuFd::GetMsrs(std::span<kvm_msr_entry> entries) const {
  if (entries.empty()) return size_t{0};
  internal::FamBuffer<internal::MsrsHeader, kvm_msr_entry> buf(entries.size());
  buf.header()->nmsrs = static_cast<uint32_t>(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) buf.entries()[i].index = entries[i].index;
  int n = internal::IoctlRetry(fd_.get(), internal::kGetMsrs, buf.header());
  if (n < 0) return Errno("KVM_GET_MSRS");
  size_t got = std::min(static_cast<size_t>(n), entries.size());
  for (size_t i = 0; i < got; ++i) entries[i].data = buf.entries()[i].data;
  return got;
}

Status VcpuFd::SetMsrs(std::span<const kvm_msr_entry> entries) const {
  if (entries.empty()) return Status::Ok();
  internal::FamBuffer<internal::MsrsHeader, kvm_msr_entry> buf(entries.size());
  buf.header()->nmsrs = static_cast<uint32_t>(entries.size());
  std::memcpy(buf.entries(), entries.data(), entries.size_bytes());
  int n = internal::IoctlRetry(fd_.get(), internal::kSetMsrs, buf.header());
  if (n < 0) return Errno("KVM_SET_MSRS");
  if (static_cast<size_t>(n) < entries.size()) {
    return Status::InvalidArgument("KVM_SET_MSRS on vcpu " + std::to_string(id_) +
                                   " rejected MSR " + HexMsr(entries[n].index) + " (" +
                                   std::to_string(n) + " of " + std::to_string(entries.size()) +
                                   " set)");
  }
  return Status::Ok();
}

Result<std::vector<kvm_cpuid_entry2>> VcpuFd::GetCpuid2() const {
  for (size_t n = 64; n <= kMaxCpuidEntries; n *= 2) {
    internal::FamBuffer<internal::CpuidHeader, kvm_cpuid_entry2> buf(n);
    buf.header()->nent = static_cast<uint32_t>(n);
    if (internal::IoctlRetry(fd_.get(), internal::kGetCpuid2, buf.header()) == 0) {
      uint32_t got = std::min<uint32_t>(buf.header()->nent, static_cast<uint32_t>(n));
      return std::vector<kvm_cpuid_entry2>(buf.entries(), buf.entries() + got);
    }
    if (errno != E2BIG) return Errno("KVM_GET_CPUID2");
  }
  return Status::ResourceExhausted("KVM_GET_CPUID2: too many entries");
}

Status VcpuFd::SetCpuid2(std::span<const kvm_cpuid_entry2> entries) const {
  internal::FamBuffer<internal::CpuidHeader, kvm_cpuid_entry2> buf(entries.size());
  buf.header()->nent = static_cast<uint32_t>(entries.size());
  if (!entries.empty()) std::memcpy(buf.entries(), entries.data(), entries.size_bytes());
  if (internal::IoctlRetry(fd_.get(), internal::kSetCpuid2, buf.header()) < 0) {
    return Errno("KVM_SET_CPUID2");
  }
  return Status::Ok();
}

Result<kvm_lapic_state> VcpuFd::GetLapic() const {
  return Get<kvm_lapic_state>(KVM_GET_LAPIC, "KVM_GET_LAPIC");
}
Status VcpuFd::SetLapic(const kvm_lapic_state& l) const {
  return Set(KVM_SET_LAPIC, l, "KVM_SET_LAPIC");
}
Result<kvm_mp_state> VcpuFd::GetMpState() const {
  return Get<kvm_mp_state>(KVM_GET_MP_STATE, "KVM_GET_MP_STATE");
}
Status VcpuFd::SetMpState(const kvm_mp_state& s) const {
  return Set(KVM_SET_MP_STATE, s, "KVM_SET_MP_STATE");
}
Result<kvm_vcpu_events> VcpuFd::GetVcpuEvents() const {
  return Get<kvm_vcpu_events>(KVM_GET_VCPU_EVENTS, "KVM_GET_VCPU_EVENTS");
}
Status VcpuFd::SetVcpuEvents(const kvm_vcpu_events& e) const {
  return Set(KVM_SET_VCPU_EVENTS, e, "KVM_SET_VCPU_EVENTS");
}
Result<kvm_xcrs> VcpuFd::GetXcrs() const { return Get<kvm_xcrs>(KVM_GET_XCRS, "KVM_GET_XCRS"); }
Status VcpuFd::SetXcrs(const kvm_xcrs& x) const { return Set(KVM_SET_XCRS, x, "KVM_SET_XCRS"); }
Result<kvm_debugregs> VcpuFd::GetDebugRegs() const {
  return Get<kvm_debugregs>(KVM_GET_DEBUGREGS, "KVM_GET_DEBUGREGS");
}
Status VcpuFd::SetDebugRegs(const kvm_debugregs& d) const {
  return Set(KVM_SET_DEBUGREGS, d, "KVM_SET_DEBUGREGS");
}

Result<std::vector<uint8_t>> VcpuFd::GetXsave() const {
  bool xsave2 = xsave_size_ > kLegacyXsaveSize;
  std::vector<uint8_t> area(xsave2 ? xsave_size_ : kLegacyXsaveSize);
  unsigned long request = xsave2 ? internal::kGetXsave2 : internal::kGetXsave;
  if (internal::IoctlRetry(fd_.get(), request, area.data()) < 0) {
    return Errno(xsave2 ? "KVM_GET_XSAVE2" : "KVM_GET_XSAVE");
  }
  return area;
}

Status VcpuFd::SetXsave(std::span<const uint8_t> xsave) const {
  if (xsave.size() < kLegacyXsaveSize) {
    return Status::InvalidArgument("XSAVE area of " + std::to_string(xsave.size()) +
                                   " bytes is smaller than 4096");
  }
  // KVM reads max(4096, KVM_CAP_XSAVE2) bytes: pad a shorter saved area.
  std::vector<uint8_t> area(std::max({xsave.size(), xsave_size_, kLegacyXsaveSize}), 0);
  std::memcpy(area.data(), xsave.data(), xsave.size());
  if (internal::IoctlRetry(fd_.get(), internal::kSetXsave, area.data()) < 0) {
    return Errno("KVM_SET_XSAVE");
  }
  return Status::Ok();
}

Result<uint32_t> VcpuFd::GetTscKhz() const {
  int khz = internal::IoctlRetry(fd_.get(), KVM_GET_TSC_KHZ, 0);
  if (khz < 0) return Errno("KVM_GET_TSC_KHZ");
  return static_cast<uint32_t>(khz);
}

Status VcpuFd::SetTscKhz(uint32_t khz) const {
  if (internal::IoctlRetry(fd_.get(), KVM_SET_TSC_KHZ, static_cast<unsigned long>(khz)) < 0) {
    return Errno("KVM_SET_TSC_KHZ");
  }
  return Status::Ok();
}

Status VcpuFd::KvmclockCtrl() const {
  if (internal::IoctlRetry(fd_.get(), KVM_KVMCLOCK_CTRL, 0) < 0) return Errno("KVM_KVMCLOCK_CTRL");
  return Status::Ok();
}

}  // namespace kubicle::vmm::kvm
