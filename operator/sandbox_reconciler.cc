#include "operator/sandbox_reconciler.h"

#include <openssl/rand.h>

#include <span>

#include "common/base64.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/sha256.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "kube/time_format.h"

namespace kubicle::op {

using kube::SandboxResource;

std::string TokenSecretName(const std::string& sandbox_name) {
  return BoundedName(sandbox_name, "-token");
}

Result<Outcome> SandboxReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(SandboxResource(), key);
  if (!got) {
    recent_.Forget(key);
    ctx_.scheduler->Forget(key);
    if (ctx_.workspace_claims) ctx_.workspace_claims->Release(key);
    return Outcome{};
  }
  SandboxView sbx = SandboxView::Parse(std::move(*got));
  recent_.CaughtUp(key, sbx.meta.uid, kube::At(sbx.object, {"status"}));
  if (sbx.meta.deleting) return Finalize(sbx);

  SandboxFacts facts;
  facts.expires = ComputeExpiry(sbx, ctx_.config.default_ttl);
  ASSIGN_OR_RETURN(bool deleted, ExpireIfDue(sbx, facts));
  if (deleted) return Outcome{};

  // Placement adds the finalizer in the same write; EnsureFinalizer covers
  // Sandboxes that are already placed or cannot be placed yet.
  RETURN_IF_ERROR(EnsurePlacement(&sbx, &facts));
  RETURN_IF_ERROR(EnsureFinalizer(&sbx));
  Outcome out;
  RETURN_IF_ERROR(EnsureToken(sbx, &facts, &out));
  CheckNode(sbx, &facts, &out);
  Json desired = ComputeSandboxStatus(sbx, facts, ctx_.clock->Now());
  bool wrote = false;
  // A copy from before our own last write would only write it again (and
  // be refused 409 on its resourceVersion): the update event brings the
  // newer copy.
  if (!recent_.Repeats(key, sbx.meta.uid, kube::At(sbx.object, {"status"}), desired)) {
    ASSIGN_OR_RETURN(wrote, WriteStatusIfChanged(ctx_, SandboxResource(), sbx.object, desired));
    if (wrote) recent_.Status(key, sbx.meta.uid, desired);
  }
  const std::string phase = desired["phase"].get<std::string>();  // ours: always a string
  if (wrote && sbx.status.phase != phase) {
    log::Info("sandbox phase", {{"sandbox", key}, {"phase", phase}, {"node", facts.node},
                                {"run", sbx.meta.Label(kLabelRun)}});
  }

  // Events last: they are best effort and must not delay what clients wait for.
  if (facts.placed_now) ctx_.Event(sbx.object, "Normal", "Scheduled", "placed on node " + facts.node);
  if (!facts.node_lost.empty() && wrote) ctx_.Event(sbx.object, "Warning", "NodeLost", facts.node_lost);
  if (!facts.token_problem.empty() && wrote) {
    ctx_.Event(sbx.object, "Warning", facts.token_problem_reason, facts.token_problem);
  }
  if (facts.expires) out.RequeueWithin(*facts.expires - ctx_.clock->Now());
  if (facts.node.empty()) out.RequeueWithin(ctx_.config.unschedulable_retry);
  return out;
}

// A placed Sandbox whose node stopped renewing its Lease fails once the
// grace period is over (docs/operator.md, "Node protocol"); until then it is
// looked at again when the grace ends.
void SandboxReconciler::CheckNode(const SandboxView& sbx, SandboxFacts* facts, Outcome* out) {
  if (facts->node.empty() || facts->placed_now) return;
  const std::string& vm = sbx.status.vm.state;
  if (vm == "Failed" || vm == "Terminated") return;  // the node said how it ended
  const kube::TimePoint now = ctx_.clock->Now();
  const NodeStanding st = Standing(facts->node, now);
  if (st.alive) return;
  if (now < st.gone_at) {
    out->RequeueWithin(st.gone_at - now);
    return;
  }
  const std::string grace = " (grace " +
                            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                               ctx_.config.node_gone_grace).count()) +
                            " s): its VM is lost";
  facts->node_lost = !st.has_lease
                         ? "node " + facts->node + " has had no heartbeat Lease since " +
                               kube::FormatTime(st.expired_at) + grace
                         : "node " + facts->node + " has not renewed its Lease since " +
                               kube::FormatTime(st.expired_at) + grace;
}

