// Suspender: suspend and resume of a sandbox (docs/node.md, "Suspend and
// resume"), and what a restarted node finds of them.
//
// Suspend: the VM is paused and snapshotted into <sandbox>/suspend (the
// VMM's SnapshotDir::Write: a temporary directory, fsync'd, renamed into
// place, parent fsync'd; disk overlays are frozen into layers of the
// sandbox's own directory), the record then says Suspended, and only then
// does the VMM go. A crash at any point leaves either the running VM (the
// record says Running: an unfinished snapshot is discarded at re-adoption
// and a paused VM resumed) or a complete snapshot (the record says
// Suspended: a VMM still alive is killed). The sandbox keeps its id, token,
// CID, vsock and control socket paths and its network namespace (slot, TAP,
// MAC, egress rules), so resume needs no new identity and the guest's
// peers see the same addresses.
//
// Resume: a pool VMM of the sandbox's shape restores the snapshot with the
// sandbox's own layer directory, CID, vsock socket and network attachment
// (the restore is SandboxStarter's), the agent's
// post-restore hook sets the clock and reseeds, the record says Running,
// and the snapshot is removed.
//
// The caller finds the sandbox and holds nothing: Suspend and Resume take
// its op_mu, one lifecycle operation at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/manager/sandbox_networks.h"
#include "noderuntime/manager/sandbox_starter.h"
#include "noderuntime/manager/vm_supervisor.h"

namespace kubicle::noderuntime {

class Suspender {
 public:
  struct Options {
    VmSupervisor* supervisor = nullptr;
    SuspendDisk* suspend_disk = nullptr;  // the node's budget for snapshots
    SandboxTable* table = nullptr;        // who may have forked from whom
    std::function<WallTime()> clock;
    SandboxStarter* starter = nullptr;    // restores a resumed sandbox's VM
    SandboxNetworks* networks = nullptr;  // re-adoption takes back sb's network slot
    metrics::Family<metrics::Histogram>* suspend_seconds = nullptr;
    metrics::Family<metrics::Histogram>* resume_seconds = nullptr;
  };
  explicit Suspender(Options options) : o_(std::move(options)) {}

  // A Running sandbox to Suspended (a Suspended one as it is).
  Result<SandboxInfo> Suspend(const std::shared_ptr<ManagedSandbox>& sb);
  // A Suspended sandbox to Running (a Running one as it is).
  Result<SandboxInfo> Resume(const std::shared_ptr<ManagedSandbox>& sb);

  // Re-adoption of a sandbox recorded Suspended: its snapshot must be
  // there; its CID, slot and disk budget are held again.
  Status AdoptSuspended(ManagedSandbox& sb);
  // Re-adoption of a Running one: a snapshot a suspend or a resume left
  // behind is discarded, and a VM paused for it resumed.
  void CleanUpUnfinishedSuspend(ManagedSandbox& sb);

 private:
  // The budget's hold on what a snapshot of `sb` may take (its guest RAM);
  // ResourceExhausted when neither the budget nor the filesystem has it.
  Result<uint64_t> ReserveSuspendDisk(const ManagedSandbox& sb);
  // A resume that failed: its new VM goes and the sandbox is Suspended again.
  void AbortResume(const std::shared_ptr<ManagedSandbox>& sb);
  // Removes the layer files in `sb`'s directory that its suspend snapshot
  // does not name (earlier chains, a killed VM's overlay, flatten output),
  // unless a fork descendant may still read them.
  void CollectLayers(const ManagedSandbox& sb);
  bool MayHaveForkDescendants(const std::string& id);

  const Options o_;
};

}  // namespace kubicle::noderuntime
