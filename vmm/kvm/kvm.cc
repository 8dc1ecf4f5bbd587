#include "vmm/kvm/kvm.h"

#include <fcntl.h>

#include "vmm/kvm/ioctl.h"
#include "vmm/kvm/vm_fd.h"

namespace kubicle::vmm::kvm {

const RequiredCap kRequiredCaps[7] = {
    {KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP"},
    {KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY"},
    {KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"},
    {KVM_CAP_PIT2, "KVM_CAP_PIT2"},
    {KVM_CAP_IRQFD, "KVM_CAP_IRQFD"},
    {KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD"},
    {KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT"},
};

namespace {

// Upper bound for the CPUID buffer: far beyond any real host (KVM's own limit
// is 256), it only stops a misbehaving kernel from making us loop forever.
constexpr size_t kMaxCpuidEntries = 4096;
constexpr size_t kMaxMsrs = 16384;

}  // namespace

Result<Kvm> Kvm::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open " + path);
  Result<Kvm> kvm = FromFd(UniqueFd(fd));
  if (!kvm.ok()) return kvm.status().WithContext(path);
  return kvm;
}

Result<Kvm> Kvm::FromFd(UniqueFd fd) {
  if (!fd.valid()) return Status::InvalidArgument("invalid /dev/kvm fd");
  int version = internal::IoctlRetry(fd.get(), KVM_GET_API_VERSION, 0);
  if (version < 0) return Status::FromErrno("KVM_GET_API_VERSION");
  if (version != kApiVersion) {
    return Status::FailedPrecondition("KVM API version " + std::to_string(version) +
                                      " is not the supported version " +
                                      std::to_string(kApiVersion));
  }
  for (const RequiredCap& c : kRequiredCaps) {
    if (internal::IoctlRetry(fd.get(), KVM_CHECK_EXTENSION, c.cap) <= 0) {
      return Status::FailedPrecondition(std::string("KVM lacks required capability ") + c.name);
    }
  }
  int mmap_size = internal::IoctlRetry(fd.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
  if (mmap_size < 0) return Status::FromErrno("KVM_GET_VCPU_MMAP_SIZE");
  if (static_cast<size_t>(mmap_size) < sizeof(kvm_run)) {
    return Status::FailedPrecondition("KVM vCPU mmap size " + std::to_string(mmap_size) +
                                      " is smaller than struct kvm_run");
  }
  return Kvm(std::move(fd), static_cast<size_t>(mmap_size));
}

int Kvm::CheckExtension(int capability) const {
  int r = internal::IoctlRetry(fd_.get(), KVM_CHECK_EXTENSION, capability);
  return r < 0 ? 0 : r;
}

Result<std::vector<kvm_cpuid_entry2>> Kvm::SupportedCpuid() const {
  for (size_t n = 256; n <= kMaxCpuidEntries; n *= 2) {
    internal::FamBuffer<internal::CpuidHeader, kvm_cpuid_entry2> buf(n);
    buf.header()->nent = static_cast<uint32_t>(n);
    if (internal::IoctlRetry(fd_.get(), internal::kGetSupportedCpuid, buf.header()) == 0) {
      uint32_t got = buf.header()->nent;
      return std::vector<kvm_cpuid_entry2>(buf.entries(), buf.entries() + got);
    }
    if (errno != E2BIG) return Status::FromErrno("KVM_GET_SUPPORTED_CPUID");
  }
  return Status::ResourceExhausted("KVM_GET_SUPPORTED_CPUID needs more than " +
                                   std::to_string(kMaxCpuidEntries) + " entries");
}

Result<std::vector<uint32_t>> Kvm::MsrList(unsigned long request, const char* name) const {
  // The first call with nmsrs = 0 fails with E2BIG and reports the count.
  internal::MsrListHeader probe{};
  if (internal::IoctlRetry(fd_.get(), request, &probe) < 0 && errno != E2BIG) {
    return Status::FromErrno(name);
  }
  size_t n = probe.nmsrs;
  if (n == 0) return std::vector<uint32_t>{};
  if (n > kMaxMsrs) return Status::ResourceExhausted(std::string(name) + " reports too many MSRs");
  internal::FamBuffer<internal::MsrListHeader, uint32_t> buf(n);
  buf.header()->nmsrs = static_cast<uint32_t>(n);
  if (internal::IoctlRetry(fd_.get(), request, buf.header()) < 0) return Status::FromErrno(name);
  uint32_t got = std::min<uint32_t>(buf.header()->nmsrs, static_cast<uint32_t>(n));
  return std::vector<uint32_t>(buf.entries(), buf.entries() + got);
}

Result<std::vector<uint32_t>> Kvm::MsrIndexList() const {
  return MsrList(internal::kGetMsrIndexList, "KVM_GET_MSR_INDEX_LIST");
}

Result<std::vector<uint32_t>> Kvm::FeatureMsrIndexList() const {
  if (CheckExtension(KVM_CAP_GET_MSR_FEATURES) <= 0) return std::vector<uint32_t>{};
  return MsrList(internal::kGetMsrFeatureIndexList, "KVM_GET_MSR_FEATURE_INDEX_LIST");
}

Result<VmFd> Kvm::CreateVm() const {
  int fd;
  do {
    fd = ::ioctl(fd_.get(), KVM_CREATE_VM, 0);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno("KVM_CREATE_VM");
  return VmFd(UniqueFd(fd), vcpu_mmap_size_);
}

}  // namespace kubicle::vmm::kvm