NodeStanding SandboxReconciler::Standing(const std::string& node, kube::TimePoint now) {
  return StandingOf(node, NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now),
                    ctx_.lease_absence, now, ctx_.config.node_gone_grace);
}

Status SandboxReconciler::EnsureFinalizer(SandboxView* sbx) {
  if (sbx->meta.HasFinalizer(kFinalizer)) return Status::Ok();
  ASSIGN_OR_RETURN(Json patched, AddFinalizer(ctx_, SandboxResource(), sbx->meta, kFinalizer));
  *sbx = SandboxView::Parse(std::move(patched));
  return Status::Ok();
}

Result<bool> SandboxReconciler::ExpireIfDue(const SandboxView& sbx, const SandboxFacts& facts) {
  if (!facts.expires || ctx_.clock->Now() < *facts.expires) return false;
  SandboxFacts expired = facts;
  expired.expired = true;
  expired.node = sbx.meta.Label(kLabelNode);
  Json desired = ComputeSandboxStatus(sbx, expired, ctx_.clock->Now());
  desired.erase("phase");  // the phase moves to Terminating with the delete
  auto wrote = WriteStatusIfChanged(ctx_, SandboxResource(), sbx.object, desired);
  if (!wrote.ok() && !kube::IsNotFound(wrote.status())) return wrote.status();
  kube::DeleteOptions opts;
  opts.propagation_policy = "Background";
  opts.precondition_uid = sbx.meta.uid;
  Status s = ctx_.client->Delete(SandboxResource(), sbx.meta.ns, sbx.meta.name, opts);
  if (!s.ok() && !kube::IsNotFound(s)) return s;
  log::Info("sandbox expired", {{"sandbox", sbx.meta.Key()}, {"run", sbx.meta.Label(kLabelRun)}});
  ctx_.Event(sbx.object, "Normal", "Expired", "deleted at its expiry");
  return true;
}

int64_t SandboxReconciler::TemplateMemory(const std::string& template_key,
                                          std::map<std::string, int64_t>* memo) {
  if (auto it = memo->find(template_key); it != memo->end()) return it->second;
  int64_t mib = ctx_.config.default_memory_mib;
  if (auto t = ctx_.lister->Get(kube::SandboxTemplateResource(), template_key)) {
    mib = ParseSandboxTemplateSpec(*t, nullptr).memory_mib.value_or(mib);
  }
  (*memo)[template_key] = mib;
  return mib;
}

std::map<std::string, NodeLoad> SandboxReconciler::CurrentLoad(std::vector<std::string>* placed) {
  std::map<std::string, NodeLoad> load;
  struct Unsized {
    std::string node, template_key;
  };
  std::vector<Unsized> unsized;  // template lookups cannot run under the cache lock
  ctx_.lister->ForEach(SandboxResource(), [&](const Json& s) {
    std::string node = Label(s, kLabelNode);
    if (node.empty()) return;
    load[node].sandboxes += 1;
    const SandboxSpec spec = ParseSandboxSpec(s, nullptr);
    if (spec.memory_mib) {
      load[node].memory_mib += *spec.memory_mib;
    } else {
      unsized.push_back({node, kube::ObjectKey(Namespace(s), spec.template_name)});
    }
    placed->push_back(kube::ObjectKey(Namespace(s), Name(s)));
  });
  std::map<std::string, int64_t> memory_by_template;
  for (const Unsized& u : unsized) {
    load[u.node].memory_mib += TemplateMemory(u.template_key, &memory_by_template);
  }
  return load;
}

