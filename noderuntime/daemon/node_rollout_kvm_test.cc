// kvm tests of a node container's stop, as a rollout (helm upgrade) does it,
// without a kubelet: the real kubicle-node runs in a "container" this test
// makes (docs/node.md, "VMMs across node restarts and rollouts"):
//  - a cgroup of its own in every hierarchy of /sys/fs/cgroup, which the
//    stop empties with SIGKILL, as runc and the kubelet do;
//  - a mount namespace of its own whose root filesystem (a tmpfs holding
//    its kubicle-node and kubicle-vmm) no other namespace sees, so the next
//    node has a fresh copy and the old paths are gone, as with an image's
//    overlay; the state directory's netns/ is a shared mount, as the
//    chart's Bidirectional hostPath is.
// The next node then starts in a new such container on the same state
// directory and must find every VM alive, re-adopted and intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "noderuntime/vmmhost/cgroups.h"
#include "noderuntime/client/node_client.h"
#include "noderuntime/daemon/daemon_process.h"
#include "noderuntime/network/host_share.h"
#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/vmm_process.h"

namespace kubicle::noderuntime::daemon {
namespace {

namespace fs = std::filesystem;
using client::json;
using client::NodeClient;
using namespace std::chrono_literals;

bool Shell(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

std::set<pid_t> PidsIn(const std::vector<std::string>& dirs) {
  std::set<pid_t> out;
  for (const std::string& d : dirs) {
    std::ifstream f(d + "/cgroup.procs");
    for (pid_t p; f >> p;) out.insert(p);
  }
  return out;
}

// Every "hierarchy:path" line of /proc/<pid>/cgroup.
std::vector<std::string> GroupLines(pid_t pid) {
  std::vector<std::string> out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

class NodeRolloutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
    if (::geteuid() != 0) GTEST_SKIP() << "containers need root (cgroups, mount namespaces)";
    char tmpl[] = "/tmp/kn-rollout-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    state_ = dir_ + "/state";
    rootfs_ = dir_ + "/rootfs";
    fs::create_directories(state_ + "/netns");
    fs::create_directories(rootfs_);
    // netns/ shared (the chart's Bidirectional mount): namespaces a node
    // binds there reach the host and the next node. rootfs/ private: the
    // tmpfs each container mounts on it stays in that container.
    ASSERT_TRUE(Shell("mount --bind " + state_ + "/netns " + state_ + "/netns && mount --make-shared " +
                    state_ + "/netns"));
    netns_mounted_ = true;
    ASSERT_TRUE(Shell("mount --bind " + rootfs_ + " " + rootfs_ + " && mount --make-private " + rootfs_));
    rootfs_mounted_ = true;
    // The node's container groups, in every hierarchy (the Cgroups class
    // finds them the way the node does).
    ctr_ = std::make_unique<Cgroups>("/sys/fs/cgroup", true, "kubicle-ctr-" + RandomHex(4));
    CgroupLimits limits;
    limits.mem_mib = 4096;
    limits.vcpus = 2;
    limits.pids_max = 4096;
    ASSERT_TRUE(ctr_->Create("node", limits).ok());
    ctr_dirs_ = ctr_->Dirs("node");
    // The container's entrypoint: join its groups, enter a mount namespace
    // of its own, put the image's binaries on its private root filesystem
    // and run the node from there.
    std::string groups;
    for (const std::string& d : ctr_dirs_) groups += " " + d;
    std::ofstream(dir_ + "/container.sh") << "#!/bin/sh\nset -e\nfor d in" << groups
                                          << "; do echo $$ > $d/cgroup.procs; done\n"
                                          << "exec unshare --mount --propagation unchanged sh -c '"
                                          << "mount -t tmpfs image " << rootfs_ << " && cp " << KUBICLE_NODE_BIN
                                          << " " << KUBICLE_VMM_BIN << " " << rootfs_ << "/ && exec " << rootfs_
                                          << "/kubicle-node \"$@\"' container \"$@\"\n";
    fs::permissions(dir_ + "/container.sh", fs::perms::owner_all);
  }

  void TearDown() override {
    if (dir_.empty()) return;
    if (daemon_) {
      daemon_->Signal(SIGKILL);
      daemon_->Wait(10s);
    }
    for (pid_t pid : FindVmmProcesses(KUBICLE_VMM_BIN, state_)) ::kill(pid, SIGKILL);
    if (ctr_) {
      for (pid_t pid : PidsIn(ctr_dirs_)) ::kill(pid, SIGKILL);
    }
    if (HasFailure()) {
      for (const char* log : {"/node1.log", "/node2.log"}) {
        std::ifstream f(dir_ + log);
        std::string text((std::istreambuf_iterator<char>(f)), {});
        std::cerr << "--- " << log << " (tail) ---\n" << text.substr(text.size() > 5000 ? text.size() - 5000 : 0);
      }
    }
    for (int i = 0; i < 250 && !FindVmmProcesses(KUBICLE_VMM_BIN, state_).empty(); ++i) std::this_thread::sleep_for(20ms);
    if (cidr_) {
      network::LinuxNetSystem host;
      network::RemoveNodeNetwork(host, state_ + "/netns", network::SandboxNetworkTag(state_));
    }
    // The node's VM groups (kubicle-<hash of the state dir>, as main.cc
    // names them) if a failure left any.
    Cgroups vms("/sys/fs/cgroup", true, "kubicle-" + Sha256Hex(state_).substr(0, 12));
    for (const std::string& g : vms.List()) (void)vms.Remove(g);
    (void)vms.RemoveParent();
    if (ctr_) {
      (void)ctr_->Remove("node");
      (void)ctr_->RemoveParent();
    }
    if (netns_mounted_) ::umount2((state_ + "/netns").c_str(), MNT_DETACH);
    if (rootfs_mounted_) ::umount2(rootfs_.c_str(), MNT_DETACH);
    fs::remove_all(dir_);
  }

  void StartNode(const std::string& log, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--state-dir", state_, "--vmm", rootfs_ + "/kubicle-vmm",
                                  "--listen", "127.0.0.1:0", "--capacity-mem", "16G",
                                  "--capacity-vcpus", "256", "--pool-size", "2",
                                  "--vmms-outlive-container"};
    if (!cidr_) {
      network::LinuxNetSystem host;
      auto lease = network::SandboxCidrLease::Take(host);
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      cidr_ = std::move(*lease);
    }
    args.push_back("--sandbox-network-cidr=" + cidr_->cidr());
    args.insert(args.end(), extra.begin(), extra.end());
    auto d = DaemonProcess::Start(dir_ + "/container.sh", args, dir_ + log, 60s);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    daemon_ = std::move(*d);
    std::ifstream tf(state_ + "/admin-token");
    std::string token;
    tf >> token;
    auto c = NodeClient::Create(daemon_->url(), token);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }

