// Warm pool of Vm (docs/vmm.md, "Warm pool"): a kubicle-vmm process that has
// built everything a restore needs except the snapshot — KVM VM, irqchip,
// memory slots over a MemoryReservation, vCPU fds, event loop and control
// socket — and waits for a restore request. Registering memory slots
// alone costs milliseconds (KVM waits for an SRCU grace period); here it is
// paid before the request arrives.
#include "common/log.h"
#include "snapshot/memory_reservation.h"
#include "snapshot/snapshot_dir.h"
#include "snapshot/vm_state.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/devices/legacy/serial.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

Result<std::unique_ptr<Vm>> Vm::CreatePooled(const VmmConfig& config) {
  if (config.control_path.empty())
    return Status::InvalidArgument("pool: --control is required (restore requests come there)");
  std::unique_ptr<Vm> vm(new Vm(config));
  vm->pooled_ = true;
  ASSIGN_OR_RETURN(kvm::Kvm kvm, kvm::Kvm::Open());
  vm->kvm_.emplace(std::move(kvm));
  ASSIGN_OR_RETURN(kvm::VmFd vm_fd, vm->kvm_->CreateVm());
  vm->vm_fd_.emplace(std::move(vm_fd));
  RETURN_IF_ERROR(arch::ConfigureVm(*vm->vm_fd_));
  RETURN_IF_ERROR(arch::ValidateMemorySize(config.mem_bytes));
  std::vector<snapshot::MemoryRange> ranges;
  for (const auto& r : arch::MemoryRanges(config.mem_bytes)) ranges.push_back({r.base, r.size});
  ASSIGN_OR_RETURN(snapshot::MemoryReservation reservation, snapshot::MemoryReservation::Create(ranges));
  RETURN_IF_ERROR(reservation.RegisterWith(*vm->vm_fd_));
  vm->reservation_ = std::make_unique<snapshot::MemoryReservation>(std::move(reservation));
  for (int i = 0; i < config.vcpus; ++i) {
    ASSIGN_OR_RETURN(kvm::VcpuFd fd, vm->vm_fd_->CreateVcpu(static_cast<uint32_t>(i)));
    vm->pool_vcpus_.push_back(std::move(fd));
  }
  ASSIGN_OR_RETURN(vm->loop_, EventLoop::Create());
  RETURN_IF_ERROR(vm->AttachControlSocket());
  return vm;
}

Result<control::RestoreReply> Vm::RestoreFromPool(const control::RestoreRequest& req) {
  if (!reservation_) return Status::FailedPrecondition("this VM is already restored");
  // The request was decoded and validated (control_protocol.h): paths are
  // strings, the CID obeys the one CID rule.
  const std::string& dir = req.snapshot;
  if (req.vsock_uds) config_.vsock_uds = *req.vsock_uds;
  if (req.serial) config_.serial_path = *req.serial;
  if (req.id) config_.vm_id = *req.id;
  if (req.layer_dir) config_.layer_dir = *req.layer_dir;
  if (req.cid) config_.guest_cid = *req.cid;
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(snapshot::SnapshotDir snap, snapshot::SnapshotDir::Open(dir));
  const snapshot::MachineState& s = snap.state();
  if (s.config.memory != reservation_->ranges() || s.config.vcpus != pool_vcpus_.size()) {
    return Status::FailedPrecondition(
        "snapshot is for " + std::to_string(s.config.mem_bytes >> 20) + " MiB and " +
        std::to_string(s.config.vcpus) + " vCPU(s); this pool VM has " +
        std::to_string(config_.mem_bytes >> 20) + " MiB and " + std::to_string(pool_vcpus_.size()));
  }
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    if (d.kind == snapshot::DeviceKind::kVirtioBlock && !d.block.read_only && config_.layer_dir.empty())
      return Status::InvalidArgument("restore: the snapshot has a writable disk: \"layer_dir\" "
                                     "(or --layer-dir) is required for its overlay");
  }
  // From here on a failure leaves a half-built VM: the process stops.
  Status st = FinishRestore(snap);
  if (!st.ok()) {
    RequestStop(ExitCode::kSetupFailed, "restore failed: " + st.ToString());
    return st;
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start).count();
  log::Info("vm restored from pool", {{"vm", config_.vm_id}, {"snapshot", dir}, {"us", us}});
  return control::RestoreReply{Describe(), us};
}

Status Vm::FinishRestore(const snapshot::SnapshotDir& snap) {
  const snapshot::MachineState& s = snap.state();
  ASSIGN_OR_RETURN(memory_, reservation_->MapFile(snap.memory_path(), s.config.memory));
  reservation_.reset();
  config_.kernel_path = snap.meta().kernel;
  RETURN_IF_ERROR(snapshot::ApplyVm(*vm_fd_, s.vm));
  RETURN_IF_ERROR(AttachLegacyDevices());
  if (s.serial) serial_->SetState(*s.serial);
  RETURN_IF_ERROR(AttachRestoredVirtio(s));
  kernel_cmdline_ = s.config.cmdline;
  restore_state_ = std::make_unique<snapshot::MachineState>(s);
  return StartVcpus(std::move(pool_vcpus_));
}

}  // namespace kubicle::vmm
