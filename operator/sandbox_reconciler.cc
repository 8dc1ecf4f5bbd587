#include "operator/sandbox_reconciler.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdio>

#include "common/log.h"
#include "kube/resource.h"
#include "kube/time_format.h"

namespace kubicle::op {

using kube::SandboxResource;

namespace {

std::string Hex(const unsigned char* p, size_t n) {
  std::string out;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof(b), "%02x", p[i]);
    out += b;
  }
  return out;
}

Result<std::string> NewToken() {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return Status::Internal("RAND_bytes failed");
  return Hex(raw, sizeof(raw));
}

std::string Sha256Hex(const std::string& s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return Hex(d, sizeof(d));
}

// Metadata patch guarded by the resourceVersion we read.
Json GuardedMetaPatch(const ObjectMeta& meta, Json metadata) {
  metadata["resourceVersion"] = meta.resource_version;
  return Json{{"metadata", metadata}};
}

Json WithFinalizer(const ObjectMeta& meta) {
  Json finalizers = meta.finalizers;
  finalizers.push_back(kFinalizer);
  return finalizers;
}

}  // namespace

std::string TokenSecretName(const std::string& sandbox_name) {
  return BoundedName(sandbox_name, "-token");
}

Result<Outcome> SandboxReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(SandboxResource(), key);
  if (!got) {
    ctx_.scheduler->Forget(key);
    return Outcome{};
  }
  SandboxView sbx = SandboxView::Parse(std::move(*got));
  if (sbx.meta.deleting) return Finalize(sbx);

  SandboxFacts facts;
  facts.expires = ComputeExpiry(sbx, ctx_.config.default_ttl);
  ASSIGN_OR_RETURN(bool deleted, ExpireIfDue(sbx, facts));
  if (deleted) return Outcome{};

  // Placement adds the finalizer in the same write; EnsureFinalizer covers
  // Sandboxes that are already placed or cannot be placed yet.
  RETURN_IF_ERROR(EnsurePlacement(&sbx, &facts));
  RETURN_IF_ERROR(EnsureFinalizer(&sbx));
  RETURN_IF_ERROR(EnsureToken(sbx, &facts));
  Outcome out;
  CheckNode(sbx, &facts, &out);
  Json desired = ComputeSandboxStatus(sbx, facts, ctx_.clock->Now());
  ASSIGN_OR_RETURN(bool wrote, WriteStatusIfChanged(ctx_, SandboxResource(), sbx.object, desired));
  const std::string phase = desired["phase"].get<std::string>();  // ours: always a string
  if (wrote && sbx.status.phase != phase) {
    log::Info("sandbox phase", {{"sandbox", key}, {"phase", phase}, {"node", facts.node},
                                {"run", sbx.meta.Label(kLabelRun)}});
  }

  // Events last: they are best effort and must not delay what clients wait for.
  if (facts.placed_now) ctx_.Event(sbx.object, "Normal", "Scheduled", "placed on node " + facts.node);
  if (!facts.node_lost.empty() && wrote) ctx_.Event(sbx.object, "Warning", "NodeLost", facts.node_lost);
  if (facts.expires) out.RequeueWithin(*facts.expires - ctx_.clock->Now());
  if (facts.node.empty()) out.RequeueWithin(ctx_.config.unschedulable_retry);
  return out;
}

// A placed Sandbox whose node stopped renewing its Lease fails once the
// grace period is over (docs/operator.md, "Node protocol"); until then it is
// looked at again when the grace ends.
void SandboxReconciler::CheckNode(const SandboxView& sbx, SandboxFacts* facts, Outcome* out) {
  if (facts->node.empty() || facts->placed_now) return;
  const std::string& vm = sbx.status.vm_state;
  if (vm == "Failed" || vm == "Terminated") return;  // the node said how it ended
  const kube::TimePoint now = ctx_.clock->Now();
  auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now);
  auto it = nodes.find(facts->node);
  if (it != nodes.end() && it->second.alive) return;
  if (it != nodes.end() && now < it->second.expires + ctx_.config.node_gone_grace) {
    out->RequeueWithin(it->second.expires + ctx_.config.node_gone_grace - now);
    return;
  }
  facts->node_lost = it == nodes.end()
                         ? "node " + facts->node + " has no heartbeat Lease: its VM is lost"
                         : "node " + facts->node + " has not renewed its Lease since " +
                               kube::FormatTime(it->second.expires) + " (grace " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                  ctx_.config.node_gone_grace).count()) +
                               " s): its VM is lost";
}

