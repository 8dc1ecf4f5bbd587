// The harness's real kubelet node (e2e/harness/kubelet_node.h) on its own,
// before anything of Kubicle runs on it: a Deployment is scheduled, its pod
// starts from an imported image and reaches the apiserver at the
// `kubernetes` Service with its projected ServiceAccount token; a static
// pod runs and is mirrored; the node's teardown leaves nothing on the host.
// Exits 77 (skipped) without the kubelet binaries, containerd or root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "e2e/harness/control_plane.h"
#include "e2e/harness/kubelet_node.h"

namespace kubicle::e2e {
namespace {

std::string g_skip;
std::unique_ptr<ControlPlane> g_cp;
std::unique_ptr<KubeletNode> g_node;

class NodeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto bin = FindControlPlaneBinDir();
    if (getuid() != 0) {
      g_skip = "a kubelet node needs root";
    } else if (!bin || access((*bin + "/kubelet").c_str(), X_OK) != 0) {
      g_skip = "kubelet missing: run e2e/control-plane/build.sh";
    } else if (access("/usr/bin/containerd", X_OK) != 0) {
      g_skip = "containerd missing: run scripts/install-deps.sh";
    }
    if (!g_skip.empty()) return;
    auto slot = NodeSlot::Take();
    ASSERT_TRUE(slot.ok()) << slot.status().ToString();
    ControlPlaneOptions o;
    o.bin_dir = *bin;
    auto cp = ControlPlane::Start(KubeletNode::ControlPlaneFor(*slot, o));
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    g_cp = std::move(*cp);
    KubeletNodeOptions n;
    n.bin_dir = *bin;
    n.labels = {{"kubicle.dev/e2e", "true"}};
    auto node = KubeletNode::Start(*g_cp, std::move(*slot), n);
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    g_node = std::move(*node);
  }
  void TearDown() override {
    g_node.reset();
    g_cp.reset();
  }
};

class KubeletNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_skip.empty()) GTEST_SKIP() << g_skip;
    ASSERT_NE(g_node, nullptr) << "the node did not start";
  }
  std::string Kubectl(const std::vector<std::string>& args, const std::string& input = {}) {
    auto r = g_cp->Kubectl(args, input);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_EQ(r->exit_code, 0) << r->output;
    return r->output;
  }
  // Polls `kubectl logs` until it has `want` (the pod may not have run yet).
  std::string LogsUntil(const std::string& target, const std::string& want) {
    std::string out;
    for (int i = 0; i < 240; ++i) {
      auto r = g_cp->Kubectl({"logs", target});
      if (r.ok() && r->exit_code == 0) {
        out = r->output;
        if (out.find(want) != std::string::npos) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    return out;
  }
};

// The pod's own view of the cluster: it reaches the apiserver at
// $KUBERNETES_SERVICE_HOST:443 (busybox has no TLS client the apiserver
// accepts, so it speaks plain HTTP there: Go's TLS server answers that with
// its own 400), and the token kubelet projected for it (TokenRequest API,
// with the kube-root-ca.crt ConfigMap beside it) authenticates as its
// ServiceAccount.
TEST_F(KubeletNodeTest, ADeploymentsPodReachesTheApiserverThroughTheService) {
  const std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  const std::string script =
      "echo host=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
      "printf 'GET /version HTTP/1.0\\r\\n\\r\\n' | "
      "nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT; echo; "
      "ls " + sa + "; echo token=$(cat " + sa + "/token); sleep 2147483647";
  std::string quoted;  // a single-quoted YAML scalar: '' is a quote
  for (char c : script) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  const std::string yaml = std::string(R"(apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: hello
        image: )") + kE2EBusyboxImage + R"(
        imagePullPolicy: IfNotPresent
        command: [/bin/sh, -c]
        args: [')" + quoted + "']\n";
  Kubectl({"apply", "-f", "-"}, yaml);
  auto w = g_cp->Kubectl({"rollout", "status", "deployment/hello", "--timeout=180s"});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->exit_code, 0) << w->output;
  std::string logs = LogsUntil("deployment/hello", "token=");
  EXPECT_NE(logs.find("host=" + g_node->slot().service_ip() + ":443"), std::string::npos) << logs;
  EXPECT_NE(logs.find("Client sent an HTTP request to an HTTPS server"), std::string::npos) << logs;
  EXPECT_NE(logs.find("ca.crt"), std::string::npos) << logs;
  std::string token = logs.substr(logs.find("token=") + 6);
  token = token.substr(0, token.find('\n'));
  ASSERT_FALSE(token.empty()) << logs;
  // The token alone, without the admin's certificate.
  auto who = RunCommand({g_cp->bin_dir() + "/kubectl", "--kubeconfig=/dev/null",
                         "--server=https://127.0.0.1:" + std::to_string(g_cp->api_port()),
                         "--certificate-authority=" + g_cp->work_dir() + "/ca.crt",
                         "--token=" + token, "auth", "whoami", "-o",
                         "jsonpath={.status.userInfo.username}"});
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->output, "system:serviceaccount:default:default");
  EXPECT_EQ(Kubectl({"get", "pods", "-l", "app=hello", "-o", "jsonpath={.items[0].spec.nodeName}"}),
            g_node->node_name());
  Kubectl({"delete", "deployment", "hello", "--wait=true"});
}

