// The node's heartbeat: a coordination.k8s.io/v1 Lease
// "kubicle-node-<node>" in the node-lease namespace, applied (server-side
// apply, so a restarted node simply takes it over) every renew interval
// with renewTime = now and the node's capacity as annotations. The
// operator places Sandboxes only on nodes whose Lease is fresh
// (docs/operator.md, "Node protocol" 1). An apiserver outage only delays
// renewals: the loop retries every second until one succeeds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kube/api/names.h"
#include "kube/clock.h"
#include "kube/kube_client.h"
#include "noderuntime/nodeagent/agent_config.h"

namespace kubicle::noderuntime::nodeagent {

class LeaseHeartbeat {
 public:
  LeaseHeartbeat(kube::KubeClient* client, const AgentConfig& config)
      : client_(client), config_(config) {}
  ~LeaseHeartbeat() { Stop(); }
  LeaseHeartbeat(const LeaseHeartbeat&) = delete;
  LeaseHeartbeat& operator=(const LeaseHeartbeat&) = delete;

  void Start();
  void Stop();
  Status RenewOnce();
  // The Lease object RenewOnce applies (pure; for tests).
  static kube::Json LeaseFor(const AgentConfig& config, kube::TimePoint now);
  std::string LeaseName() const { return kube::api::NodeLeaseName(config_.node_name); }

 private:
  void Run();

  kube::KubeClient* client_;
  AgentConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kubicle::noderuntime::nodeagent
