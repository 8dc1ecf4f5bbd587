// Reconciles one Sandbox: a short sequence of named steps, each idempotent,
// so a pass interrupted anywhere (operator killed, conflict) is completed by
// the next one:
//   deleting? -> Finalize (remove the finalizer once the node reports
//                teardown, or the node is gone past the grace period)
//   EnsureFinalizer -> ExpireIfDue (delete at expiry) -> EnsurePlacement
//   (label kubicle.dev/node) -> EnsureToken (owned Secret) -> status
// Status is recomputed from the world and written only when it changed. A
// spec the view cannot read (views.h) is not placed: Scheduled False
// InvalidSpec names the fields.
#pragma once

#include <string>

#include "operator/context.h"
#include "operator/sandbox_status.h"

namespace kubicle::op {

class SandboxReconciler final : public Reconciler {
 public:
  explicit SandboxReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key) override;

 private:
  Result<Outcome> Finalize(const SandboxView& sbx);
  Status EnsureFinalizer(SandboxView* sbx);
  void CheckNode(const SandboxView& sbx, SandboxFacts* facts, Outcome* out);
  Result<bool> ExpireIfDue(const SandboxView& sbx, const SandboxFacts& facts);
  Status EnsurePlacement(SandboxView* sbx, SandboxFacts* facts);
  Status EnsureToken(const SandboxView& sbx, SandboxFacts* facts);
  std::map<std::string, NodeLoad> CurrentLoad(std::vector<std::string>* placed_keys);
  // Memory of a Sandbox without spec.resources.memoryMiB: its template's
  // ("ns/name"), memoized in `memo`.
  int64_t TemplateMemory(const std::string& template_key, std::map<std::string, int64_t>* memo);

  Context ctx_;
};

// Name of a Sandbox's token Secret.
std::string TokenSecretName(const std::string& sandbox_name);

}  // namespace kubicle::op
