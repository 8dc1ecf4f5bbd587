// The builders of Vm (docs/vmm.md, "Build order"): boot, restore, warm pool
// and fork child. Each is a short sequence of the same steps:
//
//   BuildBase        KVM VM, irqchip/PIT/TSS, memory slots, event loop
//   (boot)           legacy and virtio devices from the config, kernel
//   AttachFromState  (restore, pool restore, fork) VM-wide KVM state, the
//                    serial and virtio devices from a captured state
//   AttachControlSocket
//
// so a change to how a KVM VM is set up, or to how a device comes back from
// a snapshot, is made once for all four.
#include <future>

#include "snapshot/snapshot_dir.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/kvm/vm_state.h"
#include "vmm/memory_reservation.h"
#include "vmm/vm.h"

namespace kubicle::vmm {
namespace {

int64_t MicrosSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

std::vector<snapshot::MemoryRange> SnapshotRanges(uint64_t mem_bytes) {
  std::vector<snapshot::MemoryRange> out;
  for (const auto& r : arch::MemoryRanges(mem_bytes)) out.push_back({r.base, r.size});
  return out;
}

}  // namespace

Status Vm::BuildBase(const std::function<Status(const kvm::VmFd&)>& register_slots,
                     BaseTimings* timings) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(kvm::Kvm kvm, kvm::Kvm::Open());
  kvm_.emplace(std::move(kvm));
  ASSIGN_OR_RETURN(kvm::VmFd vm_fd, kvm_->CreateVm());
  vm_fd_.emplace(std::move(vm_fd));
  // Registering the memory slots waits for an SRCU grace period of the new
  // VM; so does the irqchip's routing table (another SRCU). Run them side by
  // side instead of one after the other (docs/vmm.md, "Fork").
  const auto slots_started = std::chrono::steady_clock::now();
  int64_t slots_us = 0;
  std::future<Status> slots = std::async(std::launch::async, [&] {
    Status st = register_slots(*vm_fd_);
    slots_us = MicrosSince(slots_started);
    return st;
  });
  Status configured = arch::ConfigureVm(*vm_fd_);
  Status registered = slots.get();
  if (timings != nullptr) {
    timings->kvm_vm_us = MicrosSince(start);
    timings->slots_us = slots_us;
  }
  RETURN_IF_ERROR(configured);
  RETURN_IF_ERROR(registered);
  ASSIGN_OR_RETURN(loop_, EventLoop::Create());
  return Status::Ok();
}

Status Vm::AttachFromState(const snapshot::MachineState& s) {
  RETURN_IF_ERROR(kvm::ApplyVm(*vm_fd_, s.vm));
  RETURN_IF_ERROR(AttachSavedDevices(s));
  kernel_cmdline_ = s.config.cmdline;  // AttachVirtio appended the devices again
  // vCPUs start from this state instead of boot registers (SetupVcpu).
  restore_state_ = std::make_unique<snapshot::MachineState>(s);
  return Status::Ok();
}

// ---- boot ----

Result<std::unique_ptr<Vm>> Vm::Create(const LaunchSpec& config) {
  std::unique_ptr<Vm> vm(new Vm(config));
  RETURN_IF_ERROR(vm->BuildBooted());
  return vm;
}

Status Vm::BuildBooted() {
  RETURN_IF_ERROR(arch::ValidateMemorySize(config_.mem_bytes));
  ASSIGN_OR_RETURN(memory_, GuestMemory::CreateAnonymous(arch::MemoryRanges(config_.mem_bytes)));
  RETURN_IF_ERROR(BuildBase(
      [this](const kvm::VmFd& vm) { return arch::RegisterGuestMemory(vm, *memory_); }));
  ASSIGN_OR_RETURN(supported_cpuid_, kvm_->SupportedCpuid());

  kernel_cmdline_ = config_.cmdline;
  RETURN_IF_ERROR(AttachLegacyDevices());
  RETURN_IF_ERROR(AttachVirtioDevices());

  arch::BootConfig boot{config_.kernel_path, std::nullopt, kernel_cmdline_,
                        static_cast<uint32_t>(config_.vcpus)};
  if (!config_.initrd_path.empty()) boot.initrd_path = config_.initrd_path;
  ASSIGN_OR_RETURN(boot_, arch::ConfigureBoot(*memory_, boot));
  return AttachControlSocket();
}

