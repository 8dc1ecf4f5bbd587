#include "e2e/harness/control_plane.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/log.h"

namespace kubicle::e2e {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool Executable(const std::string& p) { return access(p.c_str(), X_OK) == 0; }

Status Run(const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv));
  if (r.exit_code != 0) {
    return Status::Internal(argv[0] + " failed (" + std::to_string(r.exit_code) + "): " + r.output);
  }
  return Status::Ok();
}

Result<std::string> Base64File(const std::string& path) {
  ASSIGN_OR_RETURN(CommandResult r, RunCommand({"base64", "-w0", path}));
  if (r.exit_code != 0) return Status::Internal("base64 " + path + ": " + r.output);
  return Trim(r.output);
}

}  // namespace

std::optional<std::string> FindControlPlaneBinDir() {
  std::string dir;
  if (const char* env = std::getenv("KUBICLE_CONTROL_PLANE_BIN")) {
    dir = env;
  } else {
    auto r = RunCommand({std::string(KUBICLE_SOURCE_DIR) + "/e2e/control-plane/build.sh",
                         "--print-bin-dir"});
    // It prints the directory even when the cache is incomplete (exit 1),
    // e.g. while the node's binaries are being added to it: the control
    // plane's own binaries are checked below.
    if (!r.ok()) return std::nullopt;
    dir = Trim(r->output);
  }
  for (const char* b : {"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm"}) {
    if (!Executable(dir + "/" + b)) return std::nullopt;
  }
  return dir;
}

Result<std::unique_ptr<ControlPlane>> ControlPlane::Start(ControlPlaneOptions opts) {
  if (opts.work_dir.empty()) {
    char tmpl[] = "/tmp/kubicle-e2e-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp");
    opts.work_dir = tmpl;
  }
  std::unique_ptr<ControlPlane> cp(new ControlPlane(std::move(opts)));
  ASSIGN_OR_RETURN(cp->etcd_port_, FreePort());
  ASSIGN_OR_RETURN(cp->etcd_peer_port_, FreePort());
  ASSIGN_OR_RETURN(cp->api_port_, FreePort());
  RETURN_IF_ERROR(cp->GenerateCertificates());
  cp->kubeconfig_ = cp->Path("admin.kubeconfig");
  RETURN_IF_ERROR(cp->WriteKubeconfig(cp->kubeconfig_, "admin"));
  RETURN_IF_ERROR(cp->WriteKubeconfig(cp->Path("kcm.kubeconfig"), "kcm"));
  RETURN_IF_ERROR(cp->StartEtcd());
  RETURN_IF_ERROR(cp->StartApiserver());
  RETURN_IF_ERROR(cp->WaitReady(cp->opts_.start_timeout));
  // CRDs first, so the garbage collector monitors them from its first sync.
  if (!cp->opts_.crd_dir.empty()) RETURN_IF_ERROR(cp->InstallCrds(cp->opts_.crd_dir));
  if (cp->opts_.controller_manager) RETURN_IF_ERROR(cp->StartControllerManager());
  if (cp->opts_.workloads) RETURN_IF_ERROR(cp->StartScheduler());
  log::Info("control plane up", {{"dir", cp->opts_.work_dir}, {"port", cp->api_port_}});
  return cp;
}

ControlPlane::~ControlPlane() {
  scheduler_.Stop(std::chrono::seconds(5));
  controller_manager_.Stop(std::chrono::seconds(5));
  apiserver_.Stop(std::chrono::seconds(10));
  etcd_.Stop(std::chrono::seconds(5));
  if (std::getenv("KUBICLE_E2E_KEEP") == nullptr) {
    (void)RunCommand({"rm", "-rf", opts_.work_dir});
  }
}

