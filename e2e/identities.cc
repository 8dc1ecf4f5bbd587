// Identities of the e2e tier (e2e_env.h, "Identities"): the operator and
// every node run with the Helm chart's own RBAC, rendered by the real helm
// and applied with kubectl, and a ServiceAccount token each from the
// TokenRequest API (`kubectl create token`), never as cluster admin.
#include <filesystem>
#include <fstream>
#include <mutex>

#include "e2e/e2e_env.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

constexpr const char* kRelease = "kubicle";
// Long enough for any e2e binary; the tests restart the apiserver, never
// rotate its signing key, so a token stays valid for the whole run.
constexpr const char* kTokenDuration = "--duration=24h";

Result<std::string> Run(const std::vector<std::string>& kubectl_args, const std::string& input = {}) {
  ASSIGN_OR_RETURN(CommandResult r, Cluster()->Kubectl(kubectl_args, input));
  if (r.exit_code != 0) {
    std::string cmd = "kubectl";
    for (const auto& a : kubectl_args) cmd += " " + a;
    return Status::Internal(cmd + " failed (" + std::to_string(r.exit_code) + "): " + r.output);
  }
  return r.output;
}

// helm template renders offline: it needs the server's version for the
// chart's kubeVersion constraint.
Result<std::string> ServerVersion() {
  static std::mutex mu;
  static std::string version;
  std::lock_guard lock(mu);
  if (!version.empty()) return version;
  ASSIGN_OR_RETURN(std::string out, Run({"version", "-o", "json"}));
  Json v = Json::parse(out, nullptr, false);
  if (v.is_discarded() || !v["serverVersion"]["gitVersion"].is_string()) {
    return Status::Internal("kubectl version: " + out);
  }
  version = v["serverVersion"]["gitVersion"].get<std::string>();
  return version;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A kubeconfig for `token` against the test cluster, verifying its CA.
Result<std::string> WriteTokenKubeconfig(const std::string& name, const std::string& token) {
  ASSIGN_OR_RETURN(kube::RestConfig admin, Cluster()->RestConfig());
  const std::string path = Cluster()->work_dir() + "/" + name + ".kubeconfig";
  std::ofstream out(path, std::ios::trunc);
  out << "apiVersion: v1\nkind: Config\ncurrent-context: e2e\n"
      << "clusters:\n- name: e2e\n  cluster:\n    server: " << admin.server
      << "\n    certificate-authority: " << Cluster()->work_dir() << "/ca.crt\n"
      << "users:\n- name: " << name << "\n  user:\n    token: " << token << "\n"
      << "contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: " << name
      << "\n    namespace: default\n";
  out.close();
  if (!out) return Status::Internal("cannot write " + path);
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}

}  // namespace

Status ApplyChartRbac(const std::string& leader_lease) {
  ASSIGN_OR_RETURN(std::string version, ServerVersion());
  const std::string chart = std::string(KUBICLE_SOURCE_DIR) + "/helm/kubicle";
  ASSIGN_OR_RETURN(CommandResult r,
                   Cluster()->Helm({"template", kRelease, chart, "--namespace", kSystemNs,
                                    "--kube-version", version,
                                    "--set", "node.leaseNamespace=" + std::string(kLeaseNs),
                                    "--set", "operator.leaderElection.leaseName=" + leader_lease,
                                    "--show-only", "templates/operator-rbac.yaml",
                                    "--show-only", "templates/node-rbac.yaml",
                                    "--show-only", "templates/node-admission.yaml"}));
  if (r.exit_code != 0) return Status::Internal("helm template: " + r.output);
  return Run({"apply", "-f", "-"}, r.output).status();
}

Status WaitForNodePolicy() {
  // The apiserver enforces a new policy once its informer has it: until a
  // node's write of another node's Lease is refused, it is not in force.
  ASSIGN_OR_RETURN(std::string kc, NodeKubeconfig("policy-probe"));
  ASSIGN_OR_RETURN(auto node, NewClientAs(kc));
  auto admin = NewClient();
  const Json other = {{"metadata", {{"name", "kubicle-node-policy-probe-other"},
                                    {"labels", {{"kubicle.dev/node", "policy-probe-other"}}}}},
                      {"spec", {{"holderIdentity", "policy-probe-other"}}}};
  Status last;
  bool refused = Eventually([&] {
    auto r = node->Create(kube::LeaseResource(), kLeaseNs, other);
    if (r.ok()) (void)admin->Delete(kube::LeaseResource(), kLeaseNs, "kubicle-node-policy-probe-other");
    last = r.status();
    return !r.ok() && r.status().code() == StatusCode::kPermissionDenied &&
           r.status().message().find("ValidatingAdmissionPolicy") != std::string::npos;
  }, std::chrono::seconds(60));
  if (!refused) return Status::DeadlineExceeded("the node admission policy is not enforced: " + last.ToString());
  return Status::Ok();
}

Result<std::string> OperatorKubeconfig(const std::string& leader_lease) {
  RETURN_IF_ERROR(ApplyChartRbac(leader_lease));
  ASSIGN_OR_RETURN(std::string token, Run({"create", "token", kOperatorServiceAccount, "-n",
                                           kSystemNs, kTokenDuration}));
  return WriteTokenKubeconfig("operator-" + leader_lease, Trim(token));
}

Result<std::string> NodeKubeconfig(const std::string& node) {
  // The token is bound to the Node object, so the apiserver puts the node's
  // name in the request's user info (authentication.kubernetes.io/node-name),
  // as it does for the DaemonSet pod's projected token (bound to a Pod on
  // that node). No kubelet runs here: the Node object is only a name.
  auto created = Run({"create", "-f", "-"},
                     Json{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node}}}}.dump());
  if (!created.ok() && created.status().message().find("AlreadyExists") == std::string::npos) {
    return created.status();
  }
  ASSIGN_OR_RETURN(std::string token,
                   Run({"create", "token", kNodeServiceAccount, "-n", kSystemNs, kTokenDuration,
                        "--bound-object-kind=Node", "--bound-object-name=" + node}));
  return WriteTokenKubeconfig("node-" + node, Trim(token));
}

Result<std::string> ServiceAccountKubeconfig(const std::string& ns, const std::string& sa) {
  auto created = Run({"create", "serviceaccount", sa, "-n", ns});
  if (!created.ok() && created.status().message().find("AlreadyExists") == std::string::npos) {
    return created.status();
  }
  ASSIGN_OR_RETURN(std::string token, Run({"create", "token", sa, "-n", ns, kTokenDuration}));
  return WriteTokenKubeconfig("sa-" + ns + "-" + sa, Trim(token));
}

Result<std::unique_ptr<kube::HttpKubeClient>> NewClientAs(const std::string& kubeconfig) {
  ASSIGN_OR_RETURN(kube::RestConfig cfg, kube::LoadKubeconfig(kubeconfig));
  return kube::HttpKubeClient::Create(cfg);
}

}  // namespace kubicle::e2e
