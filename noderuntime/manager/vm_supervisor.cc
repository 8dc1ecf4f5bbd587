// VmSupervisor (vm_supervisor.h): a sandbox's VMM watched, stopped, let go
// of, and the sandbox torn down.
#include "noderuntime/manager/vm_supervisor.h"

#include <signal.h>
#include <unistd.h>

#include "common/log.h"
#include "noderuntime/node_util.h"
#include "vmm/control_client.h"

namespace kubicle::noderuntime {

using namespace std::chrono_literals;

namespace {

// SIGKILL, then up to 10 s for it to go.
void Kill(VmmProcess& vmm) {
  (void)vmm.Signal(SIGKILL);
  WaitExited(vmm.exit_fd(), 10s);
}

}  // namespace

Status VmSupervisor::Persist(ManagedSandbox& sb) {
  // A run's VM has no record on purpose: after a daemon crash it is an
  // orphan that Open() kills, never a sandbox to re-adopt.
  if (sb.ephemeral) return Status::Ok();
  return AtomicWriteFile(sb.dir + "/record.json", EncodeSandboxRecord(sb.rec));
}

Status VmSupervisor::Watch(const std::shared_ptr<ManagedSandbox>& sb) {
  std::weak_ptr<ManagedSandbox> weak = sb;
  std::lock_guard l(sb->mu);
  if (!sb->vmm) return Status::FailedPrecondition("no process to watch");
  ASSIGN_OR_RETURN(sb->watch_key,
                   o_.watcher->Watch(sb->vmm->exit_fd(), [this, weak](std::optional<int> code) {
                     if (auto s = weak.lock()) OnVmmExit(s, code);
                   }));
  return Status::Ok();
}

void VmSupervisor::Unwatch(ManagedSandbox& sb) {
  uint64_t key;
  {
    std::lock_guard l(sb.mu);
    key = std::exchange(sb.watch_key, 0);
  }
  if (key) o_.watcher->Unwatch(key);  // the callback is not running after this
}

void VmSupervisor::OnVmmExit(const std::shared_ptr<ManagedSandbox>& sb, std::optional<int> code) {
  std::lock_guard l(sb->mu);
  // The watcher reaps our own children; a VMM it could not reap may still
  // tell its code through the launcher (a fake one does).
  if (!code && sb->vmm) code = sb->vmm->Reap();
  sb->exited = true;
  sb->watch_key = 0;
  sb->cv.notify_all();
  if (sb->rec.info.state != SandboxState::kRunning || sb->delete_requested) return;
  std::string reason =
      code ? "kubicle-vmm " + DescribeExit(*code) : "kubicle-vmm exited unexpectedly";
  std::string tail = TailOfFile(sb->log_path, 400);
  if (!tail.empty()) reason += "; vmm.log: " + tail;
  sb->rec.info.state = SandboxState::kFailed;
  sb->rec.info.message = reason;
  sb->agent.reset();
  FreeResources(*sb);
  Status s = Persist(*sb);
  o_.vmm_crashes->WithLabels({}).Inc();
  log::Error("sandbox failed", {{"sandbox", sb->rec.info.id},
                                {"run", sb->rec.info.labels.count("kubicle.dev/run")
                                            ? sb->rec.info.labels.at("kubicle.dev/run")
                                            : ""},
                                {"template", sb->rec.info.template_name},
                                {"reason", reason},
                                {"persist", s.ok() ? "ok" : s.ToString()}});
}

void VmSupervisor::ReleaseVmHolds(ManagedSandbox& sb) {
  if (sb.holds_capacity) o_.capacity->Release(sb.shape);
  sb.holds_capacity = false;
  if (sb.holds_cgroup) o_.sweeper->RemoveCgroupSoon(sb.rec.info.id);
  sb.holds_cgroup = false;
  if (!sb.rec.control_path.empty()) ::unlink(sb.rec.control_path.c_str());
  if (!sb.rec.vsock_path.empty()) ::unlink(sb.rec.vsock_path.c_str());
  sb.vmm.reset();
}

void VmSupervisor::FreeResources(ManagedSandbox& sb) {
  if (sb.holds_cid) o_.table->ReleaseCid(sb.rec.info.cid);
  sb.holds_cid = false;
  // The VMM is gone (or going): its TAP's namespace is torn down off this path.
  if (sb.holds_slot && o_.network && sb.rec.info.network)
    o_.network->Release(sb.rec.info.network->slot);
  sb.holds_slot = false;
  if (sb.holds_suspend_disk) o_.suspend_disk->Release(sb.rec.info.suspended_bytes);
  sb.holds_suspend_disk = false;
  o_.workspaces->Release(sb);
  ReleaseVmHolds(sb);
}

void VmSupervisor::StopVm(ManagedSandbox& sb) {
  VmmProcess* vmm;
  std::string control;
  {
    std::lock_guard l(sb.mu);
    if (sb.exited || !sb.vmm) return;
    vmm = sb.vmm.get();  // stays: only Teardown/FreeResources let it go
    control = sb.rec.control_path;
  }
  if (sb.ephemeral) {  // nothing in a discarded VM is worth a clean shutdown
    Kill(*vmm);
    return;
  }
  Status r = vmm::control::ControlClient(control).Shutdown(500ms);
  if (!r.ok() || !WaitExited(vmm->exit_fd(), o_.delete_grace)) Kill(*vmm);
}

void VmSupervisor::LetGoOfVm(ManagedSandbox& sb, Stop how) {
  Unwatch(sb);  // its exit is no failure
  if (how == Stop::kGraceful) {
    StopVm(sb);  // the VMM removes its fresh, empty overlay; SIGKILL after the grace
  } else {
    std::lock_guard l(sb.mu);
    if (sb.vmm) Kill(*sb.vmm);
  }
  std::lock_guard l(sb.mu);
  if (sb.vmm) sb.vmm->Reap();
  sb.exited = true;
  sb.agent.reset();
  // A pool VMM binds the sockets again at resume. The CID and the namespace stay.
  ReleaseVmHolds(sb);
  sb.rec.info.vmm_pid = 0;
  sb.rec.pid_start_time = 0;
}

Status VmSupervisor::Teardown(const std::shared_ptr<ManagedSandbox>& sb) {
  o_.workspaces->Unmount(*sb);  // while its agent still answers: a clean file system
  {
    std::lock_guard l(sb->mu);
    if (sb->removed) return Status::Ok();
    sb->delete_requested = true;
    sb->agent.reset();
    if (sb->rec.info.state != SandboxState::kFailed) sb->rec.info.state = SandboxState::kDeleting;
    // Without its record the VMM is an orphan to the next Open(), which
    // finishes this delete if the daemon dies before we do.
    if (!sb->dir.empty()) ::unlink((sb->dir + "/record.json").c_str());
  }
  StopVm(*sb);
  Unwatch(*sb);
  {
    std::lock_guard l(sb->mu);
    if (sb->vmm) sb->vmm->Reap();
    sb->exited = true;
    FreeResources(*sb);
    if (!sb->dir.empty()) {
      Status s = RemoveTree(sb->dir);
      if (!s.ok())
        log::Warn("sandbox dir removal failed",
                  {{"sandbox", sb->rec.info.id}, {"error", s.ToString()}});
    }
    sb->removed = true;
  }
  o_.table->Remove(sb);
  return Status::Ok();
}

}  // namespace kubicle::noderuntime
