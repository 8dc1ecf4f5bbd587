// Shared pieces of the e2e tests: one control plane per test binary (a
// GoogleTest environment; tests skip with a clear message when the control
// plane binaries are missing), the kubicle-operator binary run as a child
// process, and NodeSim, which plays kubicle-node through the API exactly as
// the node daemon does (heartbeat Lease with capacity, template status entry
// by server-side apply, status.vm reports including teardown).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "e2e/harness/control_plane.h"
#include "kube/http_kube_client.h"

namespace kubicle::e2e {

inline constexpr const char* kLeaseNs = "kubicle-node-lease";
inline constexpr const char* kSystemNs = "kubicle-system";

// Started once by the environment; null when binaries are missing.
ControlPlane* Cluster();
std::unique_ptr<kube::HttpKubeClient> NewClient();
// main() of the e2e test binaries (see e2e_main.cc).
int RunE2E(int argc, char** argv);
// GTEST_SKIP()s the calling test when there is no control plane.
#define KUBICLE_REQUIRE_CLUSTER()                                                   \
  do {                                                                              \
    if (::kubicle::e2e::Cluster() == nullptr) {                                     \
      GTEST_SKIP() << "control plane binaries missing: run e2e/control-plane/build.sh"; \
    }                                                                               \
  } while (0)

// Polls `cond` every 50 ms until true or `timeout`.
bool Eventually(const std::function<bool()>& cond,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Creates a namespace (and returns its name) unique to the calling test.
std::string TestNamespace(kube::KubeClient* c);

class OperatorProcess {
 public:
  // Leader election on, in kubicle-system, with a Lease unique to `lease`.
  static Result<std::unique_ptr<OperatorProcess>> Start(const std::string& lease,
                                                        int metrics_port = 0,
                                                        const std::string& extra_flag = {});
  void Kill() { proc_.Kill(); }
  void Stop() { proc_.Stop(std::chrono::seconds(10)); }
  std::string log_path;

 private:
  ChildProcess proc_;
};

class NodeSim {
 public:
  NodeSim(kube::KubeClient* c, std::string node) : c_(c), node_(std::move(node)) {}
  ~NodeSim() { StopTeardownLoop(); }
  Status Heartbeat(int capacity, int lease_seconds = 300);
  Status TemplateReady(const std::string& ns, const std::string& tmpl);
  Status ReportVm(const std::string& ns, const std::string& sandbox, const std::string& state);
  // Reports Terminated for every deleting Sandbox on this node in `ns`,
  // in a background loop, as the node daemon's teardown does.
  void StartTeardownLoop(const std::string& ns);
  void StopTeardownLoop();
  const std::string& name() const { return node_; }

 private:
  kube::KubeClient* c_;
  std::string node_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

kube::Json SandboxManifest(const std::string& name, const std::string& tmpl,
                           const std::map<std::string, std::string>& labels = {});
Status CreateTemplate(kube::KubeClient* c, const std::string& ns, const std::string& name);

}  // namespace kubicle::e2e
