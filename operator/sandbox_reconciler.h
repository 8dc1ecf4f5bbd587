// Reconciles one Sandbox: a short sequence of named steps, each idempotent,
// so a pass interrupted anywhere (operator killed, conflict) is completed by
// the next one:
//   deleting? -> Finalize (remove the finalizer once the node reports
//                teardown, or the node is gone past the grace period)
//   EnsureFinalizer -> ExpireIfDue (delete at expiry) -> EnsurePlacement
//   (label kubicle.dev/node) -> EnsureToken (owned Secret; never deletes
//   one: an owned one whose hash was not recorded is read back, a foreign
//   one fails the Sandbox) -> status
// Status is recomputed from the world and written only when it changed. A
// spec the view cannot read (kube/api/types.h) is not placed: Scheduled False
// InvalidSpec names the fields.
#pragma once

#include <string>

#include "operator/context.h"
#include "operator/recent_writes.h"
#include "operator/sandbox_status.h"
#include "operator/token_secret.h"  // CheckTokenSecret, EnsureTokenSecret

namespace kubicle::op {

class SandboxReconciler final : public Reconciler {
 public:
  explicit SandboxReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key) override;

 private:
  Result<Outcome> Finalize(const SandboxView& sbx);
  Status EnsureFinalizer(SandboxView* sbx);
  void CheckNode(const SandboxView& sbx, SandboxFacts* facts, Outcome* out);
  // The node's Lease (or how long it has been missing) against the grace.
  NodeStanding Standing(const std::string& node, kube::TimePoint now);
  Result<bool> ExpireIfDue(const SandboxView& sbx, const SandboxFacts& facts);
  Status EnsurePlacement(SandboxView* sbx, SandboxFacts* facts);
  // spec.workspaceRef (sandbox_workspace.cc): whether the Sandbox may be
  // placed now, and then on which node (the workspace's, in `*node`). When
  // not, facts say why (WorkspaceNotFound, WorkspaceNotReady,
  // WorkspaceInUse). Claims the workspace for this Sandbox when it may.
  bool WorkspaceAllows(const SandboxView& sbx, SandboxFacts* facts, std::string* node);
  Status EnsureToken(const SandboxView& sbx, SandboxFacts* facts, Outcome* out);
  std::map<std::string, NodeLoad> CurrentLoad(std::vector<std::string>* placed_keys);
  // Memory of a Sandbox without spec.resources.memoryMiB: its template's
  // ("ns/name"), memoized in `memo`.
  int64_t TemplateMemory(const std::string& template_key, std::map<std::string, int64_t>* memo);

  Context ctx_;
  RecentWrites recent_;  // shared by the workers' passes
};

// Name of a Sandbox's token Secret.
std::string TokenSecretName(const std::string& sandbox_name);
inline constexpr std::string_view kTokenSecretType = "kubicle.dev/sandbox-token";

}  // namespace kubicle::op
