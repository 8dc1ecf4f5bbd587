#include "operator/workspace_reconciler.h"

#include "common/log.h"
#include "common/sha256.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "kube/time_format.h"
#include "operator/token_secret.h"

namespace kubicle::op {

using kube::WorkspaceResource;

Result<Outcome> WorkspaceReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(WorkspaceResource(), key);
  if (!got) return Outcome{};
  WorkspaceView ws = WorkspaceView::Parse(std::move(*got));
  WorkspaceFacts facts;
  facts.node = ws.meta.Label(kLabelNode);
  facts.token_secret = ws.status.token_secret_name;
  facts.token_sha256 = ws.status.token_sha256;
  facts.holders = WorkspaceHolders(ctx_.lister->List(kube::SandboxResource()), ws.meta.ns, ws.meta.name);
  if (ws.meta.deleting) return Finalize(ws, std::move(facts));

  RETURN_IF_ERROR(EnsurePlacement(&ws, &facts));
  RETURN_IF_ERROR(EnsureFinalizer(&ws));
  Outcome out;
  RETURN_IF_ERROR(EnsureToken(ws, &facts, &out));
  CheckNode(ws, &facts, &out);
  Json desired = ComputeWorkspaceStatus(ws, facts, ctx_.clock->Now());
  ASSIGN_OR_RETURN(bool wrote, WriteStatusIfChanged(ctx_, WorkspaceResource(), ws.object, desired));
  const std::string phase = desired["phase"].get<std::string>();
  if (wrote && ws.status.phase != phase) {
    log::Info("workspace phase", {{"workspace", key}, {"phase", phase}, {"node", facts.node}});
  }
  if (facts.placed_now) ctx_.Event(ws.object, "Normal", "Scheduled", "placed on node " + facts.node);
  if (!facts.token_problem.empty() && wrote) {
    ctx_.Event(ws.object, "Warning", facts.token_problem_reason, facts.token_problem);
  }
  if (facts.node.empty()) out.RequeueWithin(ctx_.config.unschedulable_retry);
  return out;
}

Status WorkspaceReconciler::EnsurePlacement(WorkspaceView* ws, WorkspaceFacts* facts) {
  if (!facts->node.empty()) return Status::Ok();
  if (!ws->problems.empty()) {
    facts->schedule_reason = "InvalidSpec";
    facts->schedule_message = JoinProblems(ws->problems);
    return Status::Ok();
  }
  std::string node;
  if (ws->spec.node_name) {
    // A pin is honoured even while that node is away: the disk will live
    // there, and its node agent makes it when it (re)joins.
    node = *ws->spec.node_name;
  } else {
    // The live node holding the fewest workspaces, ties by name. Disks are
    // sparse and their sizes are not a node's capacity, so count them.
    auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), ctx_.clock->Now());
    std::map<std::string, int> count;
    for (const auto& [name, info] : nodes) {
      if (info.alive) count[name] = 0;
    }
    for (const Json& w : ctx_.lister->List(WorkspaceResource())) {
      auto it = count.find(Label(w, kLabelNode));
      if (it != count.end()) it->second += 1;
    }
    int best = 0;
    for (const auto& [name, n] : count) {
      if (node.empty() || n < best) {
        node = name;
        best = n;
      }
    }
    if (node.empty()) {
      facts->schedule_reason = "NoLiveNode";
      facts->schedule_message = "no node has a fresh heartbeat Lease";
      return Status::Ok();
    }
  }
  Json meta = {{"labels", {{std::string(kLabelNode), node}}}};
  if (!ws->meta.HasFinalizer(kWorkspaceFinalizer))
    meta["finalizers"] = FinalizersWith(ws->meta, kWorkspaceFinalizer);
  ASSIGN_OR_RETURN(Json patched, ctx_.client->Patch(WorkspaceResource(), ws->meta.ns, ws->meta.name,
                                                    kube::PatchType::kMerge,
                                                    GuardedMetaPatch(ws->meta, meta)));
  *ws = WorkspaceView::Parse(std::move(patched));
  facts->node = node;
  facts->placed_now = true;
  log::Info("workspace scheduled", {{"workspace", ws->meta.Key()}, {"node", node}});
  return Status::Ok();
}

Status WorkspaceReconciler::EnsureFinalizer(WorkspaceView* ws) {
  if (ws->meta.HasFinalizer(kWorkspaceFinalizer)) return Status::Ok();
  ASSIGN_OR_RETURN(Json patched,
                   AddFinalizer(ctx_, WorkspaceResource(), ws->meta, kWorkspaceFinalizer));
  *ws = WorkspaceView::Parse(std::move(patched));
  return Status::Ok();
}

// As a Sandbox's token (docs/operator.md, "Token"): created once, read back
// when the name is taken by this Workspace's own Secret, never touched when
// it is someone else's.
Status WorkspaceReconciler::EnsureToken(const WorkspaceView& ws, WorkspaceFacts* facts, Outcome* out) {
  facts->token_secret = WorkspaceTokenSecretName(ws.meta.name);
  if (!facts->token_sha256.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(TokenSecretResult t,
                   EnsureTokenSecret(ctx_, ws.object, ws.meta, "Workspace", facts->token_secret,
                                     kWorkspaceTokenSecretType, out));
  RecordToken(t, facts);
  return Status::Ok();
}

NodeStanding WorkspaceReconciler::Standing(const std::string& node, kube::TimePoint now) {
  return StandingOf(node, NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now),
                    ctx_.lease_absence, now, ctx_.config.node_gone_grace);
}

// A placed workspace whose node is gone past the grace period is Failed
// (NodeLost): its disk is out of reach. It stays placed there: a node that
// comes back with its state directory has the disk again.
void WorkspaceReconciler::CheckNode(const WorkspaceView& ws, WorkspaceFacts* facts, Outcome* out) {
  (void)ws;
  if (facts->node.empty() || facts->placed_now) return;
  const kube::TimePoint now = ctx_.clock->Now();
  const NodeStanding st = Standing(facts->node, now);
  if (st.alive) return;
  if (now < st.gone_at) {
    out->RequeueWithin(st.gone_at - now);
    return;
  }
  facts->node_lost = "node " + facts->node + (st.has_lease ? " has not renewed its Lease since "
                                                           : " has had no heartbeat Lease since ") +
                     kube::FormatTime(st.expired_at) + ": its disk is out of reach";
}

Result<Outcome> WorkspaceReconciler::Finalize(const WorkspaceView& ws, WorkspaceFacts facts) {
  if (!ws.meta.HasFinalizer(kWorkspaceFinalizer)) return Outcome{};
  const kube::TimePoint now = ctx_.clock->Now();
  std::string why;
  Outcome out;
  if (facts.node.empty()) {
    why = "NeverScheduled";
  } else if (ws.status.disk.state == "Deleted") {
    why = "DiskDeleted";
  } else if (const NodeStanding st = Standing(facts.node, now); st.alive) {
    out.RequeueWithin(std::chrono::seconds(30));  // the node's status write wakes us sooner
  } else if (now >= st.gone_at) {
    why = "NodeGone";
  } else {
    out.RequeueWithin(st.gone_at - now);
  }
  if (why.empty()) {
    RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, WorkspaceResource(), ws.object,
                                         ComputeWorkspaceStatus(ws, facts, now)).status());
    return out;
  }
  RETURN_IF_ERROR(RemoveFinalizer(ctx_, WorkspaceResource(), ws.meta, kWorkspaceFinalizer));
  log::Info("workspace finalized", {{"workspace", ws.meta.Key()}, {"node", facts.node}, {"why", why}});
  return Outcome{};
}

}  // namespace kubicle::op
