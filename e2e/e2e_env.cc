#include "e2e/e2e_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/unique_fd.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"

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
    Status rbac = ApplyChartRbac();
    ASSERT_TRUE(rbac.ok()) << rbac.ToString();
    Status policy = WaitForNodePolicy();
    ASSERT_TRUE(policy.ok()) << policy.ToString();
    Status images = WriteTestGuestImages(ImageRoot());
    ASSERT_TRUE(images.ok()) << images.ToString();
  }
  void TearDown() override { g_cluster.reset(); }
};

bool g_missing_binaries = false;

}  // namespace

// The e2e binaries' main: exit code 77 (CTest SKIP_RETURN_CODE) when the
// control plane binaries are missing or every test skipped (no /dev/kvm for
// the real nodes), so CTest reports "Skipped", not "Passed".
int RunE2E(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);
  g_missing_binaries = !FindControlPlaneBinDir().has_value();
  int rc = RUN_ALL_TESTS();
  const auto* u = ::testing::UnitTest::GetInstance();
  const bool all_skipped = u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count();
  return rc == 0 && (g_missing_binaries || all_skipped) ? 77 : rc;
}

ControlPlane* Cluster() { return g_cluster.get(); }

namespace {
std::string FromEnv(const char* var, const char* built) {
  const char* v = std::getenv(var);
  return v && *v ? v : built;
}
}  // namespace

std::string OperatorBin() { return FromEnv("KUBICLE_E2E_OPERATOR_BIN", KUBICLE_OPERATOR_BIN); }
std::string NodeBin() { return FromEnv("KUBICLE_E2E_NODE_BIN", KUBICLE_NODE_BIN); }
std::string VmmBin() { return FromEnv("KUBICLE_E2E_VMM_BIN", KUBICLE_VMM_BIN); }

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
  ASSIGN_OR_RETURN(std::string kubeconfig, OperatorKubeconfig(lease));
  std::vector<std::string> argv = {OperatorBin(), "--kubeconfig=" + kubeconfig,
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

kube::Json SandboxManifest(const std::string& name, const std::string& tmpl,
                           const std::map<std::string, std::string>& labels) {
  kube::Json s = {{"metadata", {{"name", name}}}, {"spec", {{"templateRef", {{"name", tmpl}}}}}};
  for (const auto& [k, v] : labels) s["metadata"]["labels"][k] = v;
  return s;
}


bool HaveKvm() {
  UniqueFd fd(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  return fd.valid();
}

std::string VmState(const Json& s) {
  const Json& st = s.value("status", Json::object());
  const Json& vm = st.value("vm", Json::object());
  return vm.is_object() ? vm.value("state", "") : "";
}

std::string Phase(const Json& s) {
  const Json& st = s.value("status", Json::object());
  return st.is_object() && st.value("phase", Json("")).is_string() ? st.value("phase", "") : "";
}

std::string LabelOf(const Json& o, const std::string& k) {
  const Json& labels = o["metadata"].value("labels", Json::object());
  return labels.is_object() ? labels.value(k, "") : "";
}

std::string VmId(const Json& s) { return "k-" + s["metadata"].value("uid", ""); }

// ---- Images and templates ----------------------------------------------------

std::string ImageRoot() { return g_cluster->work_dir() + "/images"; }

Status WriteTestGuestImages(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Internal("mkdir " + dir + ": " + ec.message());
  std::filesystem::copy_file(KUBICLE_TESTGUEST_BIN, dir + "/kubicle-testguest",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return Status::Internal(std::string("copy ") + KUBICLE_TESTGUEST_BIN + ": " + ec.message());
  std::ofstream rootfs(dir + "/rootfs.img", std::ios::binary | std::ios::trunc);
  rootfs << std::string(1 << 20, '\0');
  rootfs.close();
  if (!rootfs) return Status::Internal("cannot write " + dir + "/rootfs.img");
  return Status::Ok();
}

Status CreateTestGuestTemplate(kube::KubeClient* c, const std::string& ns, const std::string& name,
                               const TemplateOptions& opts) {
  const std::string root = opts.image_root.empty() ? ImageRoot() : opts.image_root;
  Json spec = {{"kernel", opts.kernel.empty() ? root + "/kubicle-testguest" : opts.kernel},
               {"rootfs", root + "/rootfs.img"},
               {"memoryMiB", 64},
               {"vcpus", 1}};
  for (const auto& cmd : opts.warmup) spec["warmup"].push_back({{"command", cmd}});
  if (!opts.network.is_null()) spec["network"] = opts.network;
  Json t = {{"metadata", {{"name", name}}}, {"spec", spec}};
  return c->Create(kube::SandboxTemplateResource(), ns, t).status();
}

Json TemplateNodeEntry(const Json& tmpl, const std::string& node) {
  const Json& st = tmpl.value("status", Json::object());
  for (const Json& e : st.value("nodes", Json::array())) {
    if (e.value("nodeName", "") == node) return e;
  }
  return nullptr;
}

bool WaitTemplateReady(kube::KubeClient* c, const std::string& ns, const std::string& tmpl,
                       const std::string& node, std::chrono::milliseconds timeout) {
  return Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, tmpl);
    if (!t.ok()) return false;
    Json e = TemplateNodeEntry(*t, node);
    return e.is_object() && e.value("phase", "") == "Ready" &&
           e.value("observedGeneration", 0) == (*t)["metadata"].value("generation", 0);
  }, timeout);
}

