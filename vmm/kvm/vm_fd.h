// VmFd: one KVM virtual machine (the fd from KVM_CREATE_VM). Wraps the VM
// ioctls kubicle-vmm uses to build a machine (memory slots, in-kernel irqchip
// and PIT, irqfd/ioeventfd) and to save and restore it (clock, irqchip and
// PIT state). Every call returns a Status naming the ioctl and errno.
//
// Contracts: move-only, owns the fd; closing it (destruction) tears the VM
// down in the kernel, which costs ~15 ms on our hosts, so callers that care
// destroy it off the critical path. Calls are plain ioctls and may be made
// from any thread; KVM serialises them internally.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <optional>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::vmm::kvm {

class VcpuFd;

class VmFd {
 public:
  VmFd(UniqueFd fd, size_t vcpu_mmap_size) : fd_(std::move(fd)), vcpu_mmap_size_(vcpu_mmap_size) {}
  VmFd(VmFd&&) noexcept = default;
  VmFd& operator=(VmFd&&) noexcept = default;
  VmFd(const VmFd&) = delete;
  VmFd& operator=(const VmFd&) = delete;

  // KVM_CHECK_EXTENSION on the VM fd (the VM-specific answer, e.g. the
  // XSAVE2 buffer size or KVM_CAP_NR_MEMSLOTS).
  int CheckExtension(int capability) const;

  // KVM_SET_TSS_ADDR: three pages of guest-physical space, outside RAM, that
  // Intel VMX needs for real-mode emulation.
  Status SetTssAddress(uint64_t addr) const;
  // KVM_SET_IDENTITY_MAP_ADDR: one page, outside RAM, below the TSS pages.
  Status SetIdentityMapAddress(uint64_t addr) const;
  // KVM_CREATE_IRQCHIP: in-kernel PIC pair, IOAPIC and per-vCPU LAPICs.
  // Must precede CreateVcpu.
  Status CreateIrqchip() const;
  // KVM_CREATE_PIT2 with KVM_PIT_SPEAKER_DUMMY (port 0x61 reads sanely).
  Status CreatePit2() const;

  // KVM_SET_USER_MEMORY_REGION. host must stay mapped while the slot exists.
  // flags: 0, KVM_MEM_LOG_DIRTY_PAGES or KVM_MEM_READONLY. size 0 deletes.
  Status SetUserMemoryRegion(uint32_t slot, uint64_t guest_addr, uint64_t size, void* host,
                             uint32_t flags = 0) const;

  // KVM_IRQFD: a write to eventfd raises gsi (edge). Unregister removes it.
  Status RegisterIrqfd(int eventfd, uint32_t gsi) const;
  Status UnregisterIrqfd(int eventfd, uint32_t gsi) const;
  // KVM_IOEVENTFD: a guest write of len bytes (1, 2, 4, 8; 0 = any length)
  // to MMIO addr signals eventfd without exiting to userspace. With
  // datamatch only writes of that value match. pio selects port I/O.
  Status RegisterIoeventfd(int eventfd, uint64_t addr, uint32_t len,
                           std::optional<uint64_t> datamatch = std::nullopt,
                           bool pio = false) const;
  Status UnregisterIoeventfd(int eventfd, uint64_t addr, uint32_t len,
                             std::optional<uint64_t> datamatch = std::nullopt,
                             bool pio = false) const;
  // KVM_IRQ_LINE: sets the level of gsi on the in-kernel irqchip.
  Status SetIrqLine(uint32_t gsi, bool level) const;

  // KVM_GET/SET_CLOCK: the kvmclock epoch. Restore sets it (with
  // KVM_CLOCK_REALTIME in flags where supported) so guest time continues.
  Result<kvm_clock_data> GetClock() const;
  Status SetClock(const kvm_clock_data& clock) const;
  // KVM_GET/SET_IRQCHIP for chip_id KVM_IRQCHIP_PIC_MASTER, _PIC_SLAVE or
  // _IOAPIC.
  Result<kvm_irqchip> GetIrqchip(uint32_t chip_id) const;
  Status SetIrqchip(const kvm_irqchip& chip) const;
  // KVM_GET/SET_PIT2.
  Result<kvm_pit_state2> GetPit2() const;
  Status SetPit2(const kvm_pit_state2& pit) const;

  // KVM_CREATE_VCPU and mmap of its kvm_run area. id is the APIC id.
  Result<VcpuFd> CreateVcpu(uint32_t id) const;

  int fd() const { return fd_.get(); }

 private:
  Status Ioeventfd(int eventfd, uint64_t addr, uint32_t len, std::optional<uint64_t> datamatch,
                   bool pio, bool deassign) const;
  Status Irqfd(int eventfd, uint32_t gsi, bool deassign) const;

  UniqueFd fd_;
  size_t vcpu_mmap_size_ = 0;
};

}  // namespace kubicle::vmm::kvm
