#include "operator/token_secret.h"

#include "common/base64.h"
#include "common/sha256.h"
#include "kube/json_fields.h"
#include "kube/resource.h"

namespace kubicle::op {

TokenSecretCheck CheckTokenSecret(const Json& secret, const std::string& sandbox_name,
                                  const std::string& sandbox_uid, const std::string& owner_kind) {
  const std::string name = Name(secret);
  TokenSecretCheck c;
  if (IsControlledBy(secret, sandbox_uid)) {
    // Strict base64, as the apiserver stores Secret data.
    auto token = Base64Decode(kube::StrAt(secret, {"data", "token"}));
    if (token.ok() && !token->empty()) {
      c.token.assign(token->begin(), token->end());
      return c;
    }
    c.reason = "TokenSecretInvalid";
    c.problem = "Secret " + name + " is this " + owner_kind +
                "'s but holds no token in data.token; "
                "delete it and the operator makes a new one";
    return c;
  }
  const Json& refs = kube::At(secret, {"metadata", "ownerReferences"});
  if (refs.is_array()) {
    for (const Json& ref : refs) {
      if (kube::StrAt(ref, {"kind"}) == owner_kind && kube::StrAt(ref, {"name"}) == sandbox_name &&
          kube::BoolAt(ref, {"controller"})) {
        c.reason = "TokenSecretPendingDeletion";
        c.problem = "Secret " + name + " belongs to an earlier " + owner_kind +
                    " of this name (uid " + kube::StrAt(ref, {"uid"}) +
                    "); waiting for it to be garbage-collected";
        return c;
      }
    }
  }
  c.reason = "TokenSecretConflict";
  c.problem = "Secret " + name + " already exists and is not owned by this " + owner_kind +
              "; the operator never deletes or overwrites a Secret it does not own: delete or "
              "rename it, or rename the " +
              owner_kind;
  return c;
}

Result<TokenSecretResult> EnsureTokenSecret(const Context& ctx, const Json& owner,
                                            const ObjectMeta& meta, const std::string& owner_kind,
                                            const std::string& secret_name, std::string_view type,
                                            Outcome* out) {
  TokenSecretResult r;
  ASSIGN_OR_RETURN(std::string token, NewToken());
  Json labels = Json::object();
  for (std::string_view l : {kLabelRun, kLabelAgent}) {
    if (std::string v = meta.Label(l); !v.empty()) labels[std::string(l)] = v;
  }
  Json secret = {{"metadata",
                  {{"name", secret_name},
                   {"labels", labels},
                   {"ownerReferences", Json::array({ControllerRef(owner)})}}},
                 {"type", std::string(type)},
                 {"stringData", {{"token", token}}}};
  auto created = ctx.client->Create(kube::SecretResource(), meta.ns, secret);
  if (created.ok()) {
    r.sha256 = Sha256Hex(token);
    r.created = true;
    return r;
  }
  if (!kube::IsAlreadyExists(created.status())) return created.status();
  // The name is taken: this owner's own Secret (its hash never recorded),
  // or someone else's, which is left alone and named in the problem.
  auto got = ctx.client->Get(kube::SecretResource(), meta.ns, secret_name);
  if (!got.ok()) {
    return kube::IsNotFound(got.status())
               ? Status::Unavailable("token Secret " + secret_name + " vanished during the pass")
               : got.status();
  }
  r.check = CheckTokenSecret(*got, meta.name, meta.uid, owner_kind);
  if (r.check.problem.empty()) {
    r.sha256 = Sha256Hex(r.check.token);
    return r;
  }
  // One left by an earlier owner of the same name goes with that owner.
  out->RequeueWithin(r.check.reason == "TokenSecretPendingDeletion" ? ctx.config.unschedulable_retry
                                                                    : std::chrono::seconds(60));
  return r;
}

}  // namespace kubicle::op
