#include "e2e/e2e_env.h"

#include <algorithm>
#include <cctype>

#include "kube/resource.h"
#include "kube/time_format.h"

namespace kubicle::e2e {
namespace {

std::unique_ptr<ControlPlane> g_cluster;

class ClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto bin = FindControlPlaneBinDir();
    if (!bin) {
      std::cerr << "[e2e] control plane binaries missing: run e2e/control-plane/build.sh; "
                   "e2e tests will be skipped\n";
      return;
    }
    ControlPlaneOptions opts;
    opts.bin_dir = *bin;
    opts.crd_dir = std::string(KUBICLE_SOURCE_DIR) + "/crds";
    auto cp = ControlPlane::Start(opts);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    g_cluster = std::move(*cp);
    for (const char* ns : {kLeaseNs, kSystemNs}) {
      auto r = g_cluster->Kubectl({"create", "namespace", ns});
      ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->output : r.status().ToString());
    }
  }
  void TearDown() override { g_cluster.reset(); }
};

bool g_missing_binaries = false;

}  // namespace

// The e2e binaries' main: exit code 77 (CTest SKIP_RETURN_CODE) when the
// control plane binaries are missing, so CTest reports "Skipped", not "Passed".
int RunE2E(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);
  g_missing_binaries = !FindControlPlaneBinDir().has_value();
  int rc = RUN_ALL_TESTS();
  return rc == 0 && g_missing_binaries ? 77 : rc;
}

ControlPlane* Cluster() { return g_cluster.get(); }

std::unique_ptr<kube::HttpKubeClient> NewClient() {
  auto cfg = g_cluster->RestConfig();
  if (!cfg.ok()) return nullptr;
  auto c = kube::HttpKubeClient::Create(*cfg);
  return c.ok() ? std::move(*c) : nullptr;
}

bool Eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

std::string TestNamespace(kube::KubeClient* c) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->name());
  std::string ns = "e2e-";
  for (char ch : name) {
    if (std::isupper(static_cast<unsigned char>(ch)) && ns.size() > 4) ns += '-';
    ns += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  ns = ns.substr(0, 40);  // node names derived from it must fit a label value
  while (!ns.empty() && ns.back() == '-') ns.pop_back();
  (void)c->Create(kube::NamespaceResource(), "", kube::Json{{"metadata", {{"name", ns}}}});
  return ns;
}

Result<std::unique_ptr<OperatorProcess>> OperatorProcess::Start(const std::string& lease,
                                                                int metrics_port,
                                                                const std::string& extra_flag) {
  auto op = std::make_unique<OperatorProcess>();
  op->log_path = g_cluster->work_dir() + "/operator-" + lease + ".log";
  std::vector<std::string> argv = {KUBICLE_OPERATOR_BIN,
                                   "--kubeconfig=" + g_cluster->kubeconfig_path(),
                                   "--leader-election-namespace=" + std::string(kSystemNs),
                                   "--leader-election-lease=" + lease,
                                   "--lease-duration-seconds=20", "--renew-deadline-seconds=15",
                                   "--retry-period-seconds=1",
                                   "--node-lease-namespace=" + std::string(kLeaseNs),
                                   "--metrics-port=" + std::to_string(metrics_port),
                                   "--metrics-address=127.0.0.1", "--log-level=info"};
  if (!extra_flag.empty()) argv.push_back(extra_flag);
  ASSIGN_OR_RETURN(op->proc_, ChildProcess::Spawn(argv, op->log_path));
  return op;
}

Status NodeSim::Heartbeat(int capacity, int lease_seconds) {
  kube::Json lease = {
      {"apiVersion", "coordination.k8s.io/v1"}, {"kind", "Lease"},
      {"metadata", {{"name", "kubicle-node-" + node_}, {"namespace", kLeaseNs},
                    {"labels", {{"kubicle.dev/node", node_}}},
                    {"annotations", {{"kubicle.dev/capacity-sandboxes", std::to_string(capacity)}}}}},
      {"spec", {{"holderIdentity", node_}, {"leaseDurationSeconds", lease_seconds},
                {"renewTime", kube::FormatMicroTime(std::chrono::system_clock::now())}}}};
  kube::PatchOptions po;
  po.field_manager = "kubicle-node/" + node_;
  po.force = true;
  return c_->Patch(kube::LeaseResource(), kLeaseNs, "kubicle-node-" + node_, kube::PatchType::kApply,
                   lease, "", po).status();
}

Status NodeSim::TemplateReady(const std::string& ns, const std::string& tmpl) {
  ASSIGN_OR_RETURN(kube::Json t, c_->Get(kube::SandboxTemplateResource(), ns, tmpl));
  kube::Json entry = {{"nodeName", node_}, {"phase", "Ready"},
                      {"observedGeneration", t["metadata"]["generation"]},
                      {"lastUpdateTime", kube::FormatTime(std::chrono::system_clock::now())}};
  kube::Json apply = {{"metadata", {{"name", tmpl}, {"namespace", ns}}},
                      {"status", {{"nodes", kube::Json::array({entry})}}}};
  kube::PatchOptions po;
  po.field_manager = "kubicle-node/" + node_;  // one owner per list entry
  po.force = true;
  return c_->Patch(kube::SandboxTemplateResource(), ns, tmpl, kube::PatchType::kApply, apply,
                   "status", po).status();
}

Status NodeSim::ReportVm(const std::string& ns, const std::string& sandbox,
                         const std::string& state) {
  kube::Json patch = {{"status", {{"vm", {{"state", state},
                                          {"lastUpdateTime", kube::FormatTime(std::chrono::system_clock::now())}}}}}};
  return c_->Patch(kube::SandboxResource(), ns, sandbox, kube::PatchType::kMerge, patch, "status")
      .status();
}

void NodeSim::StartTeardownLoop(const std::string& ns) {
  loop_ = std::thread([this, ns] {
    while (!stop_.load()) {
      kube::ListOptions o;
      o.label_selector = "kubicle.dev/node=" + node_;
      auto list = c_->List(kube::SandboxResource(), ns, o);
      if (list.ok()) {
        for (const kube::Json& s : (*list)["items"]) {
          bool deleting = s["metadata"].contains("deletionTimestamp");
          bool done = s.contains("status") && s["status"].contains("vm") &&
                      s["status"]["vm"].value("state", "") == "Terminated";
          if (deleting && !done) {
            (void)ReportVm(ns, s["metadata"]["name"].get<std::string>(), "Terminated");
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void NodeSim::StopTeardownLoop() {
  stop_.store(true);
  if (loop_.joinable()) loop_.join();
}

kube::Json SandboxManifest(const std::string& name, const std::string& tmpl,
                           const std::map<std::string, std::string>& labels) {
  kube::Json s = {{"metadata", {{"name", name}}}, {"spec", {{"templateRef", {{"name", tmpl}}}}}};
  for (const auto& [k, v] : labels) s["metadata"]["labels"][k] = v;
  return s;
}

Status CreateTemplate(kube::KubeClient* c, const std::string& ns, const std::string& name) {
  kube::Json t = {{"metadata", {{"name", name}}},
                  {"spec", {{"kernel", "/var/lib/kubicle/vmlinux"},
                            {"rootfs", "/var/lib/kubicle/python.ext4"}}}};
  return c->Create(kube::SandboxTemplateResource(), ns, t).status();
}

}  // namespace kubicle::e2e
