// Snapshot of Vm (docs/vmm.md, "Snapshots and restore"): capture of a paused
// machine into a snapshot directory, and the devices of a machine rebuilt
// from a captured state (the builders that use it are in vm_build.cc).
// Device state is read on the event-loop thread (the control command runs
// there), vCPU state on each vCPU's own thread.
#include <mutex>

#include "common/log.h"
#include "snapshot/memory_reservation.h"
#include "snapshot/snapshot_dir.h"
#include "snapshot/vcpu_state.h"
#include "snapshot/vm_state.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/devices/legacy/serial.h"
#include "vmm/devices/virtio/rng.h"
#include "vmm/devices/virtio/virtio_spec.h"
#include "vmm/devices/virtio/vsock.h"
#include "vmm/vm.h"

namespace kubicle::vmm {

namespace virtio = devices::virtio;
using snapshot::DeviceKind;

namespace {

Result<DeviceKind> KindOf(const virtio::VirtioDevice& device) {
  switch (device.device_id()) {
    case virtio::kDeviceIdBlock: return DeviceKind::kVirtioBlock;
    case virtio::kDeviceIdRng: return DeviceKind::kVirtioRng;
    case virtio::kDeviceIdVsock: return DeviceKind::kVirtioVsock;
  }
  return Status::Unimplemented("no snapshot support for virtio device " +
                               std::string(device.name()));
}

}  // namespace

Result<snapshot::MachineState> Vm::CaptureState() {
  snapshot::MachineState s;
  s.config.mem_bytes = config_.mem_bytes;
  s.config.vcpus = static_cast<uint32_t>(config_.vcpus);
  for (const GuestRegion& r : memory_->regions()) s.config.memory.push_back({r.guest_base, r.size});
  s.config.cmdline = kernel_cmdline_;
  s.config.devices.push_back({DeviceKind::kSerial, 0});
  s.vcpus.resize(config_.vcpus);

  std::mutex mu;
  RETURN_IF_ERROR(vcpus_->ForEachPaused([&](int index, kvm::VcpuFd& fd) -> Status {
    RETURN_IF_ERROR(snapshot::CompletePendingExit(fd));
    std::vector<uint32_t> list;
    {
      // Probed once per VM: the readable set depends only on the VM's CPUID.
      std::lock_guard lock(mu);
      if (!readable_msrs_) {
        ASSIGN_OR_RETURN(std::vector<uint32_t> readable, snapshot::ReadableMsrs(*kvm_, fd));
        readable_msrs_ = std::move(readable);
      }
      list = *readable_msrs_;
    }
    ASSIGN_OR_RETURN(snapshot::VcpuState vs, snapshot::CaptureVcpu(fd, list));
    std::lock_guard lock(mu);
    s.vcpus[index] = std::move(vs);
    return Status::Ok();
  }));
  ASSIGN_OR_RETURN(s.vm, snapshot::CaptureVm(*vm_fd_));
  s.serial = serial_->GetState();

  for (size_t slot = 0; slot < virtio_.size(); ++slot) {
    virtio::MmioTransport& t = *virtio_[slot];
    snapshot::VirtioDeviceState d;
    ASSIGN_OR_RETURN(d.kind, KindOf(*t.device()));
    d.slot = static_cast<uint32_t>(slot);
    if (d.kind == DeviceKind::kVirtioBlock) { ASSIGN_OR_RETURN(d.block, CaptureDisk(d.slot)); }
    d.transport = t.SaveState();
    if (d.kind == DeviceKind::kVirtioVsock)
      d.vsock.guest_cid = static_cast<virtio::Vsock*>(t.device())->guest_cid();
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
    Result<snapshot::SnapshotMeta> written = snapshot::SnapshotDir::Write(dir, *state, *memory_, meta);
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

Status Vm::AttachRestoredVirtio(const snapshot::MachineState& s) {
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    if (d.slot != virtio_.size())
      return Status::DataLoss("snapshot virtio slots are not dense (slot " + std::to_string(d.slot) + ")");
    if (d.kind == DeviceKind::kVirtioBlock) {
      RETURN_IF_ERROR(AttachRestoredDisk(d.block));
    } else if (d.kind == DeviceKind::kVirtioRng) {
      RETURN_IF_ERROR(AttachVirtio(std::make_unique<virtio::Rng>()));
    } else if (d.kind == DeviceKind::kVirtioVsock) {
      if (config_.vsock_uds.empty())
        return Status::InvalidArgument("the snapshot has a vsock device: --vsock-uds is required");
      virtio::VsockConfig vc;
      vc.guest_cid = config_.guest_cid;
      vc.uds_path = config_.vsock_uds;
      ::unlink(config_.vsock_uds.c_str());
      ASSIGN_OR_RETURN(auto vsock, virtio::Vsock::Create(vc));
      RETURN_IF_ERROR(AttachVirtio(std::move(vsock)));
    } else {
      return Status::Unimplemented(std::string("restore of ") + snapshot::DeviceKindName(d.kind));
    }
    RETURN_IF_ERROR(virtio_.back()->RestoreState(d.transport));
    if (d.kind == DeviceKind::kVirtioVsock) {
      // A clone must not keep its template's CID, and the guest driver only
      // re-reads the CID and drops stale connections on a transport reset.
      auto* vsock = static_cast<virtio::Vsock*>(virtio_.back()->device());
      RETURN_IF_ERROR(vsock->SetGuestCid(config_.guest_cid));
      vsock->SendTransportReset();
    }
  }
  return Status::Ok();
}

}  // namespace kubicle::vmm
