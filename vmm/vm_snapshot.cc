// Snapshot of Vm (docs/vmm.md, "Snapshots and restore"): capture of a paused
// machine into a snapshot directory, and the devices of a machine rebuilt
// from a captured state (the builders that use it are in vm_build.cc).
// Device state is read on the event-loop thread (the control command runs
// there), vCPU state on each vCPU's own thread.
#include <mutex>

#include "common/log.h"
#include "snapshot/snapshot_dir.h"
#include "vmm/devices/legacy/serial.h"
#include "vmm/devices/legacy/serial_persist.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/net.h"
#include "vmm/devices/virtio/net_tap.h"
#include "vmm/devices/virtio/persist.h"
#include "vmm/kvm/vcpu_state.h"
#include "vmm/kvm/vm_state.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace virtio = devices::virtio;
namespace legacy = devices::legacy;

namespace {

// Guest memory as the snapshot layer reads it.
std::vector<snapshot::MemoryRegion> MemoryView(const GuestMemory& memory) {
  std::vector<snapshot::MemoryRegion> out;
  for (const GuestRegion& r : memory.regions()) out.push_back({r.guest_base, r.size, r.host});
  return out;
}

}  // namespace

Result<snapshot::MachineState> Vm::CaptureState() {
  snapshot::MachineState s;
  s.config.mem_bytes = config_.mem_bytes;
  s.config.vcpus = static_cast<uint32_t>(config_.vcpus);
  for (const GuestRegion& r : memory_->regions()) s.config.memory.push_back({r.guest_base, r.size});
  s.config.cmdline = kernel_cmdline_;
  s.config.devices.push_back({snapshot::kSerialDeviceKind, 0});
  s.vcpus.resize(config_.vcpus);

  std::mutex mu;
  RETURN_IF_ERROR(vcpus_->ForEachPaused([&](int index, kvm::VcpuFd& fd) -> Status {
    RETURN_IF_ERROR(kvm::CompletePendingExit(fd));
    std::vector<uint32_t> list;
    {
      // Probed once per VM: the readable set depends only on the VM's CPUID.
      std::lock_guard lock(mu);
      if (!readable_msrs_) {
        ASSIGN_OR_RETURN(std::vector<uint32_t> readable, kvm::ReadableMsrs(*kvm_, fd));
        readable_msrs_ = std::move(readable);
      }
      list = *readable_msrs_;
    }
    ASSIGN_OR_RETURN(snapshot::VcpuState vs, kvm::CaptureVcpu(fd, list));
    std::lock_guard lock(mu);
    s.vcpus[index] = std::move(vs);
    return Status::Ok();
  }));
  ASSIGN_OR_RETURN(s.vm, kvm::CaptureVm(*vm_fd_));
  // Copy-on-write overlays become frozen layers first: the block devices
  // save the chains they are then on.
  RETURN_IF_ERROR(FreezeDisks());
  s.serial = legacy::EncodeSerialState(serial_->GetState());
  // Each device saves itself (persist.h): no list of kinds here.
  for (size_t slot = 0; slot < virtio_.size(); ++slot) {
    ASSIGN_OR_RETURN(snapshot::VirtioDeviceState d,
                     virtio::SaveDevice(*virtio_[slot], static_cast<uint32_t>(slot)));
    s.config.devices.push_back({d.kind, d.slot});
    s.virtio.push_back(std::move(d));
  }
  return s;
}

Status Vm::Snapshot(const std::string& dir, bool resume) {
  if (!vcpus_) return Status::FailedPrecondition("vm is not started");
  RETURN_IF_ERROR(CheckDisksCapturable().WithContext("snapshot " + dir));
  bool was_paused = vcpus_->paused();
  auto start = std::chrono::steady_clock::now();
  if (!was_paused) RETURN_IF_ERROR(vcpus_->Pause());
  Result<snapshot::MachineState> state = CaptureState();
  Status st = state.status();
  uint64_t data_bytes = 0;
  if (st.ok()) {
    snapshot::SnapshotMeta meta;
    meta.template_name = config_.vm_id;
    meta.kernel = config_.kernel_path;
    Result<snapshot::SnapshotMeta> written =
        snapshot::SnapshotDir::Write(dir, *state, DiskIndex(), MemoryView(*memory_), meta);
    st = written.status();
    if (written.ok()) data_bytes = written->memory_data_bytes;
  }
  // On failure the VM goes back to the state it was in; on success it stays
  // paused only when asked to.
  if (resume || (!st.ok() && !was_paused)) vcpus_->Resume();
  if (!st.ok()) return st.WithContext("snapshot " + dir);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start).count();
  log::Info("vm snapshot written", {{"vm", config_.vm_id}, {"dir", dir},
                                    {"memory_data_bytes", data_bytes}, {"us", us}});
  return Status::Ok();
}

Status Vm::CheckSavedDevices(const snapshot::MachineState& s) {
  if (s.serial) RETURN_IF_ERROR(legacy::DecodeSerialState(*s.serial, s.newer_minor).status());
  bool has_net = false;
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    RETURN_IF_ERROR(virtio::CheckDevice(d, s.newer_minor));
    has_net = has_net || d.kind == virtio::Net::kPersistKind;
  }
  // A clone's network attachment and the snapshot's NIC come together: one
  // without the other is a caller's mistake, told before anything is built.
  if (has_net && !config_.net)
    return Status::InvalidArgument(
        "the snapshot has a network device: a network attachment (--net, or \"net\" in a "
        "restore request) is required");
  if (!has_net && config_.net)
    return Status::InvalidArgument(
        "a network attachment was given but the snapshot has no network device");
  return Status::Ok();
}

Status Vm::AttachSavedDevices(const snapshot::MachineState& s) {
  RETURN_IF_ERROR(AttachLegacyDevices());
  if (s.serial) {
    ASSIGN_OR_RETURN(legacy::SerialState serial,
                     legacy::DecodeSerialState(*s.serial, s.newer_minor));
    serial_->SetState(serial);
  }
  // The host resources devices come back on: this VM's new identity.
  virtio::DeviceResources host;
  host.vsock_uds = config_.vsock_uds;
  host.guest_cid = config_.guest_cid;
  host.open_disk = [this](const virtio::BlockState& b) { return OpenRestoredDisk(b); };
  if (config_.net) {
    // The clone's own TAP and MAC; its limits when it was given any.
    const NetFlags n = *config_.net;
    host.open_net = [n]() -> Result<std::unique_ptr<virtio::NetBackend>> {
      ASSIGN_OR_RETURN(auto tap, virtio::TapBackend::Open(n.tap, n.netns));
      return std::unique_ptr<virtio::NetBackend>(std::move(tap));
    };
    host.net_mac = n.mac;
    if (n.limits_given) {
      host.net_rx = virtio::RateLimit{n.rx_bps, n.rx_pps};
      host.net_tx = virtio::RateLimit{n.tx_bps, n.tx_pps};
    }
  }
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    if (d.slot != virtio_.size())
      return Status::DataLoss("snapshot virtio slots are not dense (slot " +
                              std::to_string(d.slot) + ")");
    ASSIGN_OR_RETURN(virtio::RestoredDevice restored,
                     virtio::RestoreDevice(d, s.newer_minor, host));
    RETURN_IF_ERROR(AttachVirtio(std::move(restored.device)));
    RETURN_IF_ERROR(virtio_.back()->RestoreState(restored.transport));
    virtio_.back()->device()->OnRestored();
  }
  return Status::Ok();
}

}  // namespace kubicle::vmm