Status SandboxReconciler::EnsurePlacement(SandboxView* sbx, SandboxFacts* facts) {
  facts->node = sbx->meta.Label(kLabelNode);
  if (!facts->node.empty()) return Status::Ok();
  if (!sbx->problems.empty()) {
    // Placing a spec we cannot read would guess its template, size or fork source.
    facts->schedule_reason = "InvalidSpec";
    facts->schedule_message = JoinProblems(sbx->problems);
    return Status::Ok();
  }
  const std::string& ns = sbx->meta.ns;
  const std::string key = sbx->meta.Key();
  const std::string& tmpl_name = sbx->spec.template_name;
  std::string node;
  if (sbx->spec.fork_source) {
    // A fork runs where its source runs: the VM is forked on that host.
    const std::string& source = *sbx->spec.fork_source;
    auto src = ctx_.lister->Get(SandboxResource(), kube::ObjectKey(ns, source));
    node = src ? Label(*src, kLabelNode) : "";
    if (node.empty()) {
      facts->schedule_reason = src ? "SourceNotScheduled" : "SourceNotFound";
      facts->schedule_message =
          "fork source " + source + (src ? " is not placed yet" : " does not exist");
      return Status::Ok();
    }
  } else {
    std::string workspace_node;
    if (sbx->spec.workspace && !WorkspaceAllows(*sbx, facts, &workspace_node)) return Status::Ok();
    auto got = ctx_.lister->Get(kube::SandboxTemplateResource(), kube::ObjectKey(ns, tmpl_name));
    if (!got) {
      if (ctx_.workspace_claims) ctx_.workspace_claims->Release(key);
      facts->schedule_reason = "TemplateNotFound";
      facts->schedule_message = "SandboxTemplate " + tmpl_name + " not found";
      return Status::Ok();
    }
    const SandboxTemplateView tmpl = SandboxTemplateView::Parse(std::move(*got));
    auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), ctx_.clock->Now());
    std::vector<std::string> placed;
    auto load = CurrentLoad(&placed);
    const int64_t memory = sbx->spec.memory_mib.value_or(
        tmpl.spec.memory_mib.value_or(ctx_.config.default_memory_mib));
    std::vector<std::string> ready = TemplateReadyNodes(tmpl);
    if (sbx->spec.workspace) {
      // Only the workspace's node: the disk lives there.
      std::erase_if(ready, [&](const std::string& n) { return n != workspace_node; });
    }
    auto picked = ctx_.scheduler->Place(key, {ready, memory}, nodes, load, placed);
    if (!picked.ok()) {
      if (ctx_.workspace_claims) ctx_.workspace_claims->Release(key);
      facts->schedule_reason = picked.status().code() == StatusCode::kNotFound
                                   ? "NoReadyNode" : "InsufficientCapacity";
      facts->schedule_message = picked.status().message();
      if (sbx->spec.workspace) {
        facts->schedule_message += " (only node " + workspace_node + ", where workspace " +
                                   *sbx->spec.workspace + " lives, is considered)";
      }
      return Status::Ok();
    }
    node = *picked;
  }
  Json labels = {{std::string(kLabelNode), node}, {std::string(kLabelTemplate), tmpl_name}};
  Json meta = {{"labels", labels}};
  if (!sbx->meta.HasFinalizer(kFinalizer)) {
    // One write instead of two on the hot path.
    meta["finalizers"] = FinalizersWith(sbx->meta, kFinalizer);
  }
  auto patched = ctx_.client->Patch(SandboxResource(), ns, sbx->meta.name, kube::PatchType::kMerge,
                                    GuardedMetaPatch(sbx->meta, meta));
  if (!patched.ok()) {
    ctx_.scheduler->Forget(key);
    if (ctx_.workspace_claims) ctx_.workspace_claims->Release(key);
    return patched.status();
  }
  *sbx = SandboxView::Parse(std::move(*patched));
  facts->node = node;
  facts->placed_now = true;
  log::Info("sandbox scheduled", {{"sandbox", key}, {"node", node}, {"run", sbx->meta.Label(kLabelRun)}});
  return Status::Ok();
}