TEST_F(KubeletNodeTest, AStaticPodRunsAndIsMirrored) {
  const std::string manifest = g_node->slot().dir() + "/manifests/static.yaml";
  std::ofstream(manifest) << "apiVersion: v1\nkind: Pod\nmetadata: {name: static, namespace: "
                             "default}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n"
                             "  - name: s\n    image: "
                          << kE2EBusyboxImage
                          << "\n    imagePullPolicy: IfNotPresent\n    command: [/bin/sh, -c, "
                             "'echo static-ok; hostname; sleep 2147483647']\n";
  const std::string mirror = "pod/static-" + g_node->node_name();
  std::string logs = LogsUntil(mirror, "static-ok");
  EXPECT_NE(logs.find("static-ok"), std::string::npos) << logs;
  EXPECT_EQ(Kubectl({"get", mirror, "-o", "jsonpath={.status.phase}"}), "Running");
  std::remove(manifest.c_str());
  // The kubelet stops it and the mirror goes.
  bool gone = false;
  for (int i = 0; i < 120 && !gone; ++i) {
    auto r = g_cp->Kubectl({"get", mirror, "-o", "name"});
    gone = r.ok() && r->output.find("NotFound") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_TRUE(gone) << "the mirror pod outlived its manifest";
}

// Runs last: a running pod, then the teardown; nothing of the node is left
// (processes, mounts, netns, cgroups, bridge, nftables table).
TEST_F(KubeletNodeTest, TeardownLeavesNothingOnTheHost) {
  Kubectl({"run", "left", "--image", kE2EBusyboxImage, "--image-pull-policy=IfNotPresent"});
  auto w = g_cp->Kubectl({"wait", "--for=condition=Ready", "pod/left", "--timeout=180s"});
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->exit_code, 0) << w->output;
  const NodeSlot& slot = g_node->slot();
  EXPECT_FALSE(slot.Leftovers().empty()) << "a running node shows nothing to clean";
  int index = slot.index();
  Status s = g_node->Stop();
  EXPECT_TRUE(s.ok()) << s.ToString();
  for (const std::string& l : g_node->slot().Leftovers()) ADD_FAILURE() << "left: " << l;
  if (std::getenv("KUBICLE_E2E_KEEP") == nullptr) {
    EXPECT_NE(access(("/tmp/kubicle-e2e-node/" + std::to_string(index)).c_str(), F_OK), 0)
        << "the slot directory was not removed";
  }
  // Idempotent.
  EXPECT_TRUE(g_node->Stop().ok());
}

}  // namespace
}  // namespace kubicle::e2e

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new kubicle::e2e::NodeEnvironment);
  int rc = RUN_ALL_TESTS();
  if (rc == 0 && !kubicle::e2e::g_skip.empty()) {
    std::cout << "skipped: " << kubicle::e2e::g_skip << "\n";
    return 77;
  }
  return rc;
}
