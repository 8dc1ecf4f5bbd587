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

#include "kube/informer.h"
#include "kube/work_queue.h"
#include "noderuntime/nodeagent/agent_config.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::nodeagent {

// The node's name of a Workspace object with `uid`.
inline std::string WorkspaceNodeName(const std::string& uid) { return "w-" + uid; }

// status.disk as the node writes it (pure; for tests).
struct DiskReport {
  std::string state;  // Ready, Failed, Deleted
  std::string id, endpoint, attached_to, message;
  std::optional<uint64_t> bytes_used;
  bool operator==(const DiskReport&) const = default;
};
std::optional<DiskReport> ReportedDisk(const kube::Json& workspace);
kube::Json DiskStatusPatch(const DiskReport& report, kube::TimePoint now);

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
  void Work();
  void Background();
  void Sync(const std::string& key);
  void Report(const std::string& key, const kube::Json& obj, const DiskReport& report);

  kube::KubeClient* client_;
  SandboxService* service_;
  AgentConfig config_;
  kube::Informer informer_;
  kube::WorkQueue queue_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread background_;
  std::vector<std::thread> workers_;
};

}  // namespace kubicle::noderuntime::nodeagent