  // What runc does to a stopped container: every process of its group,
  // the node first, then whatever is left, SIGKILLed until none is.
  void StopContainer() {
    daemon_->Signal(SIGKILL);
    ASSERT_EQ(daemon_->Wait(10s), std::optional<int>(128 + SIGKILL));
    daemon_.reset();
    for (int i = 0; i < 500; ++i) {
      std::set<pid_t> left = PidsIn(ctr_dirs_);
      if (left.empty()) return;
      for (pid_t p : left) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(10ms);
    }
    FAIL() << "the container's groups did not empty";
  }

  void BakeTestGuest() {
    auto put = client_->Call("PUT", "/v1/templates/tg", {{"kernel", KUBICLE_TESTGUEST_ELF}, {"memMib", 64}});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    for (int i = 0; i < 1200; ++i) {
      auto t = client_->Call("GET", "/v1/templates/tg");
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      if ((*t)["state"] == "Ready") return;
      ASSERT_NE((*t)["state"], "Failed") << t->dump();
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "template did not bake in 60 s";
  }

  json Get(const std::string& id) {
    auto r = client_->Call("GET", "/v1/sandboxes/" + id);
    EXPECT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    return r.ok() ? *r : json();
  }

  std::string dir_, state_, rootfs_;
  bool netns_mounted_ = false, rootfs_mounted_ = false;
  std::unique_ptr<Cgroups> ctr_;
  std::vector<std::string> ctr_dirs_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<NodeClient> client_;
  std::optional<network::SandboxCidrLease> cidr_;
};

TEST_F(NodeRolloutTest, ContainerStopKeepsTwentyVmsAndTheNextNodeReadoptsThem) {
  ASSERT_NO_FATAL_FAILURE(StartNode("/node1.log"));
  ASSERT_NO_FATAL_FAILURE(BakeTestGuest());
  constexpr int kCount = 20;  // the swarm
  std::map<std::string, std::pair<pid_t, uint64_t>> vmms;  // id -> pid, start time
  for (int i = 0; i < kCount; ++i) {
    const std::string id = "r" + std::to_string(i);
    auto r = client_->Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"id", id}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(client_->PutFile(id, "/work", "state of " + id, 0644).ok());
    const pid_t pid = (*r)["vmmPid"].get<pid_t>();
    vmms[id] = {pid, *ProcessStartTime(pid)};
  }
  // The node's VM groups: kubicle-<hash of the state dir>, as main.cc names them.
  const std::string vm_parent = "kubicle-" + Sha256Hex(state_).substr(0, 12);
  for (const auto& [id, vmm] : vmms) {
    // Outside the container in every hierarchy: the VM's own group where
    // limits apply (cpu, memory, pids), the node's VM group elsewhere.
    for (const std::string& line : GroupLines(vmm.first)) {
      const std::string hierarchy = line.substr(line.find(':') + 1, line.rfind(':') - line.find(':') - 1);
      const bool limited = hierarchy == "memory" || hierarchy == "pids" ||
                           (hierarchy.rfind("cpu", 0) == 0 && hierarchy != "cpuset" && hierarchy != "cpuacct");
      EXPECT_TRUE(line.ends_with(":/" + vm_parent + (limited ? "/" + id : std::string()))) << id << " " << line;
    }
    // Nothing of the container's filesystem: the cwd is on the state dir.
    std::error_code ec;
    const std::string cwd = fs::read_symlink("/proc/" + std::to_string(vmm.first) + "/cwd", ec).string();
    EXPECT_TRUE(cwd.starts_with(state_ + "/")) << id << "'s VMM works in " << cwd;
  }

