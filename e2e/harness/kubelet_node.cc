#include "e2e/harness/kubelet_node.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"

namespace kubicle::e2e {
namespace {

namespace fs = std::filesystem;

Status Run(const std::vector<std::string>& argv, const std::string& input = {},
           std::chrono::seconds timeout = std::chrono::seconds(120)) {
  ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv, input, timeout));
  if (r.exit_code != 0) {
    return Status::Internal(argv[0] + " failed (" + std::to_string(r.exit_code) + "): " + r.output);
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) return Status::Internal("cannot write " + path);
  return Status::Ok();
}

// The host's address on its default route: the node's InternalIP (the
// kubelet refuses loopback), where hostNetwork pods and hostPorts listen.
Result<std::string> HostAddress() {
  ASSIGN_OR_RETURN(CommandResult r, RunCommand({"ip", "-4", "-o", "route", "get", "1.0.0.1"}));
  std::istringstream in(r.output);
  std::string word;
  while (in >> word) {
    if (word == "src" && in >> word) return word;
  }
  return Status::Unavailable("no IPv4 default route to take the node's address from: " + r.output);
}

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

ControlPlaneOptions KubeletNode::ControlPlaneFor(const NodeSlot& slot, ControlPlaneOptions base) {
  base.workloads = true;
  base.service_cidr = slot.service_cidr();
  base.service_ip = slot.service_ip();
  return base;
}

Result<std::unique_ptr<KubeletNode>> KubeletNode::Start(ControlPlane& cp, NodeSlot slot,
                                                        KubeletNodeOptions opts) {
  if (!cp.options().workloads || cp.options().service_ip != slot.service_ip()) {
    return Status::InvalidArgument("start the control plane with KubeletNode::ControlPlaneFor");
  }
  for (const char* b : {"kubelet", "crictl"}) {
    if (access((opts.bin_dir + "/" + b).c_str(), X_OK) != 0) {
      return Status::NotFound(opts.bin_dir + "/" + b + " is missing: run e2e/control-plane/build.sh");
    }
  }
  for (const char* b : {"/usr/bin/containerd", "/usr/sbin/runc", "/usr/lib/cni/bridge"}) {
    if (access(b, X_OK) != 0) {
      return Status::NotFound(std::string(b) + " is missing: run scripts/install-deps.sh");
    }
  }
  if (opts.node_ip.empty()) {
    ASSIGN_OR_RETURN(opts.node_ip, HostAddress());
  }
  std::unique_ptr<KubeletNode> n(new KubeletNode(cp, std::move(slot), std::move(opts)));
  for (const char* d : {"containerd", "cni/conf", "cni/ipam", "kubelet", "manifests", "pod-logs",
                        "volume-plugins"}) {
    fs::create_directories(n->Path(d));
  }
  ASSIGN_OR_RETURN(n->stream_port_, FreePort());
  ASSIGN_OR_RETURN(n->kubelet_port_, FreePort());
  ASSIGN_OR_RETURN(n->healthz_port_, FreePort());
  RETURN_IF_ERROR(n->WriteContainerdConfig());
  RETURN_IF_ERROR(n->WriteCniConfig());
  RETURN_IF_ERROR(n->RouteServiceToApiserver());
  RETURN_IF_ERROR(n->StartContainerd());
  RETURN_IF_ERROR(n->WriteKubeletConfig());
  RETURN_IF_ERROR(n->StartKubelet());
  RETURN_IF_ERROR(n->WaitNodeReady());
  log::Info("kubelet node up", {{"node", n->opts_.node_name},
                                {"slot", n->slot_.index()},
                                {"dir", n->slot_.dir()}});
  return n;
}

KubeletNode::~KubeletNode() {
  Status s = Stop();
  if (!s.ok()) log::Warn("kubelet node teardown", {{"error", s.ToString()}});
}

Status KubeletNode::WriteContainerdConfig() {
  // restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and runc init
  // dies asking for the sandbox's oom_score_adj of -998. Shims' sockets
  // live under /run/containerd/s, named by a hash of this socket's path.
  std::ostringstream c;
  c << "version = 2\n"
    << "root = \"" << Path("containerd/root") << "\"\n"
    << "state = \"" << Path("containerd/state") << "\"\n"
    << "[grpc]\n  address = \"" << Path("containerd.sock") << "\"\n"
    << "[ttrpc]\n  address = \"" << Path("containerd.sock.ttrpc") << "\"\n"
    << "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"" << Path("containerd/opt")
    << "\"\n"
    << "[plugins.\"io.containerd.grpc.v1.cri\"]\n"
    << "  restrict_oom_score_adj = true\n"
    << "  sandbox_image = \"" << kE2EBusyboxImage << "\"\n"
    << "  stream_server_address = \"127.0.0.1\"\n"
    << "  stream_server_port = \"" << stream_port_ << "\"\n"
    << "  [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
    << "    snapshotter = \"overlayfs\"\n"
    << "    default_runtime_name = \"runc\"\n"
    << "    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n"
    << "      runtime_type = \"io.containerd.runc.v2\"\n"
    << "      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n"
    << "        SystemdCgroup = false\n"
    << "        BinaryName = \"/usr/sbin/runc\"\n"
    << "  [plugins.\"io.containerd.grpc.v1.cri\".cni]\n"
    << "    bin_dir = \"/usr/lib/cni\"\n"
    << "    conf_dir = \"" << Path("cni/conf") << "\"\n"
    << "    max_conf_num = 1\n";
  return WriteFile(Path("containerd.toml"), c.str());
}

