// Kvm: the /dev/kvm system handle. Opening it checks that this host's KVM
// speaks the stable API (version 12) and has every capability kubicle-vmm
// relies on, so a missing feature is reported once, up front, by name instead
// of failing obscurely later. It answers system-wide queries (supported CPUID,
// MSR lists, vCPU mmap size) and creates VMs.
//
// Contracts: move-only, owns the fd. Thread-safe for concurrent const queries
// (they are plain ioctls). A Kvm may be destroyed before the VMs it created:
// each VM holds its own reference inside the kernel.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm::kvm {

class VmFd;

class Kvm {
 public:
  // KVM_GET_API_VERSION must return this ("stable" API since Linux 2.6.22).
  static constexpr int kApiVersion = 12;

  // Opens path (O_RDWR | O_CLOEXEC) and validates API version and capabilities.
  static Result<Kvm> Open(const std::string& path = "/dev/kvm");
  // Adopts an already open /dev/kvm fd (e.g. inherited across fork) and
  // validates it like Open.
  static Result<Kvm> FromFd(UniqueFd fd);

  Kvm(Kvm&&) noexcept = default;
  Kvm& operator=(Kvm&&) noexcept = default;
  Kvm(const Kvm&) = delete;
  Kvm& operator=(const Kvm&) = delete;

  // KVM_CHECK_EXTENSION: 0 when absent, else a capability-specific value
  // (often 1, sometimes a count or size).
  int CheckExtension(int capability) const;

  // KVM_GET_SUPPORTED_CPUID: every CPUID leaf/subleaf KVM can expose. The
  // buffer grows on E2BIG, so hosts with many leaves are handled.
  Result<std::vector<kvm_cpuid_entry2>> SupportedCpuid() const;
  // KVM_GET_MSR_INDEX_LIST: MSRs that KVM_GET/SET_MSRS accept on a vCPU
  // (the list a snapshot saves).
  Result<std::vector<uint32_t>> MsrIndexList() const;
  // KVM_GET_MSR_FEATURE_INDEX_LIST: feature MSRs (e.g. ARCH_CAPABILITIES)
  // readable on the system fd. Empty when KVM_CAP_GET_MSR_FEATURES is absent.
  Result<std::vector<uint32_t>> FeatureMsrIndexList() const;
  // KVM_GET_VCPU_MMAP_SIZE, cached at open: bytes to mmap per vCPU (kvm_run
  // plus the PIO data page and coalesced-MMIO ring).
  size_t vcpu_mmap_size() const { return vcpu_mmap_size_; }

  // KVM_CREATE_VM (default machine type).
  Result<VmFd> CreateVm() const;

  int fd() const { return fd_.get(); }

 private:
  Kvm(UniqueFd fd, size_t mmap_size) : fd_(std::move(fd)), vcpu_mmap_size_(mmap_size) {}
  Result<std::vector<uint32_t>> MsrList(unsigned long request, const char* name) const;

  UniqueFd fd_;
  size_t vcpu_mmap_size_ = 0;
};

// Capabilities kubicle-vmm requires, with their names for error messages.
struct RequiredCap {
  int cap;
  const char* name;
};
extern const RequiredCap kRequiredCaps[7];

}  // namespace kubicle::vmm::kvm