  ASSERT_NO_FATAL_FAILURE(StopContainer());
  for (const auto& [id, vmm] : vmms) {
    auto st = ProcessStartTime(vmm.first);
    EXPECT_TRUE(st.ok() && *st == vmm.second) << id << "'s VMM died with the node's container";
  }

  ASSERT_NO_FATAL_FAILURE(StartNode("/node2.log"));
  std::set<pid_t> sandbox_pids;
  for (const auto& [id, vmm] : vmms) {
    json s = Get(id);
    EXPECT_EQ(s["state"], "Running") << s.dump();
    EXPECT_EQ(s["vmmPid"], vmm.first) << id << ": re-adopted, not restarted";
    sandbox_pids.insert(vmm.first);
    auto r = client_->Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", {"hostname"}}});
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    EXPECT_EQ((*r)["stdout"], id + "\n");
    auto f = client_->GetFile(id, "/work");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(*f, "state of " + id);
  }
  // Nothing duplicated: one VMM per sandbox; every other VMM of the state
  // directory is an idle pool VM of the new node (the old ones were killed).
  for (pid_t pid : FindVmmProcesses(KUBICLE_VMM_BIN, state_)) {
    if (sandbox_pids.count(pid)) continue;
    auto cmdline = ReadFileToString("/proc/" + std::to_string(pid) + "/cmdline");
    if (!cmdline.ok()) continue;  // exited since
    EXPECT_NE(cmdline->find(std::string("\0pool\0", 6)), std::string::npos) << "unowned VMM " << pid;
  }

  // A delete after the rollout leaves nothing of the VM: no process, no
  // group in any hierarchy, no namespace, no files.
  const auto& [gone_pid, gone_start] = vmms["r0"];
  const std::vector<std::string> group_dirs = Cgroups("/sys/fs/cgroup", true, vm_parent).Dirs("r0");
  for (const std::string& d : group_dirs) EXPECT_TRUE(fs::exists(d)) << d;
  struct stat ns {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(gone_pid) + "/ns/net").c_str(), &ns), 0);
  ASSERT_TRUE(client_->Call("DELETE", "/v1/sandboxes/r0").ok());
  auto netns_held = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(state_ + "/netns", ec)) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0 && st.st_ino == ns.st_ino && st.st_dev == ns.st_dev) return true;
    }
    return false;
  };
  bool clean = false;
  for (int i = 0; i < 500 && !clean; ++i) {
    auto st = ProcessStartTime(gone_pid);
    clean = !(st.ok() && *st == gone_start) && !netns_held();
    for (const std::string& d : group_dirs) clean = clean && !fs::exists(d);
    if (!clean) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(clean) << "r0's VMM, cgroups or namespace outlived its delete";
  EXPECT_FALSE(fs::exists(state_ + "/sandboxes/r0"));
  EXPECT_EQ(client_->Call("GET", "/v1/sandboxes/r0").status().code(), StatusCode::kNotFound);
  for (const auto& [id, vmm] : vmms) {
    if (id == "r0") continue;
    auto r = client_->Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", {"hostname"}}});
    EXPECT_TRUE(r.ok() && (*r)["stdout"] == id + "\n") << id;
  }

  // An uninstall: its hook deletes every Sandbox, then the node's pod is
  // stopped (SIGTERM, VMs kept as for any stop). Nothing is left: no VMM
  // (the adopted ones included), no group of this node in any hierarchy of
  // the host's, no namespace file.
  for (const auto& [id, vmm] : vmms) {
    if (id != "r0") {
      EXPECT_TRUE(client_->Call("DELETE", "/v1/sandboxes/" + id).ok()) << id;
    }
  }
  daemon_->Signal(SIGTERM);
  EXPECT_EQ(daemon_->Wait(60s), std::optional<int>(0));
  daemon_.reset();
  for (int i = 0; i < 250 && !FindVmmProcesses(KUBICLE_VMM_BIN, state_).empty(); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(FindVmmProcesses(KUBICLE_VMM_BIN, state_).size(), 0u);
  Cgroups vms("/sys/fs/cgroup", true, vm_parent);
  for (const std::string& d : vms.Dirs("")) EXPECT_FALSE(fs::exists(d)) << d;
  for (const std::string& d : vms.SharedGroups()) EXPECT_FALSE(fs::exists(d)) << d;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_ + "/netns", ec)) ADD_FAILURE() << "left: " << e.path();
  const std::string table = "kubicle_" + network::SandboxNetworkTag(state_);
  EXPECT_NE(std::system(("nft list table ip " + table + " >/dev/null 2>&1").c_str()), 0)
      << "the host's table " << table << " outlived the uninstall";
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon
