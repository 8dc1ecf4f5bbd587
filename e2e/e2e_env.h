// Shared pieces of the e2e tests: one control plane per test binary (a
// GoogleTest environment; tests skip with a clear message when the control
// plane binaries are missing), the kubicle-operator binary run as a child
// process, and real node daemons: NodeProcess runs the built kubicle-node
// with the node agent (--node-name) on this machine's /dev/kvm, with the
// tiny test guest as the template image (docs/testguest.md), and looks at
// what it leaves on the host (VMM processes, sockets, sandbox directories,
// cgroups). SandboxDataPlane execs in a Sandbox the way a client does:
// status.vm.endpoint over TLS verified with the CA on the node's Lease,
// node id k-<uid>, the token from its Secret.
// Identities: the operator and every node run with the Helm chart's own
// RBAC and admission policy (rendered by the real helm, applied with
// kubectl) and a ServiceAccount token each, never as cluster admin, so an
// RBAC gap or a policy refusal fails the tests. The tests' own client
// (NewClient) is the admin: it plays the user.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "e2e/harness/control_plane.h"
#include "kube/http_kube_client.h"
#include "noderuntime/network/host_share.h"

namespace kubicle::noderuntime::client {
class NodeClient;
}

namespace kubicle::e2e {

using kube::Json;

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
// Real nodes need KVM: GTEST_SKIP()s when /dev/kvm cannot be opened.
bool HaveKvm();
#define KUBICLE_REQUIRE_KVM()                                                                \
  do {                                                                                       \
    if (!::kubicle::e2e::HaveKvm()) {                                                        \
      GTEST_SKIP() << "/dev/kvm is absent or not accessible: real kubicle-node tests need KVM"; \
    }                                                                                        \
  } while (0)

// The binaries the tests run: the built ones, unless $KUBICLE_E2E_OPERATOR_BIN,
// $KUBICLE_E2E_NODE_BIN or $KUBICLE_E2E_VMM_BIN name others (copies that a
// rebuild cannot replace under a running test, or installed ones).
std::string OperatorBin();
std::string NodeBin();
std::string VmmBin();

// Polls `cond` every 50 ms until true or `timeout`.
bool Eventually(const std::function<bool()>& cond,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Creates a namespace (and returns its name) unique to the calling test.
std::string TestNamespace(kube::KubeClient* c);

// ---- Identities: the chart's own RBAC -----------------------------------------

// The chart is rendered as release "kubicle" in kubicle-system.
inline constexpr const char* kOperatorServiceAccount = "kubicle-operator";
inline constexpr const char* kNodeServiceAccount = "kubicle-node";
// Renders the chart's ServiceAccounts, (Cluster)Roles and bindings and its
// node admission policy with the real helm (leader election Lease
// `leader_lease`: the chart's Role names one) and applies them.
Status ApplyChartRbac(const std::string& leader_lease = "kubicle-operator-leader");
// Waits until the apiserver enforces the chart's node admission policy.
Status WaitForNodePolicy();
// A kubeconfig (path) with a fresh token of the operator's ServiceAccount,
// after applying the chart's RBAC for `leader_lease`. Tests run one
// operator at a time, each with a Lease of its own: the chart's leader Role
// then names that one.
Result<std::string> OperatorKubeconfig(const std::string& leader_lease);
// A kubeconfig (path) with a token of the node ServiceAccount bound to the
// Node object `node` (created when missing): the apiserver names the node
// in the request's user info (authentication.kubernetes.io/node-name), as
// for the DaemonSet pod's token, and the chart's policy keys on it.
Result<std::string> NodeKubeconfig(const std::string& node);
Result<std::unique_ptr<kube::HttpKubeClient>> NewClientAs(const std::string& kubeconfig);
// A kubeconfig (path) with a token of ServiceAccount `sa` in `ns`, created
// when missing: a user holding only the RBAC the test grants it.
Result<std::string> ServiceAccountKubeconfig(const std::string& ns, const std::string& sa);

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

// ---- Images and templates ----------------------------------------------------

// The image root every NodeProcess reads by default: <work dir>/images with
// the test guest as `kubicle-testguest` and a 1 MiB zero `rootfs.img`.
std::string ImageRoot();
// Writes those two files into `dir` (created; idempotent). Copies, not
// symlinks: the node resolves images only inside the realpath of its roots.
Status WriteTestGuestImages(const std::string& dir);

struct TemplateOptions {
  std::string image_root;  // default ImageRoot()
  std::string kernel;      // default <image_root>/kubicle-testguest
  // Plain words only: the test guest has no shell.
  std::vector<std::vector<std::string>> warmup;
  // spec.network (docs/network.md); null: none, the node's default.
  Json network;
};
// SandboxTemplate `name` of the test guest (memoryMiB 64, vcpus 1).
Status CreateTestGuestTemplate(kube::KubeClient* c, const std::string& ns, const std::string& name,
                               const TemplateOptions& opts = {});
// The entry of `node` in the template's status.nodes[], or null.
Json TemplateNodeEntry(const Json& tmpl, const std::string& node);

// ---- Sandboxes ---------------------------------------------------------------

kube::Json SandboxManifest(const std::string& name, const std::string& tmpl,
                           const std::map<std::string, std::string>& labels = {});
// status.vm.state, status.phase ("" when absent).
std::string VmState(const Json& sandbox);
std::string Phase(const Json& sandbox);
std::string LabelOf(const Json& obj, const std::string& key);
// "k-<metadata.uid>": the node id of a Sandbox's VM (node_names.h).
std::string VmId(const Json& sandbox);

// One Sandbox's data plane, as a client reaches it: POST
// https://<status.vm.endpoint>/v1/sandboxes/k-<uid>/exec (and /files) with
// the bearer token of the Secret in status.tokenSecretName, verifying the
// node against the CA its Lease publishes (kubicle.dev/serving-ca). A node
// whose Lease publishes none is an error: cluster nodes serve TLS.
class SandboxDataPlane {
 public:
  // FailedPrecondition until the Sandbox reports an endpoint and a token.
  static Result<std::unique_ptr<SandboxDataPlane>> Open(kube::KubeClient* c, const std::string& ns,
                                                        const std::string& name);
  ~SandboxDataPlane();
  // The exec reply: exitCode, stdout, stderr, ...
  Result<Json> Exec(const std::vector<std::string>& argv);
  Status PutFile(const std::string& path, const std::string& data);
  Result<std::string> GetFile(const std::string& path);
  const std::string& id() const { return id_; }

 private:
  SandboxDataPlane() = default;
  std::string id_;
  std::unique_ptr<noderuntime::client::NodeClient> client_;
};
// The CA the Lease of `node` publishes (kubicle.dev/serving-ca), written
// to a file under the work directory for NodeClient; FailedPrecondition
// when it publishes none.
Result<std::string> ServingCaFile(kube::KubeClient* c, const std::string& node);
// Open + Exec in one call.
Result<Json> ExecInSandbox(kube::KubeClient* c, const std::string& ns, const std::string& name,
                           const std::vector<std::string>& argv);

// A process as it was seen: pid and start time, so a reused pid is not it.
struct ProcessId {
  pid_t pid = -1;
  uint64_t start_ticks = 0;
};
std::optional<ProcessId> IdentifyProcess(pid_t pid);
bool Alive(const ProcessId& p);

// ---- Real node daemons -------------------------------------------------------

struct NodeOptions {
  uint32_t capacity_sandboxes = 200;
  std::vector<std::string> image_roots;  // default {ImageRoot()}
  int pool_size = 1;
  bool stop_vms_on_exit = false;  // SIGTERM (Stop) deletes every VM
  // The sandbox network is on, as it is by default, on a CIDR of the
  // node's own (SandboxCidrLease); --sandbox-network=off here turns it off.
  std::vector<std::string> extra_flags;
};

// What a node left on the host besides its idle warm-pool VMs.
struct NodeLeftovers {
  std::vector<std::string> vms;           // "<pid> in <cgroup>" of VMMs that are not idle pool VMs
  std::vector<std::string> sockets;       // <state>/sock entries not of a pool VM
  std::vector<std::string> sandbox_dirs;  // <state>/sandboxes/*
  std::vector<std::string> cgroups;       // groups under the node's cgroup parent but pool-*
  bool empty() const { return vms.empty() && sockets.empty() && sandbox_dirs.empty() && cgroups.empty(); }
  std::string ToString() const;
};

// kubicle-node serve --node-name=<name> against the test cluster, with its
// own state directory (/tmp/kn-XXXXXX/state: socket paths must stay short)
// and port; the log is <work dir>/node-<name>.log. Several may run at once,
// each with its own sandbox CIDR (held across restarts). The destructor
// SIGKILLs the daemon and every VMM of its state directory (they outlive the
// daemon by design), removes what its sandbox network left on the host, and
// removes the directory unless KUBICLE_E2E_KEEP is set.
class NodeProcess {
 public:
  // Spawns the daemon and waits until it has renewed its Lease.
  static Result<std::unique_ptr<NodeProcess>> Start(const std::string& name, NodeOptions opts = {});
  ~NodeProcess();
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  void Kill();  // SIGKILL: its VMs keep running
  void Stop();  // SIGTERM and wait: VMs keep running unless stop_vms_on_exit
  // Kill if running, then start again on the same state directory and port.
  Status Restart();
  bool Running() { return proc_.Running(); }

  const std::string& name() const { return name_; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& log_path() const { return log_path_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // The node's data-plane URL (https) and the CA it verifies against.
  std::string url() const { return "https://" + endpoint(); }
  std::string ca_file() const { return state_dir_ + "/tls/ca.crt"; }
  // Its identity's kubeconfig (NodeKubeconfig).
  const std::string& kubeconfig() const { return kubeconfig_; }
  // The last `bytes` of the log, for failure messages.
  std::string LogTail(size_t bytes = 6000) const;

  // kubicle-vmm processes with the state directory on their command line.
  std::vector<pid_t> VmmPids() const;
  // Each of them -> its cgroup's name under the node's parent: the sandbox
  // id, "pool-<n>" for an idle pool VM, "" when in none of the node's groups.
  std::map<pid_t, std::string> VmmGroups() const;
  // Group names of the VMMs in a sandbox's group (k-<uid>), one per process:
  // a duplicated VM shows up twice.
  std::vector<std::string> SandboxVms() const;
  NodeLeftovers Leftovers() const;
  // Network namespace files under <state>/netns: one per sandbox, bake in
  // progress or pooled slot (at most kSandboxNetworkPool when idle).
  size_t NetnsFiles() const;
  static constexpr int kSandboxNetworkPool = 2;
  // The node's cgroup parent (as daemon/main.cc derives it from the state dir).
  std::string CgroupParent() const;

  // The node's HTTP API with its admin token (docs/node.md).
  Result<Json> Admin(const std::string& method, const std::string& path);
  // GET /v1/sandboxes/<id>'s vmmPid, identified.
  Result<ProcessId> VmProcess(const std::string& vm_id);

 private:
  NodeProcess() = default;
  Status Spawn();

  std::string name_;
  NodeOptions opts_;
  std::string dir_, state_dir_, log_path_, kubeconfig_;
  int port_ = 0;
  // The sandbox CIDR this node holds (none with --sandbox-network=off).
  std::optional<noderuntime::network::SandboxCidrLease> cidr_;
  ChildProcess proc_;
};

// Waits until `node` reports the template Ready (true) or `timeout`.
bool WaitTemplateReady(kube::KubeClient* c, const std::string& ns, const std::string& tmpl,
                       const std::string& node, std::chrono::milliseconds timeout = std::chrono::seconds(120));
// Deletes every Sandbox and SandboxFork of `ns` and waits (up to `timeout`)
// until they are gone, then strips the finalizers of any left (a node that
// is down), and deletes the SandboxTemplates, so later nodes do not bake them.
void CleanUpNamespace(kube::KubeClient* c, const std::string& ns,
                      std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace kubicle::e2e
