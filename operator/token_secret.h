// The token Secret of a Sandbox or a Workspace (docs/operator.md, "Token"):
// created once with a new token, read back when the name is taken by the
// owner's own Secret, never deleted or overwritten when it is someone
// else's. Shared by the Sandbox and Workspace reconcilers, which differ only
// in the Secret's name and type and in what they remember of the hash.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "kube/clock.h"
#include "kube/kube_client.h"
#include "operator/api.h"
#include "operator/context.h"

namespace kubicle::op {

// Whether an existing Secret named like an owner's token Secret is that
// owner's (controller ownerReference to its UID) and holds a token. Pure.
struct TokenSecretCheck {
  std::string token;    // decoded data.token when usable
  std::string reason;   // "" when usable; TokenSecretConflict, TokenSecretPendingDeletion,
                        // TokenSecretInvalid
  std::string problem;  // the message for the Ready condition
};
// `owner_kind` is the kind of the owner (Sandbox, Workspace) in messages and
// in the ownerReference looked for.
TokenSecretCheck CheckTokenSecret(const Json& secret, const std::string& sandbox_name,
                                  const std::string& sandbox_uid,
                                  const std::string& owner_kind = "Sandbox");

// What EnsureTokenSecret found.
struct TokenSecretResult {
  std::string sha256;      // hex SHA-256 of the token; "" when check.problem is set
  bool created = false;    // made by this call; false: an existing Secret read back
  TokenSecretCheck check;  // the existing Secret's check (problem "" when usable)
  // When check.problem is set: how soon to look again (pending deletion:
  // `pending_retry`, a Secret that may go soon; otherwise a minute).
  kube::Duration retry_after{};
};

// Through `ctx.client`: the Secret `secret_name` of type `type` for the object `owner` (its
// metadata `meta`, of kind `owner_kind`): created holding a new token, with
// the owner's run and agent labels and a controller ownerReference to it.
// When the name is taken, the Secret is read back and checked
// (CheckTokenSecret); it is never changed, and when it is not the owner's
// `out` looks again (pending deletion: within unschedulable_retry, the Secret
// may go soon; otherwise within a minute). Errors: the apiserver's, and
// Unavailable when the Secret vanished between the create and the read (the
// next pass creates it).
Result<TokenSecretResult> EnsureTokenSecret(const Context& ctx, const Json& owner,
                                            const ObjectMeta& meta, const std::string& owner_kind,
                                            const std::string& secret_name, std::string_view type,
                                            Outcome* out);

// Copies `t` into a reconciler's facts (SandboxFacts, WorkspaceFacts): the
// hash, or the problem the status reports.
template <typename Facts>
void RecordToken(const TokenSecretResult& t, Facts* facts) {
  facts->token_sha256 = t.sha256;
  facts->token_problem_reason = t.check.reason;
  facts->token_problem = t.check.problem;
}

}  // namespace kubicle::op
