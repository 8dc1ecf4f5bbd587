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
Json GuardedMetaPatch(const Json& sbx, Json metadata) {
  metadata["resourceVersion"] = sbx["metadata"].value("resourceVersion", "");
  return Json{{"metadata", metadata}};
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
  Json sbx = *got;
  if (IsDeleting(sbx)) return Finalize(sbx);

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
  ASSIGN_OR_RETURN(bool wrote, WriteStatusIfChanged(ctx_, SandboxResource(), sbx, desired));
  if (wrote && sbx.value("status", Json::object()).value("phase", "") != desired["phase"]) {
    log::Info("sandbox phase", {{"sandbox", key}, {"phase", desired["phase"].get<std::string>()},
                                {"node", facts.node}, {"run", Label(sbx, kLabelRun)}});
  }

  // Events last: they are best effort and must not delay what clients wait for.
  if (facts.placed_now) ctx_.Event(sbx, "Normal", "Scheduled", "placed on node " + facts.node);
  if (!facts.node_lost.empty() && wrote) ctx_.Event(sbx, "Warning", "NodeLost", facts.node_lost);
  if (facts.expires) out.RequeueWithin(*facts.expires - ctx_.clock->Now());
  if (facts.node.empty()) out.RequeueWithin(ctx_.config.unschedulable_retry);
  return out;
}