// ---- restore into a new process ----

Result<std::unique_ptr<Vm>> Vm::Restore(const LaunchSpec& config) {
  std::unique_ptr<Vm> vm(new Vm(config));
  RETURN_IF_ERROR(vm->BuildRestored());
  return vm;
}

// The snapshot first: a damaged one fails here, before KVM or any socket or
// file is touched. Then the machine of its shape, its memory file mapped
// MAP_PRIVATE over the registered slots, and its devices.
Status Vm::BuildRestored() {
  ASSIGN_OR_RETURN(snapshot::SnapshotDir snap, snapshot::SnapshotDir::Open(config_.snapshot_path));
  const snapshot::MachineState& s = snap.state();
  RETURN_IF_ERROR(CheckSavedDevices(s));
  config_.mem_bytes = s.config.mem_bytes;
  config_.vcpus = static_cast<int>(s.config.vcpus);
  if (config_.kernel_path.empty()) config_.kernel_path = snap.meta().kernel;

  ASSIGN_OR_RETURN(MemoryReservation reservation,
                   MemoryReservation::Create(s.config.memory));
  RETURN_IF_ERROR(BuildBase([&](const kvm::VmFd& vm) { return reservation.RegisterWith(vm); }));
  ASSIGN_OR_RETURN(memory_, reservation.MapFile(snap.memory_path(), s.config.memory));
  RETURN_IF_ERROR(AttachFromState(s));
  return AttachControlSocket();
}

// ---- warm pool ----

Result<std::unique_ptr<Vm>> Vm::CreatePooled(const LaunchSpec& config) {
  if (config.control_path.empty())
    return Status::InvalidArgument("pool: --control is required (restore requests come there)");
  std::unique_ptr<Vm> vm(new Vm(config));
  RETURN_IF_ERROR(vm->BuildPooled());
  return vm;
}

// Everything a restore needs but the snapshot (vm_pool.cc finishes it).
Status Vm::BuildPooled() {
  pooled_ = true;
  RETURN_IF_ERROR(arch::ValidateMemorySize(config_.mem_bytes));
  ASSIGN_OR_RETURN(MemoryReservation reservation,
                   MemoryReservation::Create(SnapshotRanges(config_.mem_bytes)));
  reservation_ = std::make_unique<MemoryReservation>(std::move(reservation));
  RETURN_IF_ERROR(
      BuildBase([this](const kvm::VmFd& vm) { return reservation_->RegisterWith(vm); }));
  for (int i = 0; i < config_.vcpus; ++i) {
    ASSIGN_OR_RETURN(kvm::VcpuFd fd, vm_fd_->CreateVcpu(static_cast<uint32_t>(i)));
    pool_vcpus_.push_back(std::move(fd));
  }
  return AttachControlSocket();
}

// ---- fork child (vm_fork.cc) ----

// memory_ is the parent's guest memory, inherited copy-on-write.
Status Vm::BuildForked(const snapshot::MachineState& s, ForkTimings* t) {
  BaseTimings base;
  RETURN_IF_ERROR(BuildBase(
      [this](const kvm::VmFd& vm) { return arch::RegisterGuestMemory(vm, *memory_); }, &base));
  t->kvm_vm_us = base.kvm_vm_us;
  t->slots_us = base.slots_us;
  const auto mark = std::chrono::steady_clock::now();
  Status st = AttachFromState(s);
  if (st.ok()) st = AttachControlSocket();
  t->devices_us = MicrosSince(mark);
  return st;
}

}  // namespace kubicle::vmm
