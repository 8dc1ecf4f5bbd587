#include "noderuntime/manager/sandbox_manager_test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "noderuntime/network/net_system.h"
#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::noderuntime::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// Why this host cannot give the tests real cgroups, or "" when it can: the
// node's cgroups need write access to cgroup v2's unified root or to v1's
// cpu, memory and pids hierarchies (as Cgroups picks), which takes root.
std::string CgroupPrecondition() {
  const std::string root = "/sys/fs/cgroup";
  if (::access((root + "/cgroup.controllers").c_str(), F_OK) == 0) {
    if (::access(root.c_str(), W_OK) == 0) return "";
    return "cgroup v2 at " + root + " is not writable (" + std::strerror(errno) + "): needs root";
  }
  for (const char* controller : {"cpu", "memory", "pids"}) {
    const std::string dir = root + "/" + controller;
    if (::access(dir.c_str(), W_OK) != 0)
      return "cgroup v1 " + dir + " is not writable (" + std::strerror(errno) + "): needs root";
  }
  return "";
}

}  // namespace

void ManagerTest::SetUp() {
  if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
  // The node always runs its VMMs in cgroups: the tests do too, or say why not.
  if (std::string why = CgroupPrecondition(); !why.empty()) GTEST_SKIP() << why;
  real_cgroups_ = true;
  char tmpl[] = "/tmp/kn-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  state_dir_ = tmpl;
  cgroup_parent_ = "kubicle-test-" + RandomHex(4);
  config_ = Config();
}

NodeConfig ManagerTest::Config() const {
  NodeConfig c;
  c.state_dir = state_dir_;
  c.vmm_binary = KUBICLE_VMM_BIN;
  c.capacity_mem_mib = 64 * 1024;
  c.capacity_vcpus = 512;
  c.pool_size_per_shape = 2;
  c.use_cgroups = real_cgroups_;
  c.cgroup_parent = cgroup_parent_;
  // Never the real host's network: EnableNetwork gives the tests that want
  // one a private "host" namespace.
  c.network.enabled = false;
  c.clock = [this] { return std::chrono::system_clock::now() + std::chrono::seconds(clock_offset_s_.load()); };
  c.sweep_interval = 3600s;  // tests sweep by hand
  return c;
}

void ManagerTest::TearDown() {
  if (m_) m_->Shutdown(true);
  m_.reset();
  if (state_dir_.empty()) return;
  // Whatever a failed test left behind.
  for (pid_t pid : FindVmmProcesses(KUBICLE_VMM_BIN, state_dir_)) {
    auto h = AttachProcess(pid, std::nullopt);
    if (!h.ok()) continue;
    (void)PidfdKill(h->pidfd.get(), SIGKILL);
    WaitExited(h->pidfd.get(), 5s);
    ReapIfChild(h->pidfd.get());
  }
  // Namespace files are mount points: unmounted before the tree goes.
  network::LinuxNetSystem sys;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(state_dir_ + "/netns", ec)) (void)sys.DeleteNetns(e.path());
  if (!host_netns_.empty()) (void)sys.DeleteNetns(host_netns_);
  noderuntime::Cgroups cg("/sys/fs/cgroup", real_cgroups_, cgroup_parent_);
  for (const std::string& g : cg.List()) (void)cg.Remove(g);
  (void)cg.RemoveParent();
  fs::remove_all(state_dir_);
}

void ManagerTest::OpenAndBake() {
  ASSERT_TRUE(Reopen().ok());
  TemplateSpec spec;
  spec.name = "tg";
  spec.kernel = KUBICLE_TESTGUEST_ELF;
  spec.mem_mib = 64;
  spec.vcpus = 1;
  auto put = m_->PutTemplate(spec);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  auto t = WaitTemplate("tg");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->state, TemplateState::kReady) << t->message;
}

Status ManagerTest::Reopen() {
  m_.reset();
  metrics_ = std::make_unique<metrics::Registry>();
  auto m = SandboxManager::Open(config_, metrics_.get());
  if (!m.ok()) return m.status();
  m_ = std::move(m).value();
  return Status::Ok();
}

Result<TemplateInfo> ManagerTest::WaitTemplate(const std::string& name) {
  auto end = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    auto t = m_->GetTemplate(name);
    if (!t.ok() || t->state != TemplateState::kBaking) return t;
    if (std::chrono::steady_clock::now() > end) return Status::DeadlineExceeded("bake: " + t->message);
    std::this_thread::sleep_for(10ms);
  }
}