// A placed Sandbox whose node stopped renewing its Lease fails once the
// grace period is over (docs/operator.md, "Node protocol"); until then it is
// looked at again when the grace ends.
void SandboxReconciler::CheckNode(const Json& sbx, SandboxFacts* facts, Outcome* out) {
  if (facts->node.empty() || facts->placed_now) return;
  const std::string vm = sbx.contains("status") && sbx["status"].contains("vm")
                             ? sbx["status"]["vm"].value("state", "") : "";
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

Status SandboxReconciler::EnsureFinalizer(Json* sbx) {
  if (HasFinalizer(*sbx, kFinalizer)) return Status::Ok();
  Json finalizers = (*sbx)["metadata"].value("finalizers", Json::array());
  finalizers.push_back(kFinalizer);
  ASSIGN_OR_RETURN(*sbx, ctx_.client->Patch(SandboxResource(), Namespace(*sbx), Name(*sbx),
                                            kube::PatchType::kMerge,
                                            GuardedMetaPatch(*sbx, {{"finalizers", finalizers}})));
  return Status::Ok();
}

Result<bool> SandboxReconciler::ExpireIfDue(const Json& sbx, const SandboxFacts& facts) {
  if (!facts.expires || ctx_.clock->Now() < *facts.expires) return false;
  SandboxFacts expired = facts;
  expired.expired = true;
  expired.node = Label(sbx, kLabelNode);
  Json desired = ComputeSandboxStatus(sbx, expired, ctx_.clock->Now());
  desired.erase("phase");  // the phase moves to Terminating with the delete
  auto wrote = WriteStatusIfChanged(ctx_, SandboxResource(), sbx, desired);
  if (!wrote.ok() && !kube::IsNotFound(wrote.status())) return wrote.status();
  kube::DeleteOptions opts;
  opts.propagation_policy = "Background";
  opts.precondition_uid = Uid(sbx);
  Status s = ctx_.client->Delete(SandboxResource(), Namespace(sbx), Name(sbx), opts);
  if (!s.ok() && !kube::IsNotFound(s)) return s;
  log::Info("sandbox expired", {{"sandbox", kube::ObjectKey(Namespace(sbx), Name(sbx))},
                                {"run", Label(sbx, kLabelRun)}});
  ctx_.Event(sbx, "Normal", "Expired", "deleted at its expiry");
  return true;
}

int64_t SandboxReconciler::MemoryOf(const Json& sbx, std::map<std::string, int64_t>* by_template) {
  const Json& spec = sbx["spec"];
  if (spec.contains("resources") && spec["resources"].contains("memoryMiB")) {
    return spec["resources"]["memoryMiB"].get<int64_t>();
  }
  std::string key = kube::ObjectKey(Namespace(sbx), spec["templateRef"].value("name", ""));
  if (auto it = by_template->find(key); it != by_template->end()) return it->second;
  int64_t mib = ctx_.config.default_memory_mib;
  auto t = ctx_.lister->Get(kube::SandboxTemplateResource(), key);
  if (t && (*t)["spec"].contains("memoryMiB")) mib = (*t)["spec"]["memoryMiB"].get<int64_t>();
  (*by_template)[key] = mib;
  return mib;
}

std::map<std::string, NodeLoad> SandboxReconciler::CurrentLoad(std::vector<std::string>* placed) {
  std::map<std::string, NodeLoad> load;
  std::map<std::string, int64_t> memory_by_template;
  std::vector<Json> need_template;  // template lookups cannot run under the cache lock
  ctx_.lister->ForEach(SandboxResource(), [&](const Json& s) {
    std::string node = Label(s, kLabelNode);
    if (node.empty()) return;
    load[node].sandboxes += 1;
    const Json& spec = s["spec"];
    if (spec.contains("resources") && spec["resources"].contains("memoryMiB")) {
      load[node].memory_mib += spec["resources"]["memoryMiB"].get<int64_t>();
    } else {
      need_template.push_back(Json{{"metadata", {{"namespace", Namespace(s)}}},
                                   {"spec", {{"templateRef", spec["templateRef"]}}},
                                   {"node", node}});
    }
    placed->push_back(kube::ObjectKey(Namespace(s), Name(s)));
  });
  for (const Json& s : need_template) {
    load[s["node"].get<std::string>()].memory_mib += MemoryOf(s, &memory_by_template);
  }
  return load;
}

Status SandboxReconciler::EnsurePlacement(Json* sbx, SandboxFacts* facts) {
  facts->node = Label(*sbx, kLabelNode);
  if (!facts->node.empty()) return Status::Ok();
  const Json spec = sbx->value("spec", Json::object());
  const std::string ns = Namespace(*sbx);
  const std::string key = kube::ObjectKey(ns, Name(*sbx));
  const std::string tmpl_name = spec.value("templateRef", Json::object()).value("name", "");
  std::string node;
  if (spec.contains("forkSource")) {
    // A fork runs where its source runs: the VM is forked on that host.
    auto src = ctx_.lister->Get(SandboxResource(), kube::ObjectKey(ns, spec["forkSource"].get<std::string>()));
    node = src ? Label(*src, kLabelNode) : "";
    if (node.empty()) {
      facts->schedule_reason = src ? "SourceNotScheduled" : "SourceNotFound";
      facts->schedule_message = "fork source " + spec["forkSource"].get<std::string>() +
                                (src ? " is not placed yet" : " does not exist");
      return Status::Ok();
    }
  } else {
    auto tmpl = ctx_.lister->Get(kube::SandboxTemplateResource(), kube::ObjectKey(ns, tmpl_name));
    if (!tmpl) {
      facts->schedule_reason = "TemplateNotFound";
      facts->schedule_message = "SandboxTemplate " + tmpl_name + " not found";
      return Status::Ok();
    }
    auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), ctx_.clock->Now());
    std::vector<std::string> placed;
    auto load = CurrentLoad(&placed);
    std::map<std::string, int64_t> memory_by_template;
    PlacementRequest req{TemplateReadyNodes(*tmpl), MemoryOf(*sbx, &memory_by_template)};
    auto picked = ctx_.scheduler->Place(key, req, nodes, load, placed);
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
  if (!HasFinalizer(*sbx, kFinalizer)) {
    Json finalizers = (*sbx)["metadata"].value("finalizers", Json::array());
    finalizers.push_back(kFinalizer);
    meta["finalizers"] = finalizers;  // one write instead of two on the hot path
  }
  auto patched = ctx_.client->Patch(SandboxResource(), ns, Name(*sbx), kube::PatchType::kMerge,
                                    GuardedMetaPatch(*sbx, meta));
  if (!patched.ok()) {
    ctx_.scheduler->Forget(key);
    return patched.status();
  }
  *sbx = *patched;
  facts->node = node;
  facts->placed_now = true;
  log::Info("sandbox scheduled", {{"sandbox", key}, {"node", node}, {"run", Label(*sbx, kLabelRun)}});
  return Status::Ok();
}

