// Workspace routes (docs/workspaces.md): create, get, list and delete a
// workspace, and its files read and written on the host without a VM
// (through WorkspaceService's calls, which run the confined ext4
// helper). The file routes answer as a sandbox's do (ServeFiles).
#include "noderuntime/api/codec.h"
#include "noderuntime/server/http_call.h"

namespace kubicle::noderuntime::server {

using namespace ::kubicle::noderuntime::api;  // the contract this server speaks

namespace {

bool CheckWorkspaceName(Call& call) {
  if (ValidId(call.name())) return true;
  call.Error(400, "InvalidArgument",
             "workspace name \"" + call.name() + "\" must be a DNS-1123 label: [a-z0-9-], at most 63");
  return false;
}

FileOps WorkspaceFileOps(WorkspaceService& svc, const std::string& name) {
  return {.check_name = CheckWorkspaceName,
          .read = [&svc, name](const std::string& p, const guest::client::FileChunkFn& f) {
            return svc.ReadWorkspaceFile(name, p, f);
          },
          .write = [&svc, name](const std::string& p, guest::protocol::ByteSpan d, uint32_t m) {
            return svc.WriteWorkspaceFile(name, p, d, m);
          },
          .stat = [&svc, name](const std::string& p) { return svc.StatWorkspaceFile(name, p); },
          .list = [&svc, name](const std::string& p) { return svc.ListWorkspaceFiles(name, p); },
          .remove = [&svc, name](const std::string& p, bool r) {
            return svc.RemoveWorkspaceFile(name, p, r);
          }};
}

}  // namespace

void HandleWorkspaces(Call& call, WorkspaceService& svc, const ApiServerOptions&) {
  if (!call.OnlyQuery({})) return;
  json items = json::array();
  for (const auto& w : svc.ListWorkspaces()) items.push_back(ToJson(w, false));
  call.Json(200, {{"items", items}});
}

void HandleWorkspace(Call& call, WorkspaceService& svc, const ApiServerOptions& opts) {
  if (!call.OnlyQuery({}) || !CheckWorkspaceName(call)) return;
  const std::string method = call.method();
  if (method == "GET") {
    auto w = svc.GetWorkspace(call.name());
    return w.ok() ? call.Json(200, ToJson(*w, false)) : call.Fail(w.status());
  }
  if (method == "DELETE") {
    Status st = svc.DeleteWorkspace(call.name());
    return st.ok() ? call.Json(200, {{"deleted", call.name()}}) : call.Fail(st);
  }
  auto body = call.JsonBody(opts.max_json_bytes);
  if (!body) return;
  auto spec = WorkspaceSpecFromJson(*body, call.name());
  if (!spec.ok()) return call.Fail(spec.status());
  const bool existed = svc.GetWorkspace(call.name()).ok();
  auto w = svc.PutWorkspace(*spec);
  if (!w.ok()) return call.Fail(w.status());
  // 201 (with the token when the node minted it) for a new workspace; 200
  // for an existing one of that size.
  call.Json(existed ? 200 : 201, ToJson(*w, true));
}

void HandleWorkspaceFiles(Call& call, WorkspaceService& svc, const ApiServerOptions& opts) {
  ServeFiles(call, WorkspaceFileOps(svc, call.name()), opts);
}
void HandleWorkspaceStat(Call& call, WorkspaceService& svc, const ApiServerOptions&) {
  ServeStat(call, WorkspaceFileOps(svc, call.name()));
}
void HandleWorkspaceList(Call& call, WorkspaceService& svc, const ApiServerOptions&) {
  ServeList(call, WorkspaceFileOps(svc, call.name()));
}

}  // namespace kubicle::noderuntime::server
