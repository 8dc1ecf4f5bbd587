// Warm pool of Vm (docs/vmm.md, "Warm pool"): a kubicle-vmm process that has
// built everything a restore needs except the snapshot — KVM VM, irqchip,
// memory slots over a MemoryReservation, vCPU fds, event loop and control
// socket — and waits for a restore request. Registering memory slots
// alone costs milliseconds (KVM waits for an SRCU grace period); here it is
// paid before the request arrives.
#include "common/log.h"
#include "snapshot/snapshot_dir.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/devices/legacy/serial.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

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
  if (req.net) {
    ASSIGN_OR_RETURN(NetFlags net, NetFlagsFor(*req.net, config_.net));
    config_.net = std::move(net);
  }
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(snapshot::SnapshotDir snap, snapshot::SnapshotDir::Open(dir));
  const snapshot::MachineState& s = snap.state();
  if (s.config.memory != reservation_->ranges() || s.config.vcpus != pool_vcpus_.size()) {
    return Status::FailedPrecondition(
        "snapshot is for " + std::to_string(s.config.mem_bytes >> 20) + " MiB and " +
        std::to_string(s.config.vcpus) + " vCPU(s); this pool VM has " +
        std::to_string(config_.mem_bytes >> 20) + " MiB and " + std::to_string(pool_vcpus_.size()));
  }
  for (const snapshot::DiskIndexEntry& d : snap.disks()) {
    if (!d.read_only && config_.layer_dir.empty())
      return Status::InvalidArgument("restore: the snapshot has a writable disk: \"layer_dir\" "
                                     "(or --layer-dir) is required for its overlay");
  }
  // Every device record must decode before anything is built.
  RETURN_IF_ERROR(CheckSavedDevices(s));
  // The workspace's image opens before anything is built, too.
  std::unique_ptr<devices::virtio::BlockBackend> workspace;
  if (req.workspace) {
    ASSIGN_OR_RETURN(workspace, OpenWorkspace(*req.workspace));
  }
  // From here on a failure leaves a half-built VM: the process stops.
  Status st = FinishRestore(snap, std::move(workspace));
  if (!st.ok()) {
    RequestStop(ExitCode::kSetupFailed, "restore failed: " + st.ToString());
    return st;
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start).count();
  log::Info("vm restored from pool", {{"vm", config_.vm_id}, {"snapshot", dir}, {"us", us}});
  return control::RestoreReply{Describe(), us};
}

Status Vm::FinishRestore(const snapshot::SnapshotDir& snap,
                         std::unique_ptr<devices::virtio::BlockBackend> workspace) {
  const snapshot::MachineState& s = snap.state();
  ASSIGN_OR_RETURN(memory_, reservation_->MapFile(snap.memory_path(), s.config.memory));
  reservation_.reset();
  config_.kernel_path = snap.meta().kernel;
  RETURN_IF_ERROR(AttachFromState(s));
  // Before any vCPU runs: the guest finds the config change pending.
  if (workspace) RETURN_IF_ERROR(PlugWorkspace(std::move(workspace)));
  return StartVcpus(std::move(pool_vcpus_));
}

}  // namespace kubicle::vmm
