// SandboxWorkspaces: where workspaces (docs/workspaces.md) meet sandboxes.
// The store (state/workspace_store.h) keeps the images, records and who
// holds each one; here a create or run attaches one to a sandbox (the
// restore plugs its image into the template's workspace slot, then a Linux
// guest mounts it at /workspace), a delete, a run's end or a VMM's exit
// releases it (the guest unmounts it first while it still answers), and a
// restarted node gives each re-adopted sandbox its workspace back.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "guest/client/agent_client.h"
#include "noderuntime/manager/managed_sandbox.h"
#include "noderuntime/state/workspace_store.h"

namespace kubicle::noderuntime {

class SandboxWorkspaces {
 public:
  explicit SandboxWorkspaces(std::unique_ptr<WorkspaceStore> store) : store_(std::move(store)) {}

  // The workspaces themselves: WorkspaceService's calls go to the store.
  WorkspaceStore& store() { return *store_; }

  // Takes workspace `name` for `sb` (sets holds_workspace): NotFound, or
  // FailedPrecondition naming its holder or for a template without a slot.
  Status Attach(ManagedSandbox& sb, const std::string& name);
  // Requires sb.mu, and the VMM gone: syncs the image and lets it go.
  void Release(ManagedSandbox& sb);
  // In a Linux guest: the slot's device at /workspace (a guest without a
  // shell, the test guest, uses the disk raw).
  Status Mount(guest::client::AgentClient& agent, const std::string& name);
  // Best effort, while the agent answers: the guest unmounts it.
  void Unmount(ManagedSandbox& sb);
  // Re-adoption: a running sandbox's workspace is its again.
  void Readopt(ManagedSandbox& sb);

 private:
  std::unique_ptr<WorkspaceStore> store_;
};

}  // namespace kubicle::noderuntime
