// Makes, reports and deletes the Workspaces the operator placed on this node
// (label kubicle.dev/node=<node>), on top of SandboxService's workspaces
// (docs/operator.md, "Workspaces"). Each pass works from the world as it
// is, the object and the node's workspace named w-<uid>:
//   deleting object  -> DeleteWorkspace (FailedPrecondition while a VM has
//                       it attached: retried, the reason reported), then
//                       status.disk.state Deleted, the operator's signal to
//                       remove the finalizer
//   no tokenSha256   -> wait for the operator to publish it
//   otherwise        -> PutWorkspace (idempotent) with the published token
//                       hash; report Ready (or Failed) with bytesUsed,
//                       attachedTo and the endpoint in status.disk
// It writes only status.disk (JSON merge patch on the status subresource),
// which the node admission policy enforces. Resynced every few seconds so
// bytesUsed and attachedTo follow the disk; a 410 relists (informer);
// failed writes are retried with backoff through apiserver outages.
#pragma once

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kube/api/types.h"
#include "kube/controller_engine.h"
#include "kube/informer.h"
#include "noderuntime/nodeagent/agent_config.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::nodeagent {

// The node's name of a Workspace object with `uid`.
inline std::string WorkspaceNodeName(const std::string& uid) { return "w-" + uid; }

// status.disk as the node writes it (kube/api: WorkspaceDiskStatusPatch).
using DiskReport = kube::api::WorkspaceDisk;

class WorkspaceSync {
 public:
  WorkspaceSync(kube::KubeClient* client, SandboxService* service, const AgentConfig& config);
  ~WorkspaceSync();
  WorkspaceSync(const WorkspaceSync&) = delete;
  WorkspaceSync& operator=(const WorkspaceSync&) = delete;

  void Start();
  void Stop();
  bool WaitForSync(std::chrono::milliseconds timeout) const { return informer_.WaitForSync(timeout); }
  // The node's name of Workspace `ns/name` placed on this node, once it is
  // made here (Ready); nullopt otherwise. For SandboxSync.
  std::optional<std::string> ReadyWorkspace(const std::string& ns, const std::string& name);

 private:
  void Sync(const std::string& key);
  void Report(const kube::api::WorkspaceView& obj, const DiskReport& report);

  kube::KubeClient* client_;
  SandboxService* service_;
  AgentConfig config_;
  kube::Informer informer_;
  kube::ControllerEngine engine_;
  kube::WorkQueue& queue_ = engine_.Queue();
};

}  // namespace kubicle::noderuntime::nodeagent
