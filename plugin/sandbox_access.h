// How a client reaches one Sandbox's VM from the cluster (docs/operator.md,
// "Node protocol"): the node's data plane at status.vm.endpoint, the VM's
// node id k-<metadata.uid>, the bearer token of the Secret named in
// status.tokenSecretName (data.token), and the node's serving CA from its
// Lease (annotation kubicle.dev/serving-ca on kubicle-node-<node> in the
// node-lease namespace): https verified against that CA when the Lease
// publishes one, plain http only when it publishes none. Verification is
// never turned off. kubectl-kubicle uses it for every data-plane verb; it
// is a library so other clients (tests, tools) reach Sandboxes the same way.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "kube/api/names.h"
#include "kube/kube_client.h"
#include "noderuntime/client/node_client.h"

namespace kubicle::plugin {

using kube::Json;

struct DataPlane {
  std::string sandbox;  // the object's name
  std::string vm_id;    // k-<uid>: the node's id of its VM; a Workspace's: its disk's (w-<uid>)
  noderuntime::client::FilesOwner files_owner = noderuntime::client::FilesOwner::kSandbox;
  std::string node;
  std::string url;      // https://<endpoint> or http://<endpoint>
  std::string token;
  std::string ca_pem;   // empty: plain http

  // "/v1/sandboxes/<vm_id>" + suffix.
  std::string Path(const std::string& suffix = "") const {
    return "/v1/sandboxes/" + vm_id + suffix;
  }
};

// Pure: from the Sandbox, its token Secret and its node's Lease.
// FailedPrecondition (saying what is missing) for a Sandbox without an
// endpoint, a token Secret or a node yet, or a Secret without data.token.
Result<DataPlane> DataPlaneFrom(const Json& sandbox, const Json& secret, const Json& lease);
// The Sandbox's node as the operator placed it (status.nodeName, else the
// kubicle.dev/node label); "" when unplaced.
std::string NodeOf(const Json& sandbox);

// Reads the Sandbox, its Secret and its node's Lease. NotFound for no such
// Sandbox; FailedPrecondition when the node has no Lease (it is gone: its
// data plane cannot be verified).
Result<DataPlane> ResolveDataPlane(kube::KubeClient& kube, const std::string& ns,
                                   const std::string& name, const std::string& lease_ns);
// A Workspace's disk on its node (docs/api.md, "Workspace"): its data plane
// at status.disk.endpoint, the node's name of the disk status.disk.id (in
// vm_id), the token of the Secret named in status.tokenSecretName and the
// node's CA from its Lease, as for a Sandbox. Pure, then with reads.
Result<DataPlane> WorkspaceDataPlaneFrom(const Json& workspace, const Json& secret, const Json& lease);
Result<DataPlane> ResolveWorkspaceDataPlane(kube::KubeClient& kube, const std::string& ns,
                                            const std::string& name, const std::string& lease_ns);

// A client of the node with the Sandbox's token, verifying the CA.
Result<std::unique_ptr<noderuntime::client::NodeClient>> Connect(const DataPlane& dp);

}  // namespace kubicle::plugin
