// NodeProcess (e2e_env.h): a real kubicle-node with the node agent, and
// what it leaves on the host.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/file_io.h"
#include "e2e/e2e_env.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"
#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::e2e {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kLeaseDurationSeconds = 10;
constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

// The file's text, or "" when it cannot be read (a VMM that has exited, a
// token not written yet).
std::string ReadOrEmpty(const std::string& path, size_t max_bytes = kDefaultMaxFileBytes) {
  auto text = ReadFileToString(path, max_bytes);
  return text.ok() ? std::move(*text) : std::string();
}

std::vector<std::string> Entries(const std::string& dir, bool dirs_only = false) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (dirs_only && !e.is_directory(ec)) continue;
    out.push_back(e.path().filename().string());
  }
  return out;
}

bool IsPool(const std::string& name) { return name.rfind("pool-", 0) == 0; }

// Whether these flags leave the sandbox network on (its default).
bool NetworkOn(const std::vector<std::string>& flags) {
  for (const std::string& f : flags)
    if (f == "--sandbox-network=off" || f == "--sandbox-network=false") return false;
  return true;
}

// The group directories of a cgroup parent: one per v1 controller that
// kubicle uses, or the unified v2 one.
std::vector<std::string> ParentDirs(const std::string& parent) {
  std::vector<std::string> out;
  for (const char* ctrl : {"cpu", "memory", "pids"}) {
    std::string d = std::string(kCgroupRoot) + "/" + ctrl + "/" + parent;
    if (fs::is_directory(d)) out.push_back(d);
  }
  std::string v2 = std::string(kCgroupRoot) + "/" + parent;
  if (fs::is_directory(v2)) out.push_back(v2);
  return out;
}

std::string LeaseVersion(kube::KubeClient* c, const std::string& node) {
  auto l = c->Get(kube::LeaseResource(), kLeaseNs, "kubicle-node-" + node);
  return l.ok() ? (*l)["metadata"].value("resourceVersion", "") : "";
}

}  // namespace

std::string NodeLeftovers::ToString() const {
  std::ostringstream o;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    o << what << ":";
    for (const auto& s : v) o << " " << s;
    o << "; ";
  };
  list("VMs", vms);
  list("sockets", sockets);
  list("sandbox dirs", sandbox_dirs);
  list("cgroups", cgroups);
  return o.str().empty() ? "nothing" : o.str();
}

Result<std::unique_ptr<NodeProcess>> NodeProcess::Start(const std::string& name, NodeOptions opts) {
  std::unique_ptr<NodeProcess> n(new NodeProcess());
  n->name_ = name;
  if (opts.image_roots.empty()) opts.image_roots = {ImageRoot()};
  n->opts_ = std::move(opts);
  char tmpl[] = "/tmp/kn-XXXXXX";  // short: socket paths must fit sun_path
  if (::mkdtemp(tmpl) == nullptr) return Status::FromErrno("mkdtemp");
  n->dir_ = tmpl;
  n->state_dir_ = n->dir_ + "/state";
  n->log_path_ = Cluster()->work_dir() + "/node-" + name + ".log";
  ASSIGN_OR_RETURN(n->port_, FreePort());
  ASSIGN_OR_RETURN(n->kubeconfig_, NodeKubeconfig(name));
  if (NetworkOn(n->opts_.extra_flags)) {
    noderuntime::network::LinuxNetSystem host;
    ASSIGN_OR_RETURN(auto lease, noderuntime::network::SandboxCidrLease::Take(host));
    n->cidr_ = std::move(lease);
  }
  RETURN_IF_ERROR(n->Spawn());
  return n;
}

Status NodeProcess::Spawn() {
  auto c = NewClient();
  if (!c) return Status::Unavailable("no client for the test cluster");
  const std::string before = LeaseVersion(c.get(), name_);
  std::vector<std::string> argv = {
      NodeBin(), "serve", "--node-name=" + name_,
      "--kubeconfig=" + kubeconfig_, "--vmm=" + VmmBin(),
      "--state-dir=" + state_dir_, "--listen=" + endpoint(), "--advertise-address=127.0.0.1",
      "--lease-namespace=" + std::string(kLeaseNs),
      "--lease-duration-seconds=" + std::to_string(kLeaseDurationSeconds),
      "--pool-size=" + std::to_string(opts_.pool_size),
      "--capacity-sandboxes=" + std::to_string(opts_.capacity_sandboxes),
      // Accounting only: the test guest touches a few MiB of its 64.
      "--capacity-mem=64G", "--capacity-vcpus=4096", "--log-level=info"};
  for (const auto& r : opts_.image_roots) argv.push_back("--image-root=" + r);
  if (opts_.stop_vms_on_exit) argv.push_back("--stop-vms-on-exit");
  // Nodes on one host must not share a CIDR: each refuses one another's
  // veths route. A small pool: several nodes build theirs at once.
  if (cidr_)
    argv.insert(argv.end(), {"--sandbox-network-cidr=" + cidr_->cidr(),
                             "--sandbox-network-pool=" + std::to_string(kSandboxNetworkPool)});
  argv.insert(argv.end(), opts_.extra_flags.begin(), opts_.extra_flags.end());
  {
    std::ofstream log(log_path_, std::ios::app);
    log << "=== e2e: starting kubicle-node " << name_ << " on " << state_dir_ << "\n";
  }
  ASSIGN_OR_RETURN(proc_, ChildProcess::Spawn(argv, log_path_));
  // The Lease is renewed once the API listens and the agent has started.
  bool up = Eventually([&] {
    if (!proc_.Running()) return true;
    std::string now = LeaseVersion(c.get(), name_);
    return !now.empty() && now != before;
  }, 60s);
  if (!proc_.Running()) return Status::Internal("kubicle-node " + name_ + " exited: " + LogTail(3000));
  if (!up) return Status::DeadlineExceeded("kubicle-node " + name_ + " never renewed its Lease: " + LogTail(3000));
  return Status::Ok();
}

