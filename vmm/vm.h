// Vm: one running microVM inside kubicle-vmm — KVM objects, guest memory,
// buses and devices, the device event-loop thread, the vCPU threads and the
// control socket — and its life cycle: Create (build everything, nothing
// runs), Start, Pause/Resume, RequestStop (any thread), WaitForStop.
//
// Threads: the caller's thread waits in WaitForStop; one event-loop thread
// runs device back ends (virtio queue kicks via ioeventfd, vsock sockets,
// serial input) and the control socket; one thread per vCPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/event_fd.h"
#include "common/event_loop.h"
#include "common/status.h"
#include "snapshot/layered_disk.h"
#include "snapshot/snapshot_dir.h"
#include "snapshot/state.h"
#include "vmm/arch/x86_64/boot.h"
#include "vmm/control_protocol.h"
#include "vmm/control_server.h"
#include "vmm/devices/bus.h"
#include "vmm/devices/virtio/block_backend.h"
#include "vmm/devices/virtio/mmio_transport.h"
#include "vmm/exit_code.h"
#include "vmm/kvm/kvm.h"
#include "vmm/kvm/vm_fd.h"
#include "vmm/memory/guest_memory.h"
#include "vmm/memory_reservation.h"
#include "vmm/vcpu_runner.h"
#include "vmm/vmm_config.h"

namespace kubicle::vmm {

namespace devices::legacy {
class Serial;
}
namespace devices::virtio {
class BlockBackend;
struct BlockState;
}

class Vm {
 public:
  // Builds the VM described by config: memory, irqchip, PIT, kernel and boot
  // structures, devices. On error nothing is left running.
  static Result<std::unique_ptr<Vm>> Create(const LaunchSpec& config);
  // Builds the VM from the snapshot at config.snapshot_path (validated by
  // SnapshotDir::Open; memory mapped MAP_PRIVATE) with config's new identity:
  // vsock CID and socket, serial, control socket. Start resumes it.
  static Result<std::unique_ptr<Vm>> Restore(const LaunchSpec& config);
  // Warm pool: builds the KVM VM, memory slots over a MemoryReservation of
  // config.mem_bytes and config.vcpus vCPUs, and the control socket, but no
  // guest. Start then only starts the event loop; a control::RestoreRequest
  // on the control socket restores a snapshot of the same shape and runs it
  // (vm_pool.cc). Fields left out keep the values of config.
  static Result<std::unique_ptr<Vm>> CreatePooled(const LaunchSpec& config);
  ~Vm();

  // Starts the event loop, the control socket and the vCPUs.
  Status Start();
  Status Pause();
  Status Resume();
  // Pauses (if running), writes a snapshot directory at dir (which must not
  // exist), then resumes if resume is set. Copy-on-write disks are frozen
  // into shared layers (vm_disks.cc); refused for writable raw disks.
  Status Snapshot(const std::string& dir, bool resume);
  // Pauses, captures, fork(2)s one child process per entry of the request
  // (each a copy-on-write clone with that identity), resumes. Runs on the
  // event-loop thread (vm_fork.cc).
  Result<control::ForkReply> Fork(const control::ForkRequest& request);
  // Asks the VM to stop; the first request's code and reason win.
  void RequestStop(ExitCode code, const std::string& reason);
  // Blocks until a stop is requested, then tears everything down.
  ExitCode WaitForStop();
  // Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and so in the
  // threads it starts later) and starts a watcher thread that turns the
  // first of them into a clean stop. Called once per process: by main before
  // Start, and by each fork child, which inherits no threads.
  void StopOnSignals();

  // State for the control socket's "status" command.
  control::VmStatus Describe() const;
  const LaunchSpec& config() const { return config_; }

