// Adopter: what SandboxManager::Open finds of sandboxes in the state
// directory (docs/node.md, "VMMs across node restarts and rollouts"). Each
// record is taken back as it says: a Running sandbox's VMM checked by pid +
// start time, control socket and agent, with its cgroup, CID, network slot
// and workspace held again (if any check fails the sandbox is Failed with
// why); a Suspended one through the Suspender; a create or a delete that
// never finished is finished. Then every VMM, socket, pool directory and
// cgroup of this state directory that no record owns goes. Used once, at
// Open, before anything else runs.
#pragma once

#include <functional>
#include <string>

#include "common/metrics.h"
#include "guest/client/agent_client.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/manager/sandbox_networks.h"
#include "noderuntime/manager/sandbox_sweeper.h"
#include "noderuntime/manager/sandbox_workspaces.h"
#include "noderuntime/manager/suspender.h"
#include "noderuntime/manager/vm_supervisor.h"
#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/vmmhost/vmm_launcher.h"

namespace kubicle::noderuntime {

class Adopter {
 public:
  struct Options {
    std::string state_dir;
    VmmLauncher* launcher = nullptr;
    SandboxTable* table = nullptr;
    Capacity* capacity = nullptr;
    Cgroups* cgroups = nullptr;
    Sweeper* sweeper = nullptr;  // removes what is left of cgroups
    VmSupervisor* supervisor = nullptr;
    Suspender* suspender = nullptr;
    SandboxWorkspaces* workspaces = nullptr;
    SandboxNetworks* networks = nullptr;  // takes back a sandbox's network slot
    guest::client::ClientOptions agent_options;
    metrics::Family<metrics::Counter>* vmm_crashes = nullptr;
  };
  explicit Adopter(Options options) : o_(std::move(options)) {}

  // Every sandbox directory: re-adopted into the table, or removed.
  Status AdoptSandboxes();
  // Kills VMMs of the state directory that no sandbox in the table owns and
  // removes their sockets, the pool's directories and unowned cgroups.
  void KillOrphans();

 private:
  void AdoptOne(SandboxRecord record);

  const Options o_;
};

}  // namespace kubicle::noderuntime
