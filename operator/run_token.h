// A SandboxTemplate's run token (docs/operator.md, "Run tokens"): the
// bearer token of per-call runs of that template (POST
// /v1/templates/{name}/run on a node). It lives in the Secret
// RunTokenSecretName(template), owned by the template, so RBAC on that
// Secret decides who may run; the template's status publishes only its
// SHA-256 (status.runTokenSha256), which node agents hand to their node.
// Nodes never read Secrets.
//
// Contracts:
//  - The token is always read back from the Secret, never re-minted while
//    the Secret stands: a pass that failed after the create publishes the
//    same hash next time.
//  - A deleted Secret is made again with a new token at the template's
//    next pass (node heartbeats requeue every template), which revokes the
//    old one once the nodes see the new hash. Secrets are read by name,
//    never listed or watched: the operator's RBAC on them is get and create.
//  - A Secret of that name the template does not control is never changed:
//    status carries no hash and the RunToken condition says why.
#pragma once

#include <string>
#include <string_view>

#include "operator/context.h"
#include "operator/api.h"

namespace kubicle::op {

inline constexpr std::string_view kRunTokenSecretType = "kubicle.dev/run-token";
// On every run-token Secret, value "true": the controller's Secret informer
// selects on it (a label value could not hold every template name; the
// Secret's controller ownerReference names the template).
inline constexpr std::string_view kLabelRunToken = "kubicle.dev/run-token";
// The template a run-token Secret belongs to (its controller
// ownerReference of kind SandboxTemplate); "" if none.
std::string RunTokenOwner(const Json& secret);

std::string RunTokenSecretName(const std::string& template_name);

struct RunTokenFacts {
  std::string secret;          // the Secret's name
  std::string sha256;          // hex; empty when no usable token
  std::string problem_reason;  // RunTokenSecretConflict, RunTokenSecretInvalid
  std::string problem;
};

// What an existing Secret of the run-token name holds for `tmpl`. Pure.
RunTokenFacts CheckRunTokenSecret(const Json& secret, const SandboxTemplateView& tmpl);

// Reads the Secret (lister cache first) or creates it. Errors are the
// client's (the pass is retried); problems with a foreign Secret are facts.
Result<RunTokenFacts> EnsureRunToken(Context& ctx, const SandboxTemplateView& tmpl);

// status.runTokenSecretName and status.runTokenSha256 (null when unset, so
// a merge patch removes a stale hash), and the RunToken condition.
void AddRunTokenStatus(const RunTokenFacts& facts, const SandboxTemplateView& tmpl,
                       kube::TimePoint now, Json* status);

}  // namespace kubicle::op
