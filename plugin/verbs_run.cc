// kubectl kubicle run TEMPLATE -- CMD: a per-call run (docs/kubectl-plugin.md).
// The node is one where the template's current generation is Ready
// (status.nodes[], with its endpoint and node template name), the token the
// one in the template's run-token Secret, the CA the node's Lease's. With
// --workspace the node is the Workspace's, and the disk its status.disk.id.
#include <iostream>
#include <iterator>
#include <utility>

#include "kube/api/names.h"
#include "kube/api/types.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/api/codec.h"
#include "plugin/sandbox_access.h"
#include "plugin/verbs.h"

namespace kubicle::plugin {

using kube::At;
using kube::StrAt;

namespace {

constexpr size_t kMaxStdin = 512u << 10;

struct RunTarget {
  std::string node, endpoint, node_template, secret;
};

// Pure: where a SandboxTemplate object says its runs go; `only_node`
// non-empty: that node or none (a workspace's).
Result<RunTarget> RunTargetOf(const Json& object, const std::string& only_node) {
  const kube::api::SandboxTemplateView tmpl = kube::api::SandboxTemplateView::Parse(object);
  const std::string& name = tmpl.meta.name;
  const int64_t gen = tmpl.meta.generation > 0 ? tmpl.meta.generation : 1;
  RunTarget t;
  t.secret = tmpl.status.run_token_secret_name;
  if (t.secret.empty() || tmpl.status.run_token_sha256.empty())
    return Status::FailedPrecondition("SandboxTemplate " + name +
                                      " has no run token published yet (see its RunToken condition)");
  for (const kube::api::TemplateNodeEntry& e : tmpl.status.nodes) {
    if (e.phase != "Ready" || e.observed_generation != gen) continue;
    if (!only_node.empty() && e.node_name != only_node) continue;
    t.endpoint = e.endpoint;
    t.node_template = e.node_template;
    t.node = e.node_name;
    if (!t.endpoint.empty() && !t.node_template.empty() &&
        t.endpoint.find('/') == std::string::npos)
      return t;
  }
  if (!only_node.empty())
    return Status::FailedPrecondition("SandboxTemplate " + name + " is not Ready on node " + only_node +
                                      ", where the workspace is");
  return Status::FailedPrecondition("SandboxTemplate " + name + " is not Ready on any node that serves runs");
}

// Pure: a Workspace object's node and that node's name for its disk
// (status.disk.id: object names repeat across namespaces, the node's not).
Result<std::pair<std::string, std::string>> WorkspaceDiskOf(const Json& object) {
  const kube::api::WorkspaceView ws = kube::api::WorkspaceView::Parse(object);
  if (ws.status.node_name.empty() || ws.status.disk.id.empty())
    return Status::FailedPrecondition("Workspace " + ws.meta.name + " has no disk on a node yet");
  return std::make_pair(ws.status.node_name, ws.status.disk.id);
}

// Where the run goes; with a workspace, sets *node_workspace to the
// node's name for it.
Result<DataPlane> ResolveRun(Env& env, const std::string& name, const std::string& workspace,
                             std::string* node_workspace) {
  std::string only_node;
  if (!workspace.empty()) {
    auto ws = env.kube->Get(kube::WorkspaceResource(), env.ns, workspace);
    if (!ws.ok()) {
      if (kube::IsNotFound(ws.status()))
        return Status::NotFound("Workspace \"" + workspace + "\" not found in namespace " + env.ns);
      return ws.status();
    }
    ASSIGN_OR_RETURN(auto disk, WorkspaceDiskOf(*ws));
    only_node = disk.first;
    *node_workspace = disk.second;
  }
  auto tmpl = env.kube->Get(kube::SandboxTemplateResource(), env.ns, name);
  if (!tmpl.ok()) {
    if (kube::IsNotFound(tmpl.status()))
      return Status::NotFound("SandboxTemplate \"" + name + "\" not found in namespace " + env.ns);
    return tmpl.status();
  }
  ASSIGN_OR_RETURN(RunTarget t, RunTargetOf(*tmpl, only_node));
  ASSIGN_OR_RETURN(Json secret, env.kube->Get(kube::SecretResource(), env.ns, t.secret));
  auto token = noderuntime::api::Base64Decode(StrAt(secret, {"data", "token"}));
  if (!token.ok() || token->empty())
    return Status::FailedPrecondition("Secret " + t.secret + " has no data.token");
  DataPlane dp;
  dp.node = t.node;
  dp.vm_id = t.node_template;
  dp.token.assign(token->begin(), token->end());
  auto lease = env.kube->Get(kube::LeaseResource(), env.lease_ns, kube::api::NodeLeaseName(t.node));
  dp.ca_pem = lease.ok() ? kube::api::NodeLeaseServingCa(*lease) : "";
  dp.url = (dp.ca_pem.empty() ? "http://" : "https://") + t.endpoint;
  return dp;
}

int Say(Env& env, const std::string& why, int code) {
  *env.err << "kubectl-kubicle run: " << why << "\n";
  return code;
}

}  // namespace

int RunRun(const Invocation& inv, Env& env) {
  if (!inv.dash_dash || inv.command.empty())
    return Say(env, "give the command after --: run TEMPLATE -- CMD [ARG...]", kExitUsage);
  if (inv.positional.size() != 1) return Say(env, "give one SandboxTemplate name before --", kExitUsage);
  std::chrono::milliseconds timeout{60000};
  if (inv.Has("timeout")) {
    auto t = ParseDuration(inv.Get("timeout"));
    if (!t.ok()) return Say(env, t.status().message(), kExitUsage);
    timeout = *t;
  }
  Json req{{"argv", inv.command}, {"timeoutSeconds", (timeout.count() + 999) / 1000}};
  for (const std::string& kv : inv.All("env"))
    if (kv.find('=') == std::string::npos || kv[0] == '=') return Say(env, "--env " + kv + " is not K=V", kExitUsage);
  if (!inv.All("env").empty()) req["env"] = inv.All("env");
  if (inv.Has("cwd")) req["cwd"] = inv.Get("cwd");
  if (inv.Bool("stdin")) {
    std::string data((std::istreambuf_iterator<char>(*env.in)), std::istreambuf_iterator<char>());
    if (data.size() > kMaxStdin) return Say(env, "stdin is over the 512 KiB -i takes", kExecFailed);
    const auto* p = reinterpret_cast<const uint8_t*>(data.data());
    req["stdinBase64"] = noderuntime::api::Base64Encode({p, data.size()});
  }
  std::string node_workspace;
  auto dp = ResolveRun(env, inv.positional[0], inv.Has("workspace") ? inv.Get("workspace") : "",
                       &node_workspace);
  if (!dp.ok()) return Say(env, dp.status().message(), kExecFailed);
  if (!node_workspace.empty()) req["workspace"] = node_workspace;
  auto client = Connect(*dp);
  if (!client.ok()) return Say(env, client.status().message(), kExecFailed);
  auto r = (*client)->Call("POST", "/v1/templates/" + dp->vm_id + "/run", req);
  if (!r.ok()) return Say(env, r.status().message(), kExecFailed);
  auto bytes = [&](const char* key) {
    std::string s = StrAt(*r, {key});
    if (StrAt(*r, {"encoding"}) != "base64") return s;
    auto b = noderuntime::api::Base64Decode(s);
    return b.ok() ? std::string(b->begin(), b->end()) : std::string();
  };
  *env.out << bytes("stdout") << std::flush;
  *env.err << bytes("stderr") << std::flush;
  if (r->value("timedOut", false))
    return Say(env, "the command timed out after " + std::to_string(timeout.count() / 1000) + "s", 124);
  if (r->contains("exitCode") && (*r)["exitCode"].is_number_integer()) {
    int code = (*r)["exitCode"].get<int>();
    return code >= 0 && code <= 255 ? code : kExitFailed;
  }
  if (r->contains("signal") && (*r)["signal"].is_number_integer())
    return 128 + ((*r)["signal"].get<int>() & 127);
  return Say(env, "the node's answer has no exit code: " + r->dump(), kExecFailed);
}

}  // namespace kubicle::plugin
