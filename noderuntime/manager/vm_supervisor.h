// VmSupervisor: the life of each sandbox's kubicle-vmm once it is the
// sandbox's. It watches the process's exit (an unexpected one turns the
// sandbox Failed with the reason and frees what it held), stops it (a
// shutdown request, SIGKILL after the grace), lets go of it while the
// sandbox stays (a suspend, a resume that failed), and tears a sandbox down
// (workspace unmounted, record removed, VMM stopped, every hold released,
// its directory removed, out of the table). It owns no sandbox: the table
// does, and the lifecycle's callers hold a sandbox's op_mu around these.
#pragma once

#include <chrono>
#include <memory>

#include "common/metrics.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/manager/sandbox_sweeper.h"
#include "noderuntime/manager/sandbox_workspaces.h"
#include "noderuntime/network/sandbox_network.h"
#include "noderuntime/vmmhost/process_watcher.h"

namespace kubicle::noderuntime {

class VmSupervisor {
 public:
  struct Options {
    ProcessWatcher* watcher = nullptr;
    Capacity* capacity = nullptr;
    SuspendDisk* suspend_disk = nullptr;
    SandboxTable* table = nullptr;
    Sweeper* sweeper = nullptr;  // removes busy cgroups later
    SandboxWorkspaces* workspaces = nullptr;
    network::SandboxNetwork* network = nullptr;  // null: --sandbox-network off
    metrics::Family<metrics::Counter>* vmm_crashes = nullptr;
    std::chrono::milliseconds delete_grace{2000};  // shutdown request to SIGKILL
  };
  explicit VmSupervisor(Options options) : o_(std::move(options)) {}

  // Watches sb's VMM: its exit reaches OnVmmExit.
  Status Watch(const std::shared_ptr<ManagedSandbox>& sb);
  // Stops watching (the exit callback is not running once this returns).
  void Unwatch(ManagedSandbox& sb);
  // A shutdown request, SIGKILL after the grace period (at once for a run's
  // VM). Leaves sb.vmm for the caller to reap and let go.
  void StopVm(ManagedSandbox& sb);

  enum class Stop { kGraceful, kKill };
  // Lets go of sb's VMM and what only a running VM holds (capacity, cgroup,
  // sockets), stopping it first; the sandbox keeps its identity (CID,
  // network slot, workspace, record): a suspend once its snapshot is
  // durable, or a resume that failed.
  void LetGoOfVm(ManagedSandbox& sb, Stop how);
  // Everything sb holds goes back (capacity, CID, cgroup, network slot,
  // suspend disk, workspace, sockets). Requires sb.mu; the VMM is gone.
  void FreeResources(ManagedSandbox& sb);
  // Writes sb's record (none for a run's VM). Requires sb.mu.
  Status Persist(ManagedSandbox& sb);
  // The sandbox goes: VMM, holds, directory, table entry. Idempotent.
  Status Teardown(const std::shared_ptr<ManagedSandbox>& sb);

 private:
  void OnVmmExit(const std::shared_ptr<ManagedSandbox>& sb, std::optional<int> code);
  // Capacity, cgroup and sockets; sb.vmm let go. Requires sb.mu.
  void ReleaseVmHolds(ManagedSandbox& sb);

  const Options o_;
};

}  // namespace kubicle::noderuntime