Status KubeletNode::WriteCniConfig() {
  // A bridge on the slot's pod range (host-local addresses kept in the slot
  // directory) and portmap for hostPorts of pods off the host network; the
  // runtime adds loopback itself. No masquerade: pods talk to this host
  // only (the apiserver through the Service route, each other on the
  // bridge).
  std::ostringstream c;
  c << R"({"cniVersion": "1.0.0", "name": "kubicle-e2e-)" << slot_.index() << R"(", "plugins": [)"
    << R"({"type": "bridge", "bridge": ")" << slot_.bridge()
    << R"(", "isGateway": true, "hairpinMode": true, "ipam": {"type": "host-local", )"
    << R"("ranges": [[{"subnet": ")" << slot_.pod_cidr() << R"("}]], )"
    << R"("routes": [{"dst": "0.0.0.0/0"}], "dataDir": ")" << Path("cni/ipam") << R"("}},)"
    << R"({"type": "portmap", "capabilities": {"portMappings": true}}]})" << "\n";
  return WriteFile(Path("cni/conf/10-kubicle-e2e.conflist"), c.str());
}

Status KubeletNode::RouteServiceToApiserver() {
  // The apiserver listens on every address (ControlPlaneOptions::workloads)
  // and pods address it at the `kubernetes` Service: what kube-proxy would
  // do for that one Service, for pods (prerouting, from the bridge) and for
  // the host's own namespace (output: hostNetwork pods).
  const std::string rule = "ip daddr " + slot_.service_ip() + " tcp dport 443 dnat to " +
                           opts_.node_ip + ":" + std::to_string(cp_.api_port());
  const std::string t = "table ip " + slot_.nft_table() + " {\n" +
                        "  chain prerouting { type nat hook prerouting priority dstnat; " + rule +
                        "; }\n" + "  chain output { type nat hook output priority -100; " + rule +
                        "; }\n}\n";
  return Run({"nft", "-f", "-"}, t);
}

