// Test fixture pieces shared by the reconciler tests: a fake apiserver, a
// fake clock, and helpers that play the node daemon through the API exactly
// as kubicle-node does (heartbeat Lease with capacity, template status
// entry, status.vm reports).
#pragma once

#include <gtest/gtest.h>

#include "operator/context.h"
#include "kube/fake_kube_client.h"
#include "kube/time_format.h"

namespace kubicle::op::testing {

inline constexpr const char* kNs = "team";
inline constexpr const char* kLeaseNs = "kubicle-node-lease";

class World {
 public:
  World() : client(&clock), lister(&client, kLeaseNs) {
    ctx = Context{&client, &lister, &clock, &scheduler, nullptr, OperatorConfig{}, &lease_absence,
                  &workspace_claims};
    ctx.config.node_lease_namespace = kLeaseNs;
  }

  void AddTemplate(const std::string& name) {
    Json t = {{"metadata", {{"name", name}}},
              {"spec", {{"kernel", "/var/lib/kubicle/vmlinux"}, {"rootfs", "/var/lib/kubicle/rootfs.ext4"},
                        {"memoryMiB", 256}}}};
    ASSERT_TRUE(client.Create(kube::SandboxTemplateResource(), kNs, t).ok());
  }

  // The node daemon's heartbeat.
  void Heartbeat(const std::string& node, int capacity, int duration_s = 40) {
    Json lease = {{"metadata", {{"name", "kubicle-node-" + node},
                                {"labels", {{"kubicle.dev/node", node}}},
                                {"annotations", {{"kubicle.dev/capacity-sandboxes", std::to_string(capacity)}}}}},
                  {"spec", {{"holderIdentity", node}, {"leaseDurationSeconds", duration_s},
                            {"renewTime", kube::FormatMicroTime(clock.Now())}}}};
    auto got = client.Get(kube::LeaseResource(), kLeaseNs, "kubicle-node-" + node);
    if (got.ok()) {
      lease["metadata"]["resourceVersion"] = (*got)["metadata"]["resourceVersion"];
      ASSERT_TRUE(client.Update(kube::LeaseResource(), kLeaseNs, lease).ok());
    } else {
      ASSERT_TRUE(client.Create(kube::LeaseResource(), kLeaseNs, lease).ok());
    }
  }

  // The node daemon reporting a baked template (status.nodes entry).
  void TemplateReady(const std::string& tmpl, const std::string& node,
                     const std::string& phase = "Ready") {
    auto t = client.Get(kube::SandboxTemplateResource(), kNs, tmpl);
    ASSERT_TRUE(t.ok());
    Json nodes = (*t).value("status", Json::object()).value("nodes", Json::array());
    nodes.push_back({{"nodeName", node}, {"phase", phase},
                     {"observedGeneration", (*t)["metadata"]["generation"]}});
    ASSERT_TRUE(client.Patch(kube::SandboxTemplateResource(), kNs, tmpl, kube::PatchType::kMerge,
                             Json{{"status", {{"nodes", nodes}}}}, "status").ok());
  }

  void ReportVm(const std::string& sbx, const std::string& state) {
    ASSERT_TRUE(client.Patch(kube::SandboxResource(), kNs, sbx, kube::PatchType::kMerge,
                             Json{{"status", {{"vm", {{"state", state}}}}}}, "status").ok());
  }

  Json Sandbox(const std::string& name) {
    auto s = client.Get(kube::SandboxResource(), kNs, name);
    EXPECT_TRUE(s.ok()) << name;
    return s.ok() ? *s : Json::object();
  }

  kube::FakeClock clock;
  kube::FakeKubeClient client;
  ClientLister lister;
  Scheduler scheduler;
  LeaseAbsence lease_absence;
  WorkspaceClaims workspace_claims;
  Context ctx;
};

inline Json NewSandbox(const std::string& name, const std::string& tmpl,
                       std::map<std::string, std::string> labels = {}) {
  Json s = {{"metadata", {{"name", name}}}, {"spec", {{"templateRef", {{"name", tmpl}}}}}};
  for (const auto& [k, v] : labels) s["metadata"]["labels"][k] = v;
  return s;
}

}  // namespace kubicle::op::testing
