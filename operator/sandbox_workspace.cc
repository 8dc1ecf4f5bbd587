// The Sandbox reconciler's spec.workspaceRef step (sandbox_reconciler.h):
// a Sandbox with a workspace is placed only on the workspace's node, only
// once the workspace is Ready, and only while no other Sandbox holds it.
//
// Where one writer is decided: here, before placement. A Sandbox counts as
// holding the workspace from its placement (label kubicle.dev/node) until
// its object is gone, which its finalizer delays until the node has torn
// its VM down and so detached the disk; so a second Sandbox is placed only
// after the first's VM is gone. The node refuses a second writer too
// (FailedPrecondition), which covers writers outside Kubernetes (per-call
// runs, the node API) and is reported as status.vm.state Waiting.
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "operator/sandbox_reconciler.h"
#include "operator/workspace_status.h"

namespace kubicle::op {

bool SandboxReconciler::WorkspaceAllows(const SandboxView& sbx, SandboxFacts* facts, std::string* node) {
  const std::string& name = *sbx.spec.workspace;
  const std::string ws_key = kube::ObjectKey(sbx.meta.ns, name);
  auto got = ctx_.lister->Get(kube::WorkspaceResource(), ws_key);
  if (!got) {
    facts->schedule_reason = "WorkspaceNotFound";
    facts->schedule_message = "Workspace " + name + " not found";
    return false;
  }
  const WorkspaceView ws = WorkspaceView::Parse(std::move(*got));
  const std::string ws_node = ws.meta.Label(kLabelNode);
  if (ws.meta.deleting || ws_node.empty() || ws.status.phase != "Ready") {
    facts->schedule_reason = "WorkspaceNotReady";
    facts->schedule_message =
        "Workspace " + name + (ws.meta.deleting ? " is being deleted"
                               : ws_node.empty() ? " is not placed on a node yet"
                                                 : " is " + (ws.status.phase.empty() ? std::string("Pending")
                                                                                     : ws.status.phase) +
                                                       " on node " + ws_node + ", not Ready");
    return false;
  }
  std::vector<std::string> holders;
  ctx_.lister->ForEach(kube::SandboxResource(), [&](const Json& s) {
    if (Namespace(s) == sbx.meta.ns && Name(s) != sbx.meta.name && !Label(s, kLabelNode).empty() &&
        ParseSandboxSpec(s, nullptr).workspace == name) {
      holders.push_back(Name(s));
    }
  });
  std::string holder = holders.empty() ? "" : holders.front();
  if (holder.empty() && ctx_.workspace_claims) {
    std::string claimant = ctx_.workspace_claims->Claim(ws_key, sbx.meta.Key(), [&](const std::string& k) {
      return ctx_.lister->Get(kube::SandboxResource(), k).has_value();
    });
    if (!claimant.empty()) {
      std::string ns;
      kube::SplitKey(claimant, &ns, &holder);
    }
  }
  if (!holder.empty()) {
    facts->schedule_reason = "WorkspaceInUse";
    facts->schedule_message = "Workspace " + name + " is in use by Sandbox " + holder +
                              " (one writer at a time); waiting for it to be deleted";
    return false;
  }
  *node = ws_node;
  return true;
}

}  // namespace kubicle::op