Result<SandboxInfo> ManagerTest::Create(const std::string& id, Labels labels) {
  SandboxSpec s;
  s.id = id;
  s.template_name = "tg";
  s.labels = std::move(labels);
  return m_->CreateSandbox(s);
}

size_t ManagerTest::VmmProcesses() const { return FindVmmProcesses(KUBICLE_VMM_BIN, state_dir_).size(); }

std::string ManagerTest::DescribeVmmProcesses() const {
  std::string out;
  for (pid_t p : FindVmmProcesses(KUBICLE_VMM_BIN, state_dir_)) {
    auto cmd = ReadFileToString("/proc/" + std::to_string(p) + "/cmdline");
    std::string c = cmd.ok() ? *cmd : "";
    for (char& ch : c)
      if (ch == '\0') ch = ' ';
    out += std::to_string(p) + ": " + c + "\n";
  }
  return out;
}

bool ManagerTest::Quiesce(size_t vmms, size_t cgroups) {
  // A VMM exits before the kernel has torn its VM down: its teardown helper
  // (same command line, same cgroup) lingers for a few ms; so do busy groups.
  for (int i = 0; i < 10000; ++i) {
    size_t want = vmms == kPoolVms ? (m_ ? m_->usage().pool_vms : 0) : vmms;
    if (VmmProcesses() == want && Cgroups() == cgroups && (!m_ || m_->usage().pending_cgroups == 0)) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

size_t ManagerTest::OpenFds() {
  size_t n = 0;
  for (auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}

std::string ManagerTest::DescribeFds() {
  std::string out;
  for (auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    out += e.path().filename().string() + "->" + fs::read_symlink(e.path(), ec).string() + " ";
  }
  return out;
}

size_t ManagerTest::StateFiles() const {
  size_t n = 0;
  std::error_code ec;
  for (const char* sub : {"/sandboxes", "/sock"})
    for (auto& e : fs::recursive_directory_iterator(state_dir_ + sub, ec))
      if (e.path().filename().string().rfind("pool-", 0) != 0) ++n;  // idle pool VMs come and go
  return n;
}

size_t ManagerTest::Cgroups() const {
  size_t n = 0;
  for (const std::string& g : noderuntime::Cgroups("/sys/fs/cgroup", real_cgroups_, cgroup_parent_).List())
    if (g.rfind("pool-", 0) != 0) ++n;  // idle pool VMs have theirs
  return n;
}

std::string ManagerTest::NetworkPrecondition() {
  if (const char* off = std::getenv("KUBICLE_TEST_NO_NETWORK"); off && std::string(off) == "1")
    return "KUBICLE_TEST_NO_NETWORK=1";
  if (::geteuid() != 0) return "the sandbox network needs root";
  for (const char* tool : {"ip", "nft"})
    if (::access((std::string("/usr/sbin/") + tool).c_str(), X_OK) != 0 &&
        ::access((std::string("/sbin/") + tool).c_str(), X_OK) != 0)
      return std::string(tool) + " is not installed (scripts/install-deps.sh)";
  return "";
}

Status ManagerTest::EnableNetwork() {
  host_netns_ = state_dir_ + "/hostns";
  network::LinuxNetSystem sys;
  if (Status s = sys.CreateNetns(host_netns_); !s.ok()) {
    host_netns_.clear();
    return s;
  }
  RETURN_IF_ERROR(sys.IpBatch(host_netns_, "link set lo up\n"));
  config_.network.enabled = true;
  config_.network.pool_size = 2;
  config_.network.system = std::make_shared<network::LinuxNetSystem>(host_netns_);
  return Status::Ok();
}

size_t ManagerTest::HostVeths() const {
  auto links = network::RunInNetns(host_netns_, {"ip", "-o", "link", "show"}, "");
  size_t n = 0;
  for (size_t p = 0; links.ok() && (p = links->find(": kh", p)) != std::string::npos; ++p) ++n;
  return n;
}

size_t ManagerTest::HostNftTables() const {
  auto tables = network::RunInNetns(host_netns_, {"nft", "list", "tables"}, "");
  size_t n = 0;
  for (size_t p = 0; tables.ok() && (p = tables->find("table ", p)) != std::string::npos; ++p) ++n;
  return n;
}

size_t ManagerTest::NetnsFiles() const {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(state_dir_ + "/netns", ec)) (void)e, ++n;
  return n;
}

}  // namespace kubicle::noderuntime::testing
