#include "operator/run_token.h"

#include "common/base64.h"
#include "common/log.h"
#include "common/sha256.h"
#include "kube/json_fields.h"
#include "kube/resource.h"

namespace kubicle::op {

std::string RunTokenSecretName(const std::string& template_name) {
  return BoundedName(template_name, "-run");
}

std::string RunTokenOwner(const Json& secret) {
  const Json& refs = kube::At(secret, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return "";
  for (const Json& ref : refs)
    if (kube::StrAt(ref, {"kind"}) == "SandboxTemplate" && kube::BoolAt(ref, {"controller"}))
      return kube::StrAt(ref, {"name"});
  return "";
}

RunTokenFacts CheckRunTokenSecret(const Json& secret, const SandboxTemplateView& tmpl) {
  RunTokenFacts f;
  f.secret = Name(secret);
  if (!IsControlledBy(secret, tmpl.meta.uid)) {
    f.problem_reason = "RunTokenSecretConflict";
    f.problem = "Secret " + f.secret + " already exists and is not owned by this SandboxTemplate; "
                "the operator never changes a Secret it does not own: delete or rename it";
    return f;
  }
  auto token = Base64Decode(kube::StrAt(secret, {"data", "token"}));  // strict, as stored
  if (!token.ok() || token->empty()) {
    f.problem_reason = "RunTokenSecretInvalid";
    f.problem = "Secret " + f.secret + " is this template's but holds no token in data.token; "
                "delete it and the operator makes a new one";
    return f;
  }
  f.sha256 = Sha256Hex(std::string_view(reinterpret_cast<const char*>(token->data()), token->size()));
  return f;
}

namespace {

Json NewRunTokenSecret(const SandboxTemplateView& tmpl, const std::string& name, const std::string& token) {
  return {{"metadata", {{"name", name},
                        {"labels", {{std::string(kLabelRunToken), "true"}}},
                        {"ownerReferences", Json::array({ControllerRef(tmpl.object)})}}},
          {"type", std::string(kRunTokenSecretType)},
          {"stringData", {{"token", token}}}};
}

}  // namespace

Result<RunTokenFacts> EnsureRunToken(Context& ctx, const SandboxTemplateView& tmpl) {
  const std::string name = RunTokenSecretName(tmpl.meta.name);
  // Read by name, never listed or watched: the operator's RBAC on Secrets
  // stays get and create (a deleted Secret is made again at the template's
  // next pass; node heartbeats requeue every template).
  auto existing = ctx.client->Get(kube::SecretResource(), tmpl.meta.ns, name);
  if (existing.ok()) return CheckRunTokenSecret(*existing, tmpl);
  if (!kube::IsNotFound(existing.status())) return existing.status();
  ASSIGN_OR_RETURN(std::string token, NewToken());
  auto created = ctx.client->Create(kube::SecretResource(), tmpl.meta.ns, NewRunTokenSecret(tmpl, name, token));
  if (created.ok()) {
    log::Info("template run token created", {{"template", tmpl.meta.Key()}, {"secret", name}});
    return RunTokenFacts{.secret = name, .sha256 = Sha256Hex(token)};
  }
  if (!kube::IsAlreadyExists(created.status())) return created.status();
  // The cache is behind, or the name is someone else's: the API says which.
  auto got = ctx.client->Get(kube::SecretResource(), tmpl.meta.ns, name);
  if (!got.ok()) return got.status();
  return CheckRunTokenSecret(*got, tmpl);
}

void AddRunTokenStatus(const RunTokenFacts& facts, const SandboxTemplateView& tmpl,
                       kube::TimePoint now, Json* status) {
  (*status)["runTokenSecretName"] = facts.secret;
  (*status)["runTokenSha256"] = facts.sha256.empty() ? Json() : Json(facts.sha256);
  Condition c = facts.sha256.empty()
                    ? Condition{"RunToken", "False", facts.problem_reason, facts.problem}
                    : Condition{"RunToken", "True", "Published",
                                "runs authorize with the token in Secret " + facts.secret};
  (*status)["conditions"] = SetCondition((*status)["conditions"], c, tmpl.meta.generation, now);
}

}  // namespace kubicle::op