Status SandboxReconciler::EnsureToken(const Json& sbx, SandboxFacts* facts) {
  facts->token_secret = TokenSecretName(Name(sbx));
  facts->token_sha256 = StatusString(sbx, "tokenSha256");
  if (!facts->token_sha256.empty()) return Status::Ok();
  // The operator may only create Secrets (never read them): if one exists
  // whose hash was never recorded, its token is unknown, so replace it.
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Json labels = Json::object();
  for (std::string_view l : {kLabelRun, kLabelAgent}) {
    if (!Label(sbx, l).empty()) labels[std::string(l)] = Label(sbx, l);
  }
  Json secret = {{"metadata", {{"name", facts->token_secret}, {"labels", labels},
                               {"ownerReferences", Json::array({ControllerRef(sbx)})}}},
                 {"type", "kubicle.dev/sandbox-token"},
                 {"stringData", {{"token", token}}}};
  auto created = ctx_.client->Create(kube::SecretResource(), Namespace(sbx), secret);
  if (!created.ok() && kube::IsAlreadyExists(created.status())) {
    Status d = ctx_.client->Delete(kube::SecretResource(), Namespace(sbx), facts->token_secret);
    if (!d.ok() && !kube::IsNotFound(d)) return d;
    created = ctx_.client->Create(kube::SecretResource(), Namespace(sbx), secret);
  }
  if (!created.ok()) return created.status();
  facts->token_sha256 = Sha256Hex(token);
  return Status::Ok();
}

Result<Outcome> SandboxReconciler::Finalize(const Json& sbx) {
  const std::string key = kube::ObjectKey(Namespace(sbx), Name(sbx));
  if (!HasFinalizer(sbx, kFinalizer)) return Outcome{};
  const std::string node = Label(sbx, kLabelNode);
  const kube::TimePoint now = ctx_.clock->Now();
  std::string vm_state;
  if (sbx.contains("status") && sbx["status"].contains("vm")) {
    vm_state = sbx["status"]["vm"].value("state", "");
  }
  auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now);
  auto it = nodes.find(node);
  std::string why;
  Outcome out;
  if (node.empty()) {
    why = "NeverScheduled";
  } else if (vm_state == "Terminated") {
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
    SandboxFacts facts{node, "", "", std::nullopt, false, StatusString(sbx, "tokenSecretName"),
                       StatusString(sbx, "tokenSha256")};
    facts.expires = ComputeExpiry(sbx, ctx_.config.default_ttl);
    facts.expired = facts.expires && now >= *facts.expires;
    RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, SandboxResource(), sbx,
                                         ComputeSandboxStatus(sbx, facts, now)).status());
    return out;
  }
  Json finalizers = Json::array();
  for (const Json& f : sbx["metadata"]["finalizers"]) {
    if (f != kFinalizer) finalizers.push_back(f);
  }
  auto r = ctx_.client->Patch(SandboxResource(), Namespace(sbx), Name(sbx), kube::PatchType::kMerge,
                              GuardedMetaPatch(sbx, {{"finalizers", finalizers}}));
  if (!r.ok() && !kube::IsNotFound(r.status())) return r.status();
  ctx_.scheduler->Forget(key);
  log::Info("sandbox finalized", {{"sandbox", key}, {"node", node}, {"why", why}});
  return Outcome{};
}

}  // namespace kubicle::op
