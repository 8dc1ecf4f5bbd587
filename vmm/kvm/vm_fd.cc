#include "vmm/kvm/vm_fd.h"

#include <string>

#include "vmm/kvm/ioctl.h"
#include "vmm/kvm/vcpu_fd.h"

namespace kubicle::vmm::kvm {
namespace {

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Runs a VM ioctl and turns failure into "NAME: strerror".
template <typename Arg>
Status Do(int fd, unsigned long request, Arg arg, const std::string& name) {
  if (internal::IoctlRetry(fd, request, arg) < 0) return Status::FromErrno(name);
  return Status::Ok();
}

}  // namespace

int VmFd::CheckExtension(int capability) const {
  int r = internal::IoctlRetry(fd_.get(), KVM_CHECK_EXTENSION, capability);
  return r < 0 ? 0 : r;
}

Status VmFd::SetTssAddress(uint64_t addr) const {
  return Do(fd_.get(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(addr),
            "KVM_SET_TSS_ADDR " + Hex(addr));
}

Status VmFd::SetIdentityMapAddress(uint64_t addr) const {
  uint64_t a = addr;
  return Do(fd_.get(), KVM_SET_IDENTITY_MAP_ADDR, &a, "KVM_SET_IDENTITY_MAP_ADDR " + Hex(addr));
}

Status VmFd::CreateIrqchip() const { return Do(fd_.get(), KVM_CREATE_IRQCHIP, 0, "KVM_CREATE_IRQCHIP"); }

Status VmFd::CreatePit2() const {
  kvm_pit_config config{};
  config.flags = KVM_PIT_SPEAKER_DUMMY;
  return Do(fd_.get(), KVM_CREATE_PIT2, &config, "KVM_CREATE_PIT2");
}

Status VmFd::SetUserMemoryRegion(uint32_t slot, uint64_t guest_addr, uint64_t size, void* host,
                                 uint32_t flags) const {
  kvm_userspace_memory_region region{};
  region.slot = slot;
  region.flags = flags;
  region.guest_phys_addr = guest_addr;
  region.memory_size = size;
  region.userspace_addr = reinterpret_cast<uint64_t>(host);
  return Do(fd_.get(), KVM_SET_USER_MEMORY_REGION, &region,
            "KVM_SET_USER_MEMORY_REGION slot " + std::to_string(slot) + " at " + Hex(guest_addr) +
                " size " + Hex(size));
}

Status VmFd::Irqfd(int eventfd, uint32_t gsi, bool deassign) const {
  kvm_irqfd irqfd{};
  irqfd.fd = static_cast<uint32_t>(eventfd);
  irqfd.gsi = gsi;
  irqfd.flags = deassign ? KVM_IRQFD_FLAG_DEASSIGN : 0;
  return Do(fd_.get(), KVM_IRQFD, &irqfd,
            std::string(deassign ? "KVM_IRQFD deassign" : "KVM_IRQFD") + " gsi " +
                std::to_string(gsi));
}

Status VmFd::RegisterIrqfd(int eventfd, uint32_t gsi) const { return Irqfd(eventfd, gsi, false); }
Status VmFd::UnregisterIrqfd(int eventfd, uint32_t gsi) const { return Irqfd(eventfd, gsi, true); }

Status VmFd::Ioeventfd(int eventfd, uint64_t addr, uint32_t len, std::optional<uint64_t> datamatch,
                       bool pio, bool deassign) const {
  if (len != 0 && len != 1 && len != 2 && len != 4 && len != 8) {
    return Status::InvalidArgument("ioeventfd length " + std::to_string(len) +
                                   " is not 0, 1, 2, 4 or 8");
  }
  kvm_ioeventfd io{};
  io.addr = addr;
  io.len = len;
  io.fd = eventfd;
  if (datamatch) {
    io.flags |= KVM_IOEVENTFD_FLAG_DATAMATCH;
    io.datamatch = *datamatch;
  }
  if (pio) io.flags |= KVM_IOEVENTFD_FLAG_PIO;
  if (deassign) io.flags |= KVM_IOEVENTFD_FLAG_DEASSIGN;
  return Do(fd_.get(), KVM_IOEVENTFD, &io,
            std::string(deassign ? "KVM_IOEVENTFD deassign " : "KVM_IOEVENTFD ") + Hex(addr));
}

Status VmFd::RegisterIoeventfd(int eventfd, uint64_t addr, uint32_t len,
                               std::optional<uint64_t> datamatch, bool pio) const {
  return Ioeventfd(eventfd, addr, len, datamatch, pio, false);
}

Status VmFd::UnregisterIoeventfd(int eventfd, uint64_t addr, uint32_t len,
                                 std::optional<uint64_t> datamatch, bool pio) const {
  return Ioeventfd(eventfd, addr, len, datamatch, pio, true);
}

Status VmFd::SetIrqLine(uint32_t gsi, bool level) const {
  kvm_irq_level irq{};
  irq.irq = gsi;
  irq.level = level ? 1 : 0;
  return Do(fd_.get(), KVM_IRQ_LINE, &irq, "KVM_IRQ_LINE gsi " + std::to_string(gsi));
}

Result<kvm_clock_data> VmFd::GetClock() const {
  kvm_clock_data clock{};
  RETURN_IF_ERROR(Do(fd_.get(), KVM_GET_CLOCK, &clock, "KVM_GET_CLOCK"));
  return clock;
}

Status VmFd::SetClock(const kvm_clock_data& clock) const {
  kvm_clock_data c = clock;
  return Do(fd_.get(), KVM_SET_CLOCK, &c, "KVM_SET_CLOCK");
}

Result<kvm_irqchip> VmFd::GetIrqchip(uint32_t chip_id) const {
  kvm_irqchip chip{};
  chip.chip_id = chip_id;
  RETURN_IF_ERROR(Do(fd_.get(), KVM_GET_IRQCHIP, &chip, "KVM_GET_IRQCHIP " + std::to_string(chip_id)));
  return chip;
}

Status VmFd::SetIrqchip(const kvm_irqchip& chip) const {
  kvm_irqchip c = chip;
  return Do(fd_.get(), KVM_SET_IRQCHIP, &c, "KVM_SET_IRQCHIP " + std::to_string(chip.chip_id));
}

Result<kvm_pit_state2> VmFd::GetPit2() const {
  kvm_pit_state2 pit{};
  RETURN_IF_ERROR(Do(fd_.get(), KVM_GET_PIT2, &pit, "KVM_GET_PIT2"));
  return pit;
}

Status VmFd::SetPit2(const kvm_pit_state2& pit) const {
  kvm_pit_state2 p = pit;
  return Do(fd_.get(), KVM_SET_PIT2, &p, "KVM_SET_PIT2");
}

Result<VcpuFd> VmFd::CreateVcpu(uint32_t id) const {
  int fd = internal::IoctlRetry(fd_.get(), KVM_CREATE_VCPU, static_cast<unsigned long>(id));
  if (fd < 0) return Status::FromErrno("KVM_CREATE_VCPU " + std::to_string(id));
  UniqueFd vcpu(fd);
  ASSIGN_OR_RETURN(MmapRegion run, MmapRegion::MapFile(vcpu.get(), vcpu_mmap_size_,
                                                        PROT_READ | PROT_WRITE, MAP_SHARED));
  // KVM_CAP_XSAVE2 returns the buffer size KVM_GET_XSAVE2 needs (>= 4096);
  // 0 means the host only has the fixed 4 KiB KVM_GET_XSAVE.
  int xsave_size = CheckExtension(KVM_CAP_XSAVE2);
  return VcpuFd(std::move(vcpu), std::move(run), id, static_cast<size_t>(xsave_size));
}

}  // namespace kubicle::vmm::kvm
