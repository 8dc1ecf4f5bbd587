// SandboxStarter: puts a running VM under a sandbox, the one way each kind
// of start needs: a restore of a snapshot into a warm-pool kubicle-vmm (a
// create from its template, a per-call run's VM, a resume from its own
// suspend snapshot) or a fork(2) of a running source into copy-on-write
// children. Either way the VMM's sockets and log take the sandbox's names,
// its cgroup is the sandbox's, its exit is watched (VmSupervisor), and the
// guest's agent answers and has run its post-restore hook (fresh entropy,
// the wall clock, hostname, generation, MAC; the workspace mounted) before
// the sandbox is Running. Records are the caller's to write; on failure the
// caller tears the sandbox down (VmSupervisor::Teardown is safe on a
// partly started VM), except for Fork, which tears its children down itself.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "guest/client/agent_client.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/manager/sandbox_networks.h"
#include "noderuntime/manager/sandbox_sweeper.h"
#include "noderuntime/manager/sandbox_workspaces.h"
#include "noderuntime/manager/teardown_queue.h"
#include "noderuntime/manager/vm_supervisor.h"
#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/vmmhost/vmm_launcher.h"
#include "noderuntime/vmmhost/warm_pool.h"

namespace kubicle::noderuntime {

class SandboxStarter {
 public:
  struct Options {
    std::string state_dir;            // <state>/sandboxes/<id>, <state>/sock/<cid>.{ctl,vsock}
    VmmLauncher* launcher = nullptr;  // attaches fork children
    WarmPool* pool = nullptr;
    Capacity* capacity = nullptr;
    uint64_t capacity_mem_mib = 0;  // the node's, for "node is full"
    uint32_t capacity_vcpus = 0;
    // Runs' VMs being torn down hold capacity that a start may wait for.
    TeardownQueue* teardowns = nullptr;
    Cgroups* cgroups = nullptr;
    uint64_t cgroup_overhead_mib = 64;
    Sweeper* sweeper = nullptr;  // forgets a previous sandbox's busy group
    VmSupervisor* supervisor = nullptr;
    SandboxWorkspaces* workspaces = nullptr;
    SandboxNetworks* networks = nullptr;
    std::function<WallTime()> clock;  // the guest's wall clock at post-restore
    std::chrono::milliseconds agent_timeout{10000};
    guest::client::ClientOptions agent_options;
    // A new fork child into the table (its id, CID and generation), unless
    // the node is shutting down (Unavailable).
    std::function<Status(const std::shared_ptr<ManagedSandbox>&)> admit;
    metrics::Family<metrics::Histogram>* restore_seconds = nullptr;
  };
  explicit SandboxStarter(Options options) : o_(std::move(options)) {}

  // A create or a run: `workspace` (if named) and a network slot with
  // `policy` attached, then a pool VM of sb's shape restored from its
  // template's `snapshot_dir`; the guest named `hostname`. `sb` is in the
  // table, Creating, and the caller holds its op_mu.
  Status StartFromTemplate(const std::shared_ptr<ManagedSandbox>& sb,
                           const std::string& snapshot_dir, const std::string& hostname,
                           const std::string& workspace, const network::EgressPolicy& policy,
                           StepTimes* steps);
  // A resume: a pool VM of sb's shape restored from its own suspend
  // snapshot, with its CID, sockets, slot and layer directory; the guest
  // keeps its hostname.
  Status StartFromSuspend(const std::shared_ptr<ManagedSandbox>& sb,
                          const std::string& snapshot_dir, StepTimes* steps);
  // Forks the running VM behind control socket `source_control` into `kids`
  // (new sandboxes, not yet in the table; kids[i] gets policies[i]). Each
  // is admitted, given capacity, a directory, a slot, its own VMM, cgroup
  // and agent, and persisted. On any failure every child is torn down.
  Result<std::vector<SandboxInfo>> Fork(const std::string& source_control,
                                        const std::vector<std::shared_ptr<ManagedSandbox>>& kids,
                                        const std::vector<network::EgressPolicy>& policies);

  // Reserves `shape`, evicting idle pool VMs of other shapes and waiting
  // for runs' teardowns if that makes room; ResourceExhausted saying what
  // is in use otherwise.
  Status ReserveCapacity(const VmShape& shape);

  std::string SandboxDir(const std::string& id) const { return o_.state_dir + "/sandboxes/" + id; }

 private:
  // A pool VM of this shape with its capacity: taken warm or started now.
  Status AcquireVm(const VmShape& shape, std::optional<PoolVm>* vm);
  // `vm` renamed to sb's, its cgroup set up, watched, restored, answering.
  // `resume`: a suspended sandbox's own snapshot (not counted as a create).
  Status Restore(const std::shared_ptr<ManagedSandbox>& sb, const std::string& snapshot_dir,
                 std::optional<PoolVm> vm, const std::string& hostname, StepTimes* steps,
                 bool resume);
  // Renames `pool_group` (the pool VM's own group) to the sandbox's if it
  // can, else creates the group and moves the VMM in.
  Status SetUpCgroup(ManagedSandbox& sb, const std::string& pool_group);
  // The agent answering, its post-restore hook run, the workspace mounted:
  // sb Running (the caller persists the record).
  Status FinishStart(const std::shared_ptr<ManagedSandbox>& sb, const std::string& hostname);
  // Admits a new child (id, CID, generation) and reserves what it needs.
  Status ReserveForkChild(const std::shared_ptr<ManagedSandbox>& child);
  // Takes hold of every child before anything else, so an abort kills them all.
  Status AttachForkChildren(const std::vector<std::shared_ptr<ManagedSandbox>>& kids,
                            const vmm::control::ForkReply& reply);
  Result<SandboxInfo> FinishForkChild(const std::shared_ptr<ManagedSandbox>& child);
  std::string SockPath(uint32_t cid, const char* kind) const;

  const Options o_;
};

// The cgroup limits of a VM of `shape` (guest RAM + `overhead_mib`).
CgroupLimits LimitsFor(const VmShape& shape, uint64_t overhead_mib);

}  // namespace kubicle::noderuntime