void CleanUpNamespace(kube::KubeClient* c, const std::string& ns, std::chrono::milliseconds timeout) {
  (void)c->DeleteCollection(kube::SandboxForkResource(), ns, "");
  (void)c->DeleteCollection(kube::SandboxResource(), ns, "");
  auto remaining = [&] {
    auto l = c->List(kube::SandboxResource(), ns, {});
    return l.ok() ? (*l)["items"] : Json::array();
  };
  if (!Eventually([&] { return remaining().empty(); }, timeout)) {
    for (const Json& s : remaining()) {
      (void)c->Patch(kube::SandboxResource(), ns, s["metadata"]["name"].get<std::string>(),
                     kube::PatchType::kMerge, {{"metadata", {{"finalizers", nullptr}}}});
    }
  }
  (void)c->DeleteCollection(kube::SandboxTemplateResource(), ns, "");
}

// ---- The data plane ----------------------------------------------------------

namespace {

std::string Base64Decode(const std::string& in) {
  auto val = [](char ch) -> int {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0, acc = 0;
  for (char ch : in) {
    int v = val(ch);
    if (v < 0) continue;  // padding, newlines
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace

Result<std::string> ServingCaFile(kube::KubeClient* c, const std::string& node) {
  if (node.empty()) return Status::FailedPrecondition("the Sandbox is on no node");
  ASSIGN_OR_RETURN(Json lease, c->Get(kube::LeaseResource(), kLeaseNs, "kubicle-node-" + node));
  const Json& ann = lease["metadata"].value("annotations", Json::object());
  const std::string pem = ann.is_object() ? ann.value("kubicle.dev/serving-ca", "") : "";
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Status::FailedPrecondition("the Lease of node " + node +
                                      " publishes no kubicle.dev/serving-ca: a cluster node serves TLS");
  }
  // Each call writes a file of its own: tests open data planes in parallel.
  static std::atomic<uint64_t> seq{0};
  const std::string path = g_cluster->work_dir() + "/serving-ca-" + node + "-" +
                           std::to_string(seq.fetch_add(1)) + ".pem";
  std::ofstream out(path, std::ios::trunc);
  out << pem;
  out.close();
  if (!out) return Status::Internal("cannot write " + path);
  return path;
}

SandboxDataPlane::~SandboxDataPlane() = default;

Result<std::unique_ptr<SandboxDataPlane>> SandboxDataPlane::Open(kube::KubeClient* c, const std::string& ns,
                                                                 const std::string& name) {
  ASSIGN_OR_RETURN(Json s, c->Get(kube::SandboxResource(), ns, name));
  const Json& st = s.value("status", Json::object());
  const std::string endpoint = st.value("vm", Json::object()).value("endpoint", "");
  const std::string secret = st.value("tokenSecretName", "");
  if (endpoint.empty() || secret.empty()) {
    return Status::FailedPrecondition("sandbox " + name + " has no endpoint or token yet: " + st.dump());
  }
  ASSIGN_OR_RETURN(Json sec, c->Get(kube::SecretResource(), ns, secret));
  const std::string token = Base64Decode(sec.value("data", Json::object()).value("token", ""));
  ASSIGN_OR_RETURN(std::string ca_file, ServingCaFile(c, LabelOf(s, "kubicle.dev/node")));
  std::unique_ptr<SandboxDataPlane> dp(new SandboxDataPlane());
  dp->id_ = VmId(s);
  ASSIGN_OR_RETURN(dp->client_,
                   noderuntime::client::NodeClient::Create("https://" + endpoint, token, ca_file));
  return dp;
}

Result<Json> SandboxDataPlane::Exec(const std::vector<std::string>& argv) {
  return client_->Call("POST", "/v1/sandboxes/" + id_ + "/exec", {{"argv", argv}});
}

Status SandboxDataPlane::PutFile(const std::string& path, const std::string& data) {
  return client_->PutFile(id_, path, data, 0644);
}

Result<std::string> SandboxDataPlane::GetFile(const std::string& path) { return client_->GetFile(id_, path); }

Result<Json> ExecInSandbox(kube::KubeClient* c, const std::string& ns, const std::string& name,
                           const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(auto dp, SandboxDataPlane::Open(c, ns, name));
  return dp->Exec(argv);
}

// ---- Processes ---------------------------------------------------------------

std::optional<ProcessId> IdentifyProcess(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), {});
  size_t paren = text.rfind(')');  // comm may hold spaces and parens
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(paren + 1));
  std::vector<std::string> fields;  // fields[0] is field 3 of proc(5), the state
  for (std::string w; rest >> w;) fields.push_back(w);
  if (fields.size() < 20 || fields[0] == "Z" || fields[0] == "X") return std::nullopt;
  return ProcessId{pid, std::stoull(fields[19])};  // field 22: starttime
}

bool Alive(const ProcessId& p) {
  auto now = IdentifyProcess(p.pid);
  return now && now->start_ticks == p.start_ticks;
}

}  // namespace kubicle::e2e