NodeProcess::~NodeProcess() {
  proc_.Kill();
  // VMMs outlive the daemon by design: this test's are killed here.
  for (int i = 0; i < 200; ++i) {
    auto pids = VmmPids();
    if (pids.empty()) break;
    for (pid_t p : pids) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(50ms);
  }
  // A killed node leaves its veths, namespaces and host table.
  if (cidr_) {
    noderuntime::network::LinuxNetSystem host;
    noderuntime::network::RemoveNodeNetwork(host, state_dir_ + "/netns",
                                            noderuntime::network::SandboxNetworkTag(state_dir_));
  }
  const std::string parent = CgroupParent();
  for (const std::string& d : ParentDirs(parent)) {
    for (const std::string& g : Entries(d, true)) {
      for (int i = 0; i < 50 && ::rmdir((d + "/" + g).c_str()) != 0 && errno == EBUSY; ++i) {
        std::this_thread::sleep_for(20ms);
      }
    }
    (void)::rmdir(d.c_str());
  }
  if (std::getenv("KUBICLE_E2E_KEEP") == nullptr && !dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

void NodeProcess::Kill() { proc_.Kill(); }

void NodeProcess::Stop() { proc_.Stop(30s); }

Status NodeProcess::Restart() {
  proc_.Kill();
  return Spawn();
}

std::string NodeProcess::LogTail(size_t bytes) const {
  std::string text = ReadOrEmpty(log_path_, size_t{1} << 30);  // a long run's log
  return text.substr(text.size() > bytes ? text.size() - bytes : 0);
}

std::vector<pid_t> NodeProcess::VmmPids() const {
  return noderuntime::FindVmmProcesses(VmmBin(), state_dir_);
}

std::string NodeProcess::CgroupParent() const {
  // As daemon/main.cc names it: one parent per state directory.
  std::error_code ec;
  std::string abs = fs::weakly_canonical(state_dir_, ec).string();
  return "kubicle-" + Sha256Hex(ec ? state_dir_ : abs).substr(0, 12);
}

std::map<pid_t, std::string> NodeProcess::VmmGroups() const {
  const std::string prefix = "/" + CgroupParent() + "/";
  std::map<pid_t, std::string> out;
  for (pid_t pid : VmmPids()) {
    std::string group;
    std::istringstream lines(ReadOrEmpty("/proc/" + std::to_string(pid) + "/cgroup"));
    for (std::string line; std::getline(lines, line);) {
      // "<id>:<controllers>:<path>"; v2 is "0::<path>".
      size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
      std::string path = line.substr(b + 1);
      if (ctrls.find(",memory,") == std::string::npos && ctrls != ",,") continue;
      if (path.rfind(prefix, 0) == 0) group = path.substr(prefix.size());
      if (!group.empty()) break;
    }
    out[pid] = group;
  }
  return out;
}

std::vector<std::string> NodeProcess::SandboxVms() const {
  std::vector<std::string> out;
  for (const auto& [pid, group] : VmmGroups()) {
    if (group.rfind("k-", 0) == 0) out.push_back(group);
  }
  std::sort(out.begin(), out.end());
  return out;
}

NodeLeftovers NodeProcess::Leftovers() const {
  NodeLeftovers l;
  for (const auto& [pid, group] : VmmGroups()) {
    if (!IsPool(group)) l.vms.push_back(std::to_string(pid) + " in " + (group.empty() ? "no node group" : group));
  }
  for (const std::string& s : Entries(state_dir_ + "/sock")) {
    if (!IsPool(s)) l.sockets.push_back(s);
  }
  l.sandbox_dirs = Entries(state_dir_ + "/sandboxes");
  std::set<std::string> groups;
  for (const std::string& d : ParentDirs(CgroupParent())) {
    for (const std::string& g : Entries(d, true)) {
      if (!IsPool(g)) groups.insert(g);
    }
  }
  l.cgroups.assign(groups.begin(), groups.end());
  return l;
}

size_t NodeProcess::NetnsFiles() const { return Entries(state_dir_ + "/netns").size(); }

Result<Json> NodeProcess::Admin(const std::string& method, const std::string& path) {
  std::string token = ReadOrEmpty(state_dir_ + "/admin-token");
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  ASSIGN_OR_RETURN(auto client, noderuntime::client::NodeClient::Create(url(), token, ca_file()));
  return client->Call(method, path);
}

Result<ProcessId> NodeProcess::VmProcess(const std::string& vm_id) {
  ASSIGN_OR_RETURN(Json vm, Admin("GET", "/v1/sandboxes/" + vm_id));
  pid_t pid = vm.value("vmmPid", -1);
  auto p = IdentifyProcess(pid);
  if (!p) return Status::NotFound("VM " + vm_id + " reports pid " + std::to_string(pid) + ", which is not running");
  return *p;
}

}  // namespace kubicle::e2e