 private:
  // One entry per virtio-blk device, in virtio slot `slot` (the Block is
  // owned by its transport).
  struct DiskSlot {
    uint32_t slot = 0;
    snapshot::LayeredDisk* layered = nullptr;  // null: a raw image file
    std::string base_path;
    bool read_only = false;
  };
  explicit Vm(LaunchSpec config) : config_(std::move(config)) {}
  // The builders (vm_build.cc): each starts with BuildBase, and restore,
  // pool restore and fork share AttachFromState.
  struct BaseTimings {
    int64_t kvm_vm_us = 0, slots_us = 0;
  };
  // A new KVM VM with its irqchip, PIT and TSS, its memory slots registered
  // by register_slots (on a second thread, beside the irqchip set-up), and
  // the event loop. timings may be null.
  Status BuildBase(const std::function<Status(const kvm::VmFd&)>& register_slots,
                   BaseTimings* timings = nullptr);
  // VM-wide KVM state, serial and virtio devices from s, over memory_; the
  // vCPUs then start from s (SetupVcpu).
  Status AttachFromState(const snapshot::MachineState& s);
  Status BuildBooted();
  Status BuildRestored();
  Status BuildPooled();
  Status AttachLegacyDevices();
  Status AttachVirtioDevices();
  Status AttachVirtio(std::unique_ptr<devices::virtio::VirtioDevice> device);
  Status AttachControlSocket();
  // Serves one control request (on the event-loop thread).
  Result<control::Reply> HandleControl(const control::Request& request);
  Status SetupVcpu(int index, kvm::VcpuFd& vcpu);
  // Every device record of s decodes (nothing is built): a restore refuses a
  // bad snapshot before it commits to it.
  Status CheckSavedDevices(const snapshot::MachineState& s);
  // The serial port and the virtio devices of s, each restored by its own
  // persist code over this VM's host resources (vm_snapshot.cc).
  Status AttachSavedDevices(const snapshot::MachineState& s);
  Result<snapshot::MachineState> CaptureState();
  Status StartVcpus(std::vector<kvm::VcpuFd> fds);
  Result<control::RestoreReply> RestoreFromPool(const control::RestoreRequest& req);
  Status FinishRestore(const snapshot::SnapshotDir& snap,
                       std::unique_ptr<devices::virtio::BlockBackend> workspace);
  [[noreturn]] void ChildMain(const snapshot::MachineState& state, const control::ForkChild& child);
  // Microseconds a fork child spends in each start-up step.
  struct ForkTimings {
    int64_t kvm_vm_us = 0, slots_us = 0, devices_us = 0, vcpus_us = 0;
  };
  Status BuildForked(const snapshot::MachineState& s, ForkTimings* t);
  // Disks (vm_disks.cc).
  Status AttachDisk(const DiskConfig& disk);
  // The backend of a restored block device (DeviceResources::open_disk).
  Result<std::unique_ptr<devices::virtio::BlockBackend>> OpenRestoredDisk(
      const devices::virtio::BlockState& b);
  // Refuses (Unimplemented) when a writable disk is a raw image.
  Status CheckDisksCapturable() const;
  // Freezes every copy-on-write disk's overlay into its chain (the block
  // devices then save the chains).
  Status FreezeDisks();
  // The snapshot's `disk` index: every disk and the files it is on.
  std::vector<snapshot::DiskIndexEntry> DiskIndex() const;
  std::string NewOverlayPath(uint32_t slot) const;
  // Deletes the live overlays (private to this VM) when it stops.
  void RemoveOverlays();
  // Keeps the disk's frozen chain short: a background flatten past
  // LayeredDisk::kFlattenThreshold, a synchronous one at kMaxLayers.
  void MaybeFlatten(DiskSlot& d);
  void JoinFlatten();
  // The workspace slot (vm_workspace.cc, docs/workspaces.md).
  Status AttachWorkspaceSlot();
  // The backend of a restored workspace slot: empty again (a snapshot never
  // records a workspace; the restore request names one).
  std::unique_ptr<devices::virtio::BlockBackend> RestoredWorkspaceSlot();
  // Opens `path` read-write as the slot's backend (before the vCPUs run).
  Result<std::unique_ptr<devices::virtio::BlockBackend>> OpenWorkspace(const std::string& path) const;
  Status PlugWorkspace(std::unique_ptr<devices::virtio::BlockBackend> backend);

  LaunchSpec config_;
  std::string kernel_cmdline_;  // config cmdline plus virtio_mmio.device= entries
  std::optional<kvm::Kvm> kvm_;
  std::optional<kvm::VmFd> vm_fd_;
  std::unique_ptr<GuestMemory> memory_;
  std::vector<kvm_cpuid_entry2> supported_cpuid_;
  // MSRs KVM can read for this VM's vCPUs (CaptureState, first capture).
  std::optional<std::vector<uint32_t>> readable_msrs_;
  arch::BootInfo boot_;
  // Set by Restore: vCPUs start from this state instead of boot registers.
  std::unique_ptr<snapshot::MachineState> restore_state_;
  // Warm pool only, until the restore request consumes them.
  std::unique_ptr<MemoryReservation> reservation_;
  std::vector<kvm::VcpuFd> pool_vcpus_;
  bool pooled_ = false;

  // Declared before the devices: transports unregister from the loop when
  // destroyed, so it must outlive them.
  std::unique_ptr<EventLoop> loop_;
  devices::Bus pio_bus_;
  devices::Bus mmio_bus_;
  std::shared_ptr<devices::legacy::Serial> serial_;
  std::vector<std::shared_ptr<devices::virtio::MmioTransport>> virtio_;
  std::vector<EventFd> notify_fds_;  // ioeventfds, registered on loop_
  std::vector<DiskSlot> disks_;
  // The virtio slot of the workspace device, if the VM has one; whether a
  // workspace image is plugged into it (fork is then refused).
  std::optional<uint32_t> workspace_slot_;
  bool workspace_plugged_ = false;
  // At most one background flatten at a time (any disk).
  std::thread flatten_thread_;
  std::atomic<bool> flatten_done_{false};
  Status flatten_result_;   // written by the flatten thread before flatten_done_
  std::string flatten_out_;

  std::thread loop_thread_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<VcpuSet> vcpus_;

  mutable std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::optional<std::pair<ExitCode, std::string>> stop_;
  std::chrono::steady_clock::time_point started_at_;
};

}  // namespace kubicle::vmm
