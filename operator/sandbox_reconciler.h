// Reconciles one Sandbox: a short sequence of named steps, each idempotent,
// so a pass interrupted anywhere (operator killed, conflict) is completed by
// the next one:
//   deleting? -> Finalize (remove the finalizer once the node reports
//                teardown, or the node is gone past the grace period)
//   EnsureFinalizer -> ExpireIfDue (delete at expiry) -> EnsurePlacement
//   (label kubicle.dev/node) -> EnsureToken (owned Secret) -> status
// Status is recomputed from the world and written only when it changed.
#pragma once

#include <string>

#include "operator/context.h"
#include "operator/sandbox_status.h"

namespace kubicle::op {

class SandboxReconciler {
 public:
  explicit SandboxReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key);

 private:
  Result<Outcome> Finalize(const Json& sbx);
  Status EnsureFinalizer(Json* sbx);
  void CheckNode(const Json& sbx, SandboxFacts* facts, Outcome* out);
  Result<bool> ExpireIfDue(const Json& sbx, const SandboxFacts& facts);
  Status EnsurePlacement(Json* sbx, SandboxFacts* facts);
  Status EnsureToken(const Json& sbx, SandboxFacts* facts);
  std::map<std::string, NodeLoad> CurrentLoad(std::vector<std::string>* placed_keys);
  // Memory a Sandbox takes; template sizes are memoized in `by_template`.
  int64_t MemoryOf(const Json& sbx, std::map<std::string, int64_t>* by_template);

  Context ctx_;
};

// Name of a Sandbox's token Secret.
std::string TokenSecretName(const std::string& sandbox_name);

}  // namespace kubicle::op
