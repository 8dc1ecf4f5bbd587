#include "noderuntime/nodeagent/node_agent.h"

#include "common/log.h"

namespace kubicle::noderuntime::nodeagent {

NodeAgent::NodeAgent(std::unique_ptr<kube::KubeClient> client, SandboxService* service, AgentConfig config,
                     metrics::Registry* registry)
    : client_(std::move(client)),
      config_(std::move(config)),
      templates_(client_.get(), service, config_, registry),
      workspaces_(client_.get(), service, config_),
      sandboxes_(client_.get(), service, &templates_, config_, registry),
      lease_(client_.get(), config_) {
  templates_.Start();
  workspaces_.Start();
  sandboxes_.SetWorkspaces(&workspaces_);
  sandboxes_.Start();
  lease_.Start();
  log::Info("node agent started", {{"node", config_.node_name}, {"endpoint", config_.endpoint},
                                   {"lease_namespace", config_.lease_namespace}});
}

void NodeAgent::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // The Lease goes last: while sandboxes are being handed over it still says
  // this node is alive.
  sandboxes_.Stop();
  workspaces_.Stop();
  templates_.Stop();
  lease_.Stop();
}

bool NodeAgent::WaitForSync(std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!templates_.WaitForSync(timeout)) return false;
  if (!workspaces_.WaitForSync(timeout)) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return sandboxes_.WaitForSync(std::max(left, std::chrono::milliseconds(0)));
}

}  // namespace kubicle::noderuntime::nodeagent
