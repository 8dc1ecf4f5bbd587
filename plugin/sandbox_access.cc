#include "plugin/sandbox_access.h"

#include "kube/api/names.h"
#include "kube/api/types.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/api/codec.h"

namespace kubicle::plugin {

using kube::At;
using kube::StrAt;

using kube::api::SandboxView;
using kube::api::WorkspaceView;

namespace {

std::string NodeOf(const SandboxView& sandbox) {
  if (!sandbox.status.node_name.empty()) return sandbox.status.node_name;
  return sandbox.meta.Label(kube::api::kLabelNode);
}

}  // namespace

std::string NodeOf(const Json& sandbox) { return NodeOf(SandboxView::Parse(sandbox)); }

namespace {

// The token of `secret` and, from the node's Lease, the CA and so the
// scheme of `endpoint`; `what` names the object in errors.
Status SetTokenAndUrl(const std::string& what, const std::string& endpoint, const Json& secret,
                      const Json& lease, DataPlane* dp) {
  if (endpoint.find('/') != std::string::npos)
    return Status::FailedPrecondition(what + ": endpoint \"" + endpoint + "\" is not host:port");
  const Json& data = At(secret, {"data"});
  const std::string b64 = data.is_object() ? StrAt(data, {"token"}) : "";
  auto token = noderuntime::api::Base64Decode(b64);
  if (b64.empty() || !token.ok() || token->empty())
    return Status::FailedPrecondition("the token Secret of " + what + " has no data.token");
  dp->token.assign(token->begin(), token->end());
  dp->ca_pem = kube::api::NodeLeaseServingCa(lease);
  dp->url = (dp->ca_pem.empty() ? "http://" : "https://") + endpoint;
  return Status::Ok();
}

// The node's Lease, or FailedPrecondition saying the node is gone.
Result<Json> NodeLease(kube::KubeClient& kube, const std::string& lease_ns, const std::string& node,
                       const std::string& what) {
  const std::string name = kube::api::NodeLeaseName(node);
  auto lease = kube.Get(kube::LeaseResource(), lease_ns, name);
  if (lease.ok()) return lease;
  if (kube::IsNotFound(lease.status()))
    return Status::FailedPrecondition("node " + node + " of " + what + " has no Lease " + lease_ns +
                                      "/" + name + ": the node is gone or not yet up");
  return lease.status().WithContext("the Lease of node " + node);
}

}  // namespace

Result<DataPlane> DataPlaneFrom(const Json& object, const Json& secret, const Json& lease) {
  const SandboxView sandbox = SandboxView::Parse(object);
  DataPlane dp;
  dp.sandbox = sandbox.meta.name;
  const std::string& uid = sandbox.meta.uid;
  const std::string& endpoint = sandbox.status.vm.endpoint;
  const std::string& phase = sandbox.status.phase;
  if (uid.empty()) return Status::FailedPrecondition("Sandbox " + dp.sandbox + " has no uid");
  if (endpoint.empty()) {
    return Status::FailedPrecondition("Sandbox " + dp.sandbox + " has no VM endpoint yet (phase " +
                                      (phase.empty() ? "none" : phase) + ")");
  }
  dp.vm_id = kube::api::SandboxVmId(uid);
  dp.node = NodeOf(sandbox);
  RETURN_IF_ERROR(SetTokenAndUrl("Sandbox " + dp.sandbox, endpoint, secret, lease, &dp));
  return dp;
}

Result<DataPlane> WorkspaceDataPlaneFrom(const Json& object, const Json& secret, const Json& lease) {
  const WorkspaceView workspace = WorkspaceView::Parse(object);
  DataPlane dp;
  dp.sandbox = workspace.meta.name;
  dp.files_owner = noderuntime::client::FilesOwner::kWorkspace;
  const std::string what = "Workspace " + dp.sandbox;
  dp.node = workspace.status.node_name;
  dp.vm_id = workspace.status.disk.id;
  const std::string& endpoint = workspace.status.disk.endpoint;
  if (dp.node.empty() || dp.vm_id.empty() || endpoint.empty())
    return Status::FailedPrecondition(what + " has no disk on a node yet (phase " + workspace.status.phase + ")");
  if (!noderuntime::api::ValidId(dp.vm_id))
    return Status::FailedPrecondition(what + ": status.disk.id \"" + dp.vm_id + "\" is not a disk name");
  RETURN_IF_ERROR(SetTokenAndUrl(what, endpoint, secret, lease, &dp));
  return dp;
}

Result<DataPlane> ResolveWorkspaceDataPlane(kube::KubeClient& kube, const std::string& ns,
                                            const std::string& name, const std::string& lease_ns) {
  auto ws = kube.Get(kube::WorkspaceResource(), ns, name);
  if (!ws.ok()) {
    if (kube::IsNotFound(ws.status())) return Status::NotFound("Workspace \"" + name + "\" not found in namespace " + ns);
    return ws.status();
  }
  const WorkspaceView view = WorkspaceView::Parse(*ws);
  const std::string& secret_name = view.status.token_secret_name;
  const std::string& node = view.status.node_name;
  if (secret_name.empty() || node.empty())
    return Status::FailedPrecondition("Workspace " + name + " is not placed with a token yet (phase " +
                                      view.status.phase + ")");
  auto secret = kube.Get(kube::SecretResource(), ns, secret_name);
  if (!secret.ok()) return secret.status().WithContext("the token Secret of Workspace " + name);
  ASSIGN_OR_RETURN(Json lease, NodeLease(kube, lease_ns, node, "Workspace " + name));
  return WorkspaceDataPlaneFrom(*ws, *secret, lease);
}

Result<DataPlane> ResolveDataPlane(kube::KubeClient& kube, const std::string& ns,
                                   const std::string& name, const std::string& lease_ns) {
  auto sandbox = kube.Get(kube::SandboxResource(), ns, name);
  if (!sandbox.ok()) {
    if (kube::IsNotFound(sandbox.status())) {
      return Status::NotFound("Sandbox \"" + name + "\" not found in namespace " + ns);
    }
    return sandbox.status();
  }
  const SandboxView view = SandboxView::Parse(*sandbox);
  const std::string& secret_name = view.status.token_secret_name;
  if (secret_name.empty() && view.spec.token_sha256) {
    // Its client brought its own token (the Python SDK's default): only
    // the hash is in the cluster, so no Secret will ever hold the token.
    return Status::PermissionDenied(
        "Sandbox " + name +
        " was created with its client's own token (spec.tokenSha256): no "
        "Secret holds it, so only that client can reach its data plane (the SDK's "
        "create(token_secret=True) makes a Sandbox kubectl kubicle can reach)");
  }
  if (secret_name.empty()) {
    return Status::FailedPrecondition("Sandbox " + name + " has no token Secret yet (phase " +
                                      view.status.phase + ")");
  }
  const std::string node = NodeOf(view);
  if (node.empty()) return Status::FailedPrecondition("Sandbox " + name + " is not placed on a node yet");
  auto secret = kube.Get(kube::SecretResource(), ns, secret_name);
  if (!secret.ok()) return secret.status().WithContext("the token Secret of Sandbox " + name);
  ASSIGN_OR_RETURN(Json lease, NodeLease(kube, lease_ns, node, "Sandbox " + name));
  return DataPlaneFrom(*sandbox, *secret, lease);
}

Result<std::unique_ptr<noderuntime::client::NodeClient>> Connect(const DataPlane& dp) {
  return noderuntime::client::NodeClient::CreateWithCaPem(dp.url, dp.token, dp.ca_pem);
}

}  // namespace kubicle::plugin