Status KubeletNode::StartContainerd() {
  ASSIGN_OR_RETURN(containerd_,
                   ChildProcess::Spawn({"/usr/bin/containerd", "--config", Path("containerd.toml")},
                                       log_path("containerd")));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    if (!containerd_.Running()) {
      return Status::Unavailable("containerd exited; see " + log_path("containerd"));
    }
    auto r = Ctr({"version"});
    if (r.ok() && r->exit_code == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::DeadlineExceeded("containerd did not answer on " + Path("containerd.sock"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The pod sandbox image (and the tests' shell): busybox-static.
  std::vector<std::string> argv = {"python3",
                                   std::string(KUBICLE_SOURCE_DIR) + "/e2e/harness/oci_image.py",
                                   "--name", kE2EBusyboxImage, "--out", Path("busybox.tar"),
                                   "--file", "/bin/busybox:/bin/busybox", "--entrypoint",
                                   R"(["/bin/sleep", "2147483647"])"};
  for (const char* tool : {"sh", "sleep", "cat", "echo", "wget", "env", "ls", "nc", "hostname"}) {
    argv.push_back("--symlink");
    argv.push_back(std::string("/bin/") + tool + ":busybox");
  }
  RETURN_IF_ERROR(Run(argv));
  return ImportImage(Path("busybox.tar"));
}

Status KubeletNode::WriteKubeletConfig() {
  const std::string name = opts_.node_name;
  RETURN_IF_ERROR(cp_.WriteClientKubeconfig("kubelet-" + name,
                                            "/O=system:nodes/CN=system:node:" + name,
                                            Path("kubelet.kubeconfig")));
  // RBAC is the only authorizer: grant the node role to this node's user.
  ASSIGN_OR_RETURN(CommandResult b,
                   cp_.Kubectl({"create", "clusterrolebinding", "e2e-node-" + name,
                                "--clusterrole=system:node", "--user=system:node:" + name}));
  if (b.exit_code != 0 && b.output.find("AlreadyExists") == std::string::npos) {
    return Status::Internal("binding system:node: " + b.output);
  }
  // The cgroup root must exist in every hierarchy; cpuset's needs its CPUs
  // and memory nodes before anything can join it.
  for (const std::string& h : CgroupV1Hierarchies()) {
    std::string dir = "/sys/fs/cgroup/" + h + slot_.cgroup_root();
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno("mkdir " + dir);
    if (h == "cpuset") {
      for (const char* f : {"cpuset.cpus", "cpuset.mems"}) {
        std::ifstream in(std::string("/sys/fs/cgroup/cpuset/") + f);
        std::string v;
        std::getline(in, v);
        std::ofstream(dir + "/" + f) << v << "\n";
      }
    }
  }
  std::ostringstream c;
  c << "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    << "failCgroupV1: false\ncgroupDriver: cgroupfs\n"
    << "cgroupRoot: " << slot_.cgroup_root() << "\n"
    << "containerRuntimeEndpoint: unix://" << Path("containerd.sock") << "\n"
    << "imageServiceEndpoint: unix://" << Path("containerd.sock") << "\n"
    << "address: " << opts_.node_ip << "\nport: " << kubelet_port_ << "\nreadOnlyPort: 0\n"
    << "healthzBindAddress: 127.0.0.1\nhealthzPort: " << healthz_port_ << "\n"
    << "authentication:\n  anonymous: {enabled: false}\n  webhook: {enabled: false}\n"
    << "  x509: {clientCAFile: " << cp_.work_dir() << "/ca.crt}\n"
    << "authorization: {mode: AlwaysAllow}\n"
    << "staticPodPath: " << Path("manifests") << "\nfileCheckFrequency: 5s\n"
    << "podLogsDir: " << Path("pod-logs") << "\n"
    << "volumePluginDir: " << Path("volume-plugins") << "\n"
    // Left false on purpose: true refuses to start unless kernel.panic=10,
    // panic_on_oops=1 and overcommit_memory=1 already (NodeSlot restores).
    << "protectKernelDefaults: false\nfailSwapOn: false\n"
    << "resolvConf: /etc/resolv.conf\n"
    // Imported images cannot be pulled again: never collect them.
    << "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n"
    << "evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, "
       "nodefs.inodesFree: 1%}\n"
    << "serializeImagePulls: false\n";
  return WriteFile(Path("kubelet.yaml"), c.str());
}

Status KubeletNode::StartKubelet() {
  std::vector<std::string> labels;
  for (const auto& [k, v] : opts_.labels) labels.push_back(k + "=" + v);
  std::vector<std::string> argv = {opts_.bin_dir + "/kubelet",
                                   "--config=" + Path("kubelet.yaml"),
                                   "--kubeconfig=" + Path("kubelet.kubeconfig"),
                                   "--root-dir=" + Path("kubelet"),
                                   "--hostname-override=" + opts_.node_name,
                                   "--node-ip=" + opts_.node_ip, "--v=2"};
  if (!labels.empty()) argv.push_back("--node-labels=" + Join(labels, ","));
  ASSIGN_OR_RETURN(kubelet_, ChildProcess::Spawn(argv, log_path("kubelet")));
  return Status::Ok();
}

Status KubeletNode::WaitNodeReady() {
  auto deadline = std::chrono::steady_clock::now() + opts_.start_timeout;
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!kubelet_.Running()) return Status::Unavailable("kubelet exited; see " + log_path("kubelet"));
    if (!containerd_.Running()) {
      return Status::Unavailable("containerd exited; see " + log_path("containerd"));
    }
    auto r = cp_.Kubectl({"get", "node", opts_.node_name, "-o",
                          "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"});
    if (r.ok() && r->exit_code == 0 && r->output == "True") return Status::Ok();
    last = r.ok() ? r->output : r.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return Status::DeadlineExceeded("node " + opts_.node_name + " not Ready (" + last + "); see " +
                                  log_path("kubelet"));
}

Status KubeletNode::ImportImage(const std::string& archive) {
  ASSIGN_OR_RETURN(CommandResult r, Ctr({"images", "import", archive}));
  if (r.exit_code != 0) return Status::Internal("ctr images import " + archive + ": " + r.output);
  return Status::Ok();
}

Result<CommandResult> KubeletNode::Ctr(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/ctr", "--address", Path("containerd.sock"), "-n",
                                   "k8s.io"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, std::chrono::seconds(300));
}

Result<CommandResult> KubeletNode::Crictl(const std::vector<std::string>& args) {
  const std::string ep = "unix://" + Path("containerd.sock");
  std::vector<std::string> argv = {opts_.bin_dir + "/crictl", "--runtime-endpoint", ep,
                                   "--image-endpoint", ep, "--timeout", "60s"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, std::chrono::seconds(180));
}

Status KubeletNode::Stop() {
  if (stopped_) return Status::Ok();
  stopped_ = true;
  kubelet_.Stop(std::chrono::seconds(10));
  // Through the CRI, so the runtime tears the pods down as it built them:
  // CNI DEL (addresses, veths, portmap rules), netns, sandbox mounts.
  if (containerd_.Running()) {
    auto r = Crictl({"rmp", "--all", "--force"});
    if (!r.ok() || r->exit_code != 0) {
      log::Warn("crictl rmp", {{"output", r.ok() ? r->output : r.status().ToString()}});
    }
  }
  containerd_.Stop(std::chrono::seconds(10));
  return slot_.CleanUp(std::getenv("KUBICLE_E2E_KEEP") != nullptr);
}

}  // namespace kubicle::e2e