Status ControlPlane::GenerateCertificates() {
  const std::string d = opts_.work_dir;
  RETURN_IF_ERROR(Run({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                       "-subj", "/CN=kubicle-e2e-ca", "-keyout", d + "/ca.key", "-out",
                       d + "/ca.crt"}));
  {
    std::ofstream ext(d + "/server.ext");
    ext << "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
           "DNS:kubernetes.default.svc,IP:"
        << opts_.service_ip << "\nextendedKeyUsage=serverAuth\n";
    std::ofstream cext(d + "/client.ext");
    cext << "extendedKeyUsage=clientAuth\n";
  }
  struct Cert {
    std::string name, subject, ext;
  };
  for (const Cert& c : {Cert{"apiserver", "/CN=kube-apiserver", "server.ext"},
                        Cert{"admin", "/O=system:masters/CN=kubernetes-admin", "client.ext"},
                        // system:masters: the garbage collector must read and delete every kind,
                        // including CRs, which the bootstrap kcm role does not grant.
                        Cert{"kcm", "/O=system:masters/CN=system:kube-controller-manager", "client.ext"}}) {
    RETURN_IF_ERROR(Run({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", c.subject,
                         "-keyout", d + "/" + c.name + ".key", "-out", d + "/" + c.name + ".csr"}));
    RETURN_IF_ERROR(Run({"openssl", "x509", "-req", "-in", d + "/" + c.name + ".csr", "-CA",
                         d + "/ca.crt", "-CAkey", d + "/ca.key", "-CAcreateserial", "-days", "2",
                         "-extfile", d + "/" + c.ext, "-out", d + "/" + c.name + ".crt"}));
  }
  RETURN_IF_ERROR(Run({"openssl", "genrsa", "-out", d + "/sa.key", "2048"}));
  return Run({"openssl", "rsa", "-in", d + "/sa.key", "-pubout", "-out", d + "/sa.pub"});
}

Status ControlPlane::WriteClientKubeconfig(const std::string& name, const std::string& subject,
                                           const std::string& path) {
  const std::string d = opts_.work_dir;
  RETURN_IF_ERROR(Run({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                       "-keyout", d + "/" + name + ".key", "-out", d + "/" + name + ".csr"}));
  RETURN_IF_ERROR(Run({"openssl", "x509", "-req", "-in", d + "/" + name + ".csr", "-CA",
                       d + "/ca.crt", "-CAkey", d + "/ca.key", "-CAcreateserial", "-days", "2",
                       "-extfile", d + "/client.ext", "-out", d + "/" + name + ".crt"}));
  return WriteKubeconfig(path, name);
}

Status ControlPlane::WriteKubeconfig(const std::string& path, const std::string& user) {
  ASSIGN_OR_RETURN(std::string ca, Base64File(Path("ca.crt")));
  ASSIGN_OR_RETURN(std::string cert, Base64File(Path(user + ".crt")));
  ASSIGN_OR_RETURN(std::string key, Base64File(Path(user + ".key")));
  std::ofstream out(path);
  out << "apiVersion: v1\nkind: Config\ncurrent-context: e2e\n"
      << "clusters:\n- name: e2e\n  cluster:\n    server: https://127.0.0.1:" << api_port_
      << "\n    certificate-authority-data: " << ca << "\n"
      << "users:\n- name: " << user << "\n  user:\n    client-certificate-data: " << cert
      << "\n    client-key-data: " << key << "\n"
      << "contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: " << user
      << "\n    namespace: default\n";
  if (!out) return Status::Internal("cannot write " + path);
  return Status::Ok();
}

Status ControlPlane::StartEtcd() {
  std::string client = "http://127.0.0.1:" + std::to_string(etcd_port_);
  std::string peer = "http://127.0.0.1:" + std::to_string(etcd_peer_port_);
  ASSIGN_OR_RETURN(etcd_, ChildProcess::Spawn(
                              {opts_.bin_dir + "/etcd", "--name=e2e",
                               "--data-dir=" + Path("etcd-data"), "--listen-client-urls=" + client,
                               "--advertise-client-urls=" + client, "--listen-peer-urls=" + peer,
                               "--initial-advertise-peer-urls=" + peer,
                               "--initial-cluster=e2e=" + peer, "--unsafe-no-fsync=true",
                               "--log-level=warn"},
                              Path("etcd.log")));
  return Status::Ok();
}

Status ControlPlane::StartApiserver() {
  ASSIGN_OR_RETURN(
      apiserver_,
      ChildProcess::Spawn(
          {opts_.bin_dir + "/kube-apiserver",
           "--etcd-servers=http://127.0.0.1:" + std::to_string(etcd_port_),
           // Workloads: pods reach it through the node's route from the
           // Service address to the host's own (kubelet_node.cc).
           std::string("--bind-address=") + (opts_.workloads ? "0.0.0.0" : "127.0.0.1"),
           "--advertise-address=127.0.0.1",
           "--secure-port=" + std::to_string(api_port_), "--tls-cert-file=" + Path("apiserver.crt"),
           "--tls-private-key-file=" + Path("apiserver.key"), "--client-ca-file=" + Path("ca.crt"),
           "--service-account-issuer=https://kubernetes.default.svc",
           "--service-account-key-file=" + Path("sa.pub"),
           "--service-account-signing-key-file=" + Path("sa.key"),
           "--service-cluster-ip-range=" + opts_.service_cidr, "--authorization-mode=RBAC",
           "--allow-privileged=true", "--profiling=false", "--v=1",
           // kubectl logs/exec reach a KubeletNode's kubelet as the admin.
           "--kubelet-client-certificate=" + Path("admin.crt"),
           "--kubelet-client-key=" + Path("admin.key"),
           "--kubelet-preferred-address-types=InternalIP"},
          Path("kube-apiserver.log")));
  return Status::Ok();
}

