#include "plugin/sandbox_access.h"

#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/api/codec.h"

namespace kubicle::plugin {

using kube::At;
using kube::StrAt;

std::string NodeOf(const Json& sandbox) {
  std::string node = StrAt(sandbox, {"status", "nodeName"});
  if (node.empty()) {
    const Json& labels = At(sandbox, {"metadata", "labels"});
    if (labels.is_object()) node = StrAt(labels, {"kubicle.dev/node"});
  }
  return node;
}

Result<DataPlane> DataPlaneFrom(const Json& sandbox, const Json& secret, const Json& lease) {
  DataPlane dp;
  dp.sandbox = StrAt(sandbox, {"metadata", "name"});
  const std::string uid = StrAt(sandbox, {"metadata", "uid"});
  const std::string endpoint = StrAt(sandbox, {"status", "vm", "endpoint"});
  const std::string phase = StrAt(sandbox, {"status", "phase"});
  if (uid.empty()) return Status::FailedPrecondition("Sandbox " + dp.sandbox + " has no uid");
  if (endpoint.empty()) {
    return Status::FailedPrecondition("Sandbox " + dp.sandbox + " has no VM endpoint yet (phase " +
                                      (phase.empty() ? "none" : phase) + ")");
  }
  if (endpoint.find('/') != std::string::npos) {
    return Status::FailedPrecondition("Sandbox " + dp.sandbox + ": endpoint \"" + endpoint +
                                      "\" is not host:port");
  }
  dp.vm_id = "k-" + uid;
  dp.node = NodeOf(sandbox);
  const Json& data = At(secret, {"data"});
  const std::string b64 = data.is_object() ? StrAt(data, {"token"}) : "";
  auto token = noderuntime::api::Base64Decode(b64);
  if (b64.empty() || !token.ok() || token->empty()) {
    return Status::FailedPrecondition("the token Secret of Sandbox " + dp.sandbox +
                                      " has no data.token");
  }
  dp.token.assign(token->begin(), token->end());
  const Json& annotations = At(lease, {"metadata", "annotations"});
  dp.ca_pem = annotations.is_object() ? StrAt(annotations, {kServingCaAnnotation}) : "";
  dp.url = (dp.ca_pem.empty() ? "http://" : "https://") + endpoint;
  return dp;
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
  const std::string secret_name = StrAt(*sandbox, {"status", "tokenSecretName"});
  if (secret_name.empty()) {
    return Status::FailedPrecondition("Sandbox " + name + " has no token Secret yet (phase " +
                                      StrAt(*sandbox, {"status", "phase"}) + ")");
  }
  const std::string node = NodeOf(*sandbox);
  if (node.empty()) return Status::FailedPrecondition("Sandbox " + name + " is not placed on a node yet");
  auto secret = kube.Get(kube::SecretResource(), ns, secret_name);
  if (!secret.ok()) return secret.status().WithContext("the token Secret of Sandbox " + name);
  auto lease = kube.Get(kube::LeaseResource(), lease_ns, "kubicle-node-" + node);
  if (!lease.ok()) {
    if (kube::IsNotFound(lease.status())) {
      return Status::FailedPrecondition("node " + node + " of Sandbox " + name + " has no Lease " +
                                        lease_ns + "/kubicle-node-" + node +
                                        ": the node is gone or not yet up");
    }
    return lease.status().WithContext("the Lease of node " + node);
  }
  return DataPlaneFrom(*sandbox, *secret, *lease);
}

Result<std::unique_ptr<noderuntime::cli::NodeClient>> Connect(const DataPlane& dp) {
  return noderuntime::cli::NodeClient::CreateWithCaPem(dp.url, dp.token, dp.ca_pem);
}

}  // namespace kubicle::plugin
