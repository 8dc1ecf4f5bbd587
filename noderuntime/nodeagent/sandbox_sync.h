// Runs the Sandboxes the operator placed on this node (label
// kubicle.dev/node=<node>) and reports each VM in status.vm by JSON merge
// patch on the status subresource (docs/operator.md, "Node protocol" 3, 4).
//
// Every object is reconciled by one named pass, Sync, from the world as it
// is: the object (informer cache) and the VM (SandboxService, under the id
// SandboxNodeId(uid)). So a restarted node re-adopts its VMs by UID with no
// other memory, and nothing is created twice:
//   deleting object      -> tear the VM down, then report Terminated
//   VM exists            -> report it (Running with endpoint, Suspended, or
//                           Failed), after suspending or resuming it when
//                           spec.suspend says the other (docs/node.md,
//                           "Suspend and resume")
//   no VM, was Running   -> Failed: the VM vanished (the reason says so)
//   no VM, not started   -> restore from the template as soon as the
//                           Sandbox is placed here, in parallel with the
//                           operator publishing status.tokenSha256 (the VM
//                           opens to no token and is not reported Running
//                           until the node has that hash); a fork (when
//                           spec.forkSource is set) once the hash is there
// VMs with no object (deleted while the node was down, or an API delete
// that raced) are reaped by a periodic pass over a fresh list. An
// apiserver outage stops nothing that runs: writes are retried with
// backoff and statuses catch up when it returns; the informer relists on
// 410.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "kube/api/types.h"
#include "kube/controller_engine.h"
#include "kube/informer.h"
#include "noderuntime/nodeagent/agent_config.h"
#include "noderuntime/nodeagent/template_sync.h"
#include "noderuntime/nodeagent/workspace_sync.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime::nodeagent {

using kube::api::SandboxView;
// status.vm as the node writes it (kube/api: SandboxVmStatusPatch).
using VmReport = kube::api::SandboxVm;
// The node's report in status.vm, if any (pure).
std::optional<VmReport> ReportedVm(const kube::api::SandboxStatus& status);
// The VM a Sandbox object asks for (pure): labels, env, hostname, shape.
struct DesiredVm {
  SandboxSpec spec;  // id, labels, env, hostname, token_sha256 (template_name left empty)
  std::string template_name;  // the SandboxTemplate (same namespace)
  std::optional<ShapeOverride> shape;
  std::string fork_source;    // Sandbox name, same namespace
  std::string workspace_ref;  // spec.workspaceRef.name: a Workspace, same namespace
};
Result<DesiredVm> DesiredVmOf(const SandboxView& sandbox);

class SandboxSync {
 public:
  SandboxSync(kube::KubeClient* client, SandboxService* service, TemplateSync* templates,
              const AgentConfig& config, metrics::Registry* registry);
  ~SandboxSync();
  SandboxSync(const SandboxSync&) = delete;
  SandboxSync& operator=(const SandboxSync&) = delete;

  void Start();
  void Stop();
  // Before Start(): where spec.workspaceRef is resolved to this node's
  // workspace (without it, such a Sandbox waits).
  void SetWorkspaces(WorkspaceSync* workspaces) { workspaces_ = workspaces; }
  bool WaitForSync(std::chrono::milliseconds timeout) const { return informer_.WaitForSync(timeout); }
  // Deletes VMs this agent made whose Sandbox no longer exists; returns
  // their ids. Does nothing (OK) if the apiserver cannot be listed.
  Result<std::vector<std::string>> ReapOrphans();

 private:
  void Sync(const std::string& key);
  void SyncGone(const std::string& key);
  void Teardown(const std::string& key, const SandboxView& obj, const std::string& id);
  void StartVm(const std::string& key, const SandboxView& obj, const std::string& id);
  Result<SandboxInfo> RestoreOrFork(const std::string& key, const SandboxView& obj, const DesiredVm& want);
  Result<SandboxInfo> Fork(const std::string& key, const SandboxView& obj, const DesiredVm& want);
  // Fork children of `source` (same namespace) that wait for their VM,
  // besides `key`: forked in the same call (one pause of the source for a
  // whole SandboxFork). Claims their ids; the caller releases them.
  std::vector<SandboxView> ClaimSiblings(const std::string& key, const SandboxView& obj,
                                        const std::string& source);
  void Release(const std::vector<std::string>& ids);
  // Whether the node's workspace behind spec.workspaceRef `ref` is attached
  // to something other than VM `id`.
  bool WorkspaceHeldElsewhere(const SandboxView& obj, const std::string& ref, const std::string& id);
  void Report(const std::string& key, const SandboxView& obj, const VmReport& report);
  // Running, with the start latency observed.
  void ReportStarted(const std::string& key, const SandboxView& obj, const SandboxInfo& vm);
  // Whether the running VM `id` has the token the operator published (given
  // it now if it was restored before it); false while none is published,
  // or after reporting Failed for a hash the node refuses.
  bool TokenKnown(const std::string& key, const SandboxView& obj, const std::string& id);
  VmReport RunningReport(const SandboxInfo& vm) const;
  VmReport SuspendedReport(const std::string& message) const;
  // spec.suspend differs from the VM: suspend or resume it, report, and on
  // failure retry with backoff (the VM stays as it was).
  void Suspend(const std::string& key, const SandboxView& obj, const std::string& id);
  void Resume(const std::string& key, const SandboxView& obj, const std::string& id);
  // On each resync: reap, every reap_interval while listing works.
  void MaybeReap();
  void OnEvent(kube::WatchEventType type, const kube::Json& obj);

  kube::KubeClient* client_;
  SandboxService* service_;
  TemplateSync* templates_;
  WorkspaceSync* workspaces_ = nullptr;
  AgentConfig config_;
  kube::Informer informer_;
  kube::ControllerEngine engine_;
  kube::WorkQueue& queue_ = engine_.Queue();
  metrics::Family<metrics::Histogram>* watch_lag_seconds_;
  metrics::Family<metrics::Histogram>* status_write_seconds_;
  metrics::Family<metrics::Histogram>* start_seconds_;
  std::mutex mu_;
  std::map<std::string, std::string> ids_;        // "ns/name" -> node id, for objects that vanish
  std::map<std::string, VmReport> written_;       // last report written per key
  std::map<std::string, std::chrono::steady_clock::time_point> first_seen_;
  std::set<std::string> claimed_;                 // node ids a fork in flight is creating
  std::chrono::steady_clock::time_point next_reap_;  // resync thread only
};

}  // namespace kubicle::noderuntime::nodeagent