Status ControlPlane::StartControllerManager() {
  std::vector<std::string> argv = {opts_.bin_dir + "/kube-controller-manager",
                                   "--kubeconfig=" + Path("kcm.kubeconfig"),
                                   "--leader-elect=false", "--use-service-account-credentials=false",
                                   "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"};
  if (opts_.workloads) {
    // Jobs: Helm hooks (the chart's pre-delete uninstall Job). Pods' token
    // volumes project the kube-root-ca.crt ConfigMap (published
    // from --root-ca-file) and need their ServiceAccount to exist.
    argv.push_back(
        "--controllers=garbage-collector-controller,namespace-controller,"
        "deployment-controller,replicaset-controller,daemonset-controller,job-controller,"
        "serviceaccount-controller,serviceaccount-token-controller,"
        "root-ca-certificate-publisher-controller,pod-garbage-collector-controller,"
        // Takes the node.kubernetes.io/not-ready taint the kubelet
        // registers with off once the node is Ready.
        "node-lifecycle-controller");
    argv.push_back("--root-ca-file=" + Path("ca.crt"));
    argv.push_back("--service-account-private-key-file=" + Path("sa.key"));
  } else {
    argv.push_back("--controllers=garbage-collector-controller,namespace-controller");
  }
  ASSIGN_OR_RETURN(controller_manager_,
                   ChildProcess::Spawn(argv, Path("kube-controller-manager.log")));
  return Status::Ok();
}

Status ControlPlane::StartScheduler() {
  // Its own identity: the bootstrap policy binds system:kube-scheduler.
  RETURN_IF_ERROR(WriteClientKubeconfig("scheduler", "/CN=system:kube-scheduler",
                                        Path("scheduler.kubeconfig")));
  ASSIGN_OR_RETURN(scheduler_,
                   ChildProcess::Spawn({opts_.bin_dir + "/kube-scheduler",
                                        "--kubeconfig=" + Path("scheduler.kubeconfig"),
                                        "--leader-elect=false", "--bind-address=127.0.0.1",
                                        "--secure-port=0", "--v=1"},
                                       Path("kube-scheduler.log")));
  return Status::Ok();
}

Status ControlPlane::WaitReady(std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!apiserver_.Running()) {
      return Status::Unavailable("kube-apiserver exited; see " + Path("kube-apiserver.log"));
    }
    auto r = Kubectl({"get", "--raw=/readyz"});
    if (r.ok() && r->exit_code == 0) return Status::Ok();
    last = r.ok() ? r->output : r.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return Status::DeadlineExceeded("apiserver not ready: " + last);
}

Status ControlPlane::RestartApiserver() {
  apiserver_.Stop(std::chrono::seconds(10));
  RETURN_IF_ERROR(StartApiserver());
  return WaitReady(opts_.start_timeout);
}

Result<kube::RestConfig> ControlPlane::RestConfig() const {
  return kube::LoadKubeconfig(kubeconfig_);
}

Result<CommandResult> ControlPlane::Kubectl(const std::vector<std::string>& args,
                                            const std::string& input) {
  std::vector<std::string> argv = {opts_.bin_dir + "/kubectl", "--kubeconfig=" + kubeconfig_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, input);
}

Result<CommandResult> ControlPlane::Helm(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {opts_.bin_dir + "/helm", "--kubeconfig=" + kubeconfig_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

Status ControlPlane::InstallCrds(const std::string& crd_dir) {
  ASSIGN_OR_RETURN(CommandResult r, Kubectl({"apply", "--server-side", "-f", crd_dir}));
  if (r.exit_code != 0) return Status::InvalidArgument("CRDs refused: " + r.output);
  ASSIGN_OR_RETURN(CommandResult w, Kubectl({"wait", "--for=condition=Established",
                                             "--timeout=60s", "-f", crd_dir}));
  if (w.exit_code != 0) return Status::Unavailable("CRDs not established: " + w.output);
  return Status::Ok();
}

}  // namespace kubicle::e2e