Status SandboxReconciler::EnsureFinalizer(SandboxView* sbx) {
  if (sbx->meta.HasFinalizer(kFinalizer)) return Status::Ok();
  ASSIGN_OR_RETURN(Json patched,
                   ctx_.client->Patch(SandboxResource(), sbx->meta.ns, sbx->meta.name,
                                      kube::PatchType::kMerge,
                                      GuardedMetaPatch(sbx->meta,
                                                       {{"finalizers", WithFinalizer(sbx->meta)}})));
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
    auto got = ctx_.lister->Get(kube::SandboxTemplateResource(), kube::ObjectKey(ns, tmpl_name));
    if (!got) {
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
    auto picked = ctx_.scheduler->Place(key, {TemplateReadyNodes(tmpl), memory}, nodes, load, placed);
    if (!picked.ok()) {
      facts->schedule_reason = picked.status().code() == StatusCode::kNotFound
                                   ? "NoReadyNode" : "InsufficientCapacity";
      facts->schedule_message = picked.status().message();
      return Status::Ok();
    }
    node = *picked;
  }
  Json labels = {{std::string(kLabelNode), node}, {std::string(kLabelTemplate), tmpl_name}};
  Json meta = {{"labels", labels}};
  if (!sbx->meta.HasFinalizer(kFinalizer)) {
    meta["finalizers"] = WithFinalizer(sbx->meta);  // one write instead of two on the hot path
  }
  auto patched = ctx_.client->Patch(SandboxResource(), ns, sbx->meta.name, kube::PatchType::kMerge,
                                    GuardedMetaPatch(sbx->meta, meta));
  if (!patched.ok()) {
    ctx_.scheduler->Forget(key);
    return patched.status();
  }
  *sbx = SandboxView::Parse(std::move(*patched));
  facts->node = node;
  facts->placed_now = true;
  log::Info("sandbox scheduled", {{"sandbox", key}, {"node", node}, {"run", sbx->meta.Label(kLabelRun)}});
  return Status::Ok();
}

Status SandboxReconciler::EnsureToken(const SandboxView& sbx, SandboxFacts* facts) {
  facts->token_secret = TokenSecretName(sbx.meta.name);
  facts->token_sha256 = sbx.status.token_sha256;
  if (!facts->token_sha256.empty()) return Status::Ok();
  // The operator may only create Secrets (never read them): if one exists
  // whose hash was never recorded, its token is unknown, so replace it.
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Json labels = Json::object();
  for (std::string_view l : {kLabelRun, kLabelAgent}) {
    if (std::string v = sbx.meta.Label(l); !v.empty()) labels[std::string(l)] = v;
  }
  Json secret = {{"metadata", {{"name", facts->token_secret}, {"labels", labels},
                               {"ownerReferences", Json::array({ControllerRef(sbx.object)})}}},
                 {"type", "kubicle.dev/sandbox-token"},
                 {"stringData", {{"token", token}}}};
  const std::string& ns = sbx.meta.ns;
  auto created = ctx_.client->Create(kube::SecretResource(), ns, secret);
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    // Usually an earlier pass made it and recorded its hash, and this pass
    // read a cache that does not show the record yet: the apiserver's copy
    // says. Replacing it then would leave a node holding the old hash.
    auto fresh = ctx_.client->Get(SandboxResource(), ns, sbx.meta.name);
    if (!fresh.ok()) return fresh.status();
    const SandboxView current = SandboxView::Parse(std::move(*fresh));
    if (current.meta.uid == sbx.meta.uid && !current.status.token_sha256.empty()) {
      facts->token_sha256 = current.status.token_sha256;
      return Status::Ok();
    }
    Status d = ctx_.client->Delete(kube::SecretResource(), ns, facts->token_secret);
    if (!d.ok() && !kube::IsNotFound(d)) return d;
    created = ctx_.client->Create(kube::SecretResource(), ns, secret);
  }
  if (!created.ok()) return created.status();
  facts->token_sha256 = Sha256Hex(token);
  return Status::Ok();
}

Result<Outcome> SandboxReconciler::Finalize(const SandboxView& sbx) {
  const std::string key = sbx.meta.Key();
  if (!sbx.meta.HasFinalizer(kFinalizer)) return Outcome{};
  const std::string node = sbx.meta.Label(kLabelNode);
  const kube::TimePoint now = ctx_.clock->Now();
  auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now);
  auto it = nodes.find(node);
  std::string why;
  Outcome out;
  if (node.empty()) {
    why = "NeverScheduled";
  } else if (sbx.status.vm_state == "Terminated") {
    why = "TornDown";
  } else if (it == nodes.end() ||
             (!it->second.alive && now >= it->second.expires + ctx_.config.node_gone_grace)) {
    why = "NodeGone";
  } else if (!it->second.alive) {
    out.RequeueWithin(it->second.expires + ctx_.config.node_gone_grace - now);
  } else {
    out.RequeueWithin(std::chrono::seconds(30));  // the node's status write wakes us sooner
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
  Json finalizers = Json::array();
  for (const std::string& f : sbx.meta.finalizers) {
    if (f != kFinalizer) finalizers.push_back(f);
  }
  auto r = ctx_.client->Patch(SandboxResource(), sbx.meta.ns, sbx.meta.name, kube::PatchType::kMerge,
                              GuardedMetaPatch(sbx.meta, {{"finalizers", finalizers}}));
  if (!r.ok() && !kube::IsNotFound(r.status())) return r.status();
  ctx_.scheduler->Forget(key);
  log::Info("sandbox finalized", {{"sandbox", key}, {"node", node}, {"why", why}});
  return Outcome{};
}

}  // namespace kubicle::op
