// The node agent: what makes kubicle-node a member of a Kubernetes cluster
// (`kubicle-node serve --node-name N`), KubeVirt virt-handler style, on top
// of SandboxService. It speaks the node protocol of docs/operator.md:
// heartbeat Lease with capacity (LeaseHeartbeat), templates baked and
// reported (TemplateSync), Sandboxes run, reported and torn down
// (SandboxSync). The data plane (noderuntime/server) keeps serving exec and
// files; it authenticates each Sandbox's clients by the token hash the
// agent passed in from status.tokenSha256, so the node never reads Secrets.
#pragma once

#include <memory>

#include "common/metrics.h"
#include "kube/kube_client.h"
#include "noderuntime/nodeagent/agent_config.h"
#include "noderuntime/nodeagent/lease_heartbeat.h"
#include "noderuntime/nodeagent/sandbox_sync.h"
#include "noderuntime/nodeagent/template_sync.h"

namespace kubicle::noderuntime::nodeagent {

class NodeAgent {
 public:
  // Starts every loop; returns at once (the informers sync in the
  // background, through apiserver outages).
  NodeAgent(std::unique_ptr<kube::KubeClient> client, SandboxService* service, AgentConfig config,
            metrics::Registry* registry);
  ~NodeAgent() { Stop(); }
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Stops the loops; VMs keep running (the daemon decides about those).
  void Stop();
  bool WaitForSync(std::chrono::milliseconds timeout) const;

 private:
  std::unique_ptr<kube::KubeClient> client_;
  AgentConfig config_;
  TemplateSync templates_;
  WorkspaceSync workspaces_;
  SandboxSync sandboxes_;
  LeaseHeartbeat lease_;
  bool stopped_ = false;
};

}  // namespace kubicle::noderuntime::nodeagent