Status SandboxReconciler::EnsureToken(const SandboxView& sbx, SandboxFacts* facts, Outcome* out) {
  if (const auto& given = sbx.spec.token_sha256) {
    // The client's own token (spec.tokenSha256): no Secret to make or read.
    // The CRD refuses a malformed hash; one that got past it (an older
    // CRD) fails the Sandbox instead of reaching a node.
    if (IsSha256Hex(*given)) {
      facts->token_sha256 = *given;
      return Status::Ok();
    }
    facts->token_problem_reason = "TokenHashInvalid";
    facts->token_problem = "spec.tokenSha256 is not the hex SHA-256 of a token (64 lowercase hex digits)";
    return Status::Ok();
  }
  facts->token_secret = TokenSecretName(sbx.meta.name);
  facts->token_sha256 = sbx.status.token_sha256;
  if (!facts->token_sha256.empty()) return Status::Ok();
  // Made by an earlier pass whose status write this copy does not show yet.
  facts->token_sha256 = recent_.TokenOf(sbx.meta.Key(), sbx.meta.uid);
  if (!facts->token_sha256.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(TokenSecretResult t,
                   EnsureTokenSecret(ctx_, sbx.object, sbx.meta, "Sandbox", facts->token_secret,
                                     kTokenSecretType, out));
  RecordToken(t, facts);
  if (t.sha256.empty()) return Status::Ok();
  recent_.Token(sbx.meta.Key(), sbx.meta.uid, facts->token_sha256);
  if (!t.created) {
    // This Sandbox's own Secret whose hash was never recorded (the operator
    // died between the create and the status write, or this pass read a
    // cache that does not show the record yet): the same hash any node may
    // already hold.
    log::Info("sandbox token recovered",
              {{"sandbox", sbx.meta.Key()}, {"secret", facts->token_secret}});
  }
  return Status::Ok();
}

Result<Outcome> SandboxReconciler::Finalize(const SandboxView& sbx) {
  const std::string key = sbx.meta.Key();
  if (!sbx.meta.HasFinalizer(kFinalizer)) return Outcome{};
  const std::string node = sbx.meta.Label(kLabelNode);
  const kube::TimePoint now = ctx_.clock->Now();
  std::string why;
  Outcome out;
  if (node.empty()) {
    why = "NeverScheduled";
  } else if (sbx.status.vm.state == "Terminated") {
    why = "TornDown";
  } else if (const NodeStanding st = Standing(node, now); st.alive) {
    out.RequeueWithin(std::chrono::seconds(30));  // the node's status write wakes us sooner
  } else if (now >= st.gone_at) {
    why = "NodeGone";  // a missing Lease too, but only after the same grace
  } else {
    out.RequeueWithin(st.gone_at - now);
  }
  if (why.empty()) {
    SandboxFacts facts{node, "", "", std::nullopt, false, sbx.status.token_secret_name,
                       sbx.status.token_sha256};
    facts.expires = ComputeExpiry(sbx, ctx_.config.default_ttl);
    facts.expired = facts.expires && now >= *facts.expires;
    RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, SandboxResource(), sbx.object,
                                         ComputeSandboxStatus(sbx, facts, now)).status());
    return out;
  }
  RETURN_IF_ERROR(RemoveFinalizer(ctx_, SandboxResource(), sbx.meta, kFinalizer));
  ctx_.scheduler->Forget(key);
  log::Info("sandbox finalized", {{"sandbox", key}, {"node", node}, {"why", why}});
  return Outcome{};
}

}  // namespace kubicle::op
