// Template, sandbox and fork routes (docs/node.md, "HTTP API").
#include <cctype>

#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

namespace {

bool CheckTemplateName(Call& call) {
  if (ValidId(call.name())) return true;
  call.Error(400, "InvalidArgument",
             "template name \"" + call.name() + "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  return false;
}

bool CheckSandboxId(Call& call) {
  if (ValidId(call.name())) return true;
  call.Error(400, "InvalidArgument",
             "sandbox id \"" + call.name() + "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  return false;
}

nlohmann::json SandboxList(const std::vector<SandboxInfo>& items, bool with_token) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : items) arr.push_back(ToJson(s, with_token));
  return arr;
}

// The labelSelector query parameter ("" when absent). '+' is a space in a
// form-encoded query and never valid in a label, so it is read as one.
std::string Selector(const Call& call) {
  std::string s = call.Query("labelSelector").value_or("");
  for (char& c : s) {
    if (c == '+') c = ' ';
  }
  return s;
}

}  // namespace

void HandleTemplates(Call& call, TemplateService& svc, const ApiServerOptions&) {
  if (!call.OnlyQuery({})) return;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& t : svc.ListTemplates()) items.push_back(ToJson(t));
  call.Json(200, {{"items", items}});
}

void HandleTemplate(Call& call, TemplateService& svc, const ApiServerOptions& opts) {
  if (!call.OnlyQuery({}) || !CheckTemplateName(call)) return;
  const std::string method = call.method();
  if (method == "GET") {
    auto t = svc.GetTemplate(call.name());
    return t.ok() ? call.Json(200, ToJson(*t)) : call.Fail(t.status());
  }
  if (method == "DELETE") {
    Status st = svc.DeleteTemplate(call.name());
    return st.ok() ? call.Json(200, {{"deleted", call.name()}}) : call.Fail(st);
  }
  auto body = call.JsonBody(opts.max_json_bytes);
  if (!body) return;
  auto spec = TemplateSpecFromJson(*body, call.name());
  if (!spec.ok()) return call.Fail(spec.status());
  auto t = svc.PutTemplate(*spec);
  if (!t.ok()) return call.Fail(t.status());
  // Baking runs asynchronously: 202 while it does, 200 for an existing ready one.
  call.Json(t->state == TemplateState::kBaking ? 202 : 200, ToJson(*t));
}

void HandleSandboxes(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts) {
  const std::string method = call.method();
  if (method == "POST") {
    if (!call.OnlyQuery({})) return;
    auto body = call.JsonBody(opts.max_json_bytes);
    if (!body) return;
    auto spec = SandboxSpecFromJson(*body);
    if (!spec.ok()) return call.Fail(spec.status());
    auto info = svc.CreateSandbox(*spec);
    return info.ok() ? call.Json(201, ToJson(*info, true)) : call.Fail(info.status());
  }
  if (!call.OnlyQuery({"labelSelector"})) return;
  const std::string selector = Selector(call);
  if (method == "GET") {
    auto items = svc.ListSandboxes(selector);
    if (!items.ok()) return call.Fail(items.status());
    return call.Json(200, {{"items", SandboxList(*items, false)}});
  }
  // DELETE of the collection: a selector is required so a bare DELETE never
  // removes every sandbox on the node by accident.
  bool blank = true;
  for (char c : selector) blank = blank && std::isspace(static_cast<unsigned char>(c));
  if (blank) {
    return call.Error(400, "InvalidArgument",
                      "DELETE /v1/sandboxes needs a labelSelector (e.g. "
                      "?labelSelector=kubicle.dev/run%3Dr1); use DELETE /v1/sandboxes/{id} "
                      "for one sandbox");
  }
  auto ids = svc.DeleteSandboxes(selector);
  if (!ids.ok()) return call.Fail(ids.status());
  call.Json(200, {{"deleted", *ids}});
}

void HandleSandbox(Call& call, SandboxLifecycle& svc, const ApiServerOptions&) {
  if (!call.OnlyQuery({}) || !CheckSandboxId(call)) return;
  if (call.method() == "GET") {
    auto info = svc.GetSandbox(call.name());
    return info.ok() ? call.Json(200, ToJson(*info, false)) : call.Fail(info.status());
  }
  Status st = svc.DeleteSandbox(call.name());
  st.ok() ? call.Json(200, {{"deleted", call.name()}}) : call.Fail(st);
}

void HandleFork(Call& call, SandboxLifecycle& svc, const ApiServerOptions& opts) {
  if (!call.OnlyQuery({}) || !CheckSandboxId(call)) return;
  auto body = call.JsonBody(opts.max_json_bytes);
  if (!body) return;
  auto req = ForkRequestFromJson(*body, call.name());
  if (!req.ok()) return call.Fail(req.status());
  auto children = svc.ForkSandbox(*req);
  if (!children.ok()) return call.Fail(children.status());
  call.Json(201, {{"items", SandboxList(*children, true)}});
}

void HandleSuspendResume(Call& call, SandboxLifecycle& svc, const ApiServerOptions&) {
  if (!call.OnlyQuery({}) || !CheckSandboxId(call)) return;
  auto info = call.route() == Route::kSuspend ? svc.SuspendSandbox(call.name()) : svc.ResumeSandbox(call.name());
  info.ok() ? call.Json(200, ToJson(*info, false)) : call.Fail(info.status());
}

}  // namespace kubicle::noderuntime::server
