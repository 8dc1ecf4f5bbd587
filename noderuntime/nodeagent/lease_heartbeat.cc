#include "noderuntime/nodeagent/lease_heartbeat.h"

#include "common/log.h"
#include "kube/api/names.h"
#include "kube/time_format.h"

namespace kubicle::noderuntime::nodeagent {

kube::Json LeaseHeartbeat::LeaseFor(const AgentConfig& c, kube::TimePoint now) {
  using namespace kube::api;  // the names of the node protocol
  kube::Json annotations = {{kAnnotationCapacitySandboxes, std::to_string(c.capacity_sandboxes)}};
  if (c.capacity_mem_mib > 0) annotations[kAnnotationCapacityMemory] = std::to_string(c.capacity_mem_mib);
  // Clients verify the node's TLS against this, never by skipping checks.
  if (!c.serving_ca_pem.empty()) annotations[kAnnotationServingCa] = c.serving_ca_pem;
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata",
           {{"name", NodeLeaseName(c.node_name)},
            {"namespace", c.lease_namespace},
            {"labels", {{kLabelNode, c.node_name}}},
            {"annotations", annotations}}},
          {"spec",
           {{"holderIdentity", c.node_name},
            {"leaseDurationSeconds", c.lease_duration.count()},
            {"renewTime", kube::FormatMicroTime(now)}}}};
}

Status LeaseHeartbeat::RenewOnce() {
  kube::PatchOptions po;
  po.field_manager = FieldManager(config_);
  po.force = true;  // a restarted node takes its Lease back
  return client_
      ->Patch(kube::LeaseResource(), config_.lease_namespace, LeaseName(), kube::PatchType::kApply,
              LeaseFor(config_, std::chrono::system_clock::now()), "", po)
      .status();
}

void LeaseHeartbeat::Start() {
  std::lock_guard l(mu_);
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void LeaseHeartbeat::Stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseHeartbeat::Run() {
  bool healthy = true;
  std::unique_lock l(mu_);
  while (!stop_) {
    l.unlock();
    Status st = RenewOnce();
    l.lock();
    if (!st.ok() && healthy) {
      log::Warn("node lease renewal failed; retrying every second",
                {{"node", config_.node_name}, {"error", st.ToString()}});
    } else if (st.ok() && !healthy) {
      log::Info("node lease renewed again", {{"node", config_.node_name}});
    }
    healthy = st.ok();
    cv_.wait_for(l, healthy ? std::chrono::duration_cast<std::chrono::milliseconds>(config_.renew_interval)
                            : std::chrono::milliseconds(1000),
                 [this] { return stop_; });
  }
}

}  // namespace kubicle::noderuntime::nodeagent
