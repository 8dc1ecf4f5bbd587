// Reconciles one Workspace (a durable disk on one node, docs/api.md): a
// short sequence of named steps, each idempotent:
//   deleting? -> Finalize (remove kubicle.dev/workspace-teardown once the
//                node reports status.disk.state Deleted, or the node is gone
//                past the grace period; while a Sandbox still uses it, Ready
//                False InUse names it)
//   EnsurePlacement (spec.nodeName, else the live node holding the fewest
//   workspaces; label kubicle.dev/node and the finalizer in one write; the
//   placement is permanent: the disk never moves) -> EnsureToken (owned
//   Secret <name>-workspace-token, as a Sandbox's) -> status
// Status is recomputed from the world and written only when it changed.
// The node daemon of the workspace's node makes and deletes the disk and
// reports it in status.disk; it never writes anything else.
#pragma once

#include <string>

#include "operator/context.h"
#include "operator/workspace_status.h"

namespace kubicle::op {

class WorkspaceReconciler final : public Reconciler {
 public:
  explicit WorkspaceReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key) override;

 private:
  Result<Outcome> Finalize(const WorkspaceView& ws, WorkspaceFacts facts);
  Status EnsurePlacement(WorkspaceView* ws, WorkspaceFacts* facts);
  Status EnsureFinalizer(WorkspaceView* ws);
  Status EnsureToken(const WorkspaceView& ws, WorkspaceFacts* facts, Outcome* out);
  void CheckNode(const WorkspaceView& ws, WorkspaceFacts* facts, Outcome* out);
  NodeStanding Standing(const std::string& node, kube::TimePoint now);

  Context ctx_;
};

}  // namespace kubicle::op
