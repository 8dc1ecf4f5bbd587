#include "e2e/harness/node_slot.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "e2e/harness/process.h"

namespace kubicle::e2e {
namespace {

namespace fs = std::filesystem;

constexpr int kSlots = 32;
constexpr char kBase[] = "/tmp/kubicle-e2e-node";
// What a kubelet rewrites on the host unless protectKernelDefaults (which
// refuses to start when they differ, as they do here): the first holder
// records them and the last one puts them back.
constexpr const char* kKubeletSysctls[] = {"vm/overcommit_memory", "vm/panic_on_oom",
                                           "kernel/panic", "kernel/panic_on_oops",
                                           "kernel/keys/root_maxkeys",
                                           "kernel/keys/root_maxbytes"};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LockPath(int i) { return std::string(kBase) + "/" + std::to_string(i) + ".lock"; }
std::string SysctlRecord() { return std::string(kBase) + "/sysctl.orig"; }

// True when another process holds slot i's lock.
bool HeldByOther(int i) {
  UniqueFd fd(open(LockPath(i).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  return flock(fd.get(), LOCK_EX | LOCK_NB) != 0;  // released on close
}

void RecordSysctls() {
  if (access(SysctlRecord().c_str(), F_OK) == 0) return;  // a holder's, or a crashed one's
  std::ofstream out(SysctlRecord() + ".tmp");
  for (const char* k : kKubeletSysctls) {
    std::string v = ReadFile(std::string("/proc/sys/") + k);
    while (!v.empty() && v.back() == '\n') v.pop_back();
    out << k << " " << v << "\n";
  }
  out.close();
  rename((SysctlRecord() + ".tmp").c_str(), SysctlRecord().c_str());
}

void RestoreSysctls() {
  std::ifstream in(SysctlRecord());
  if (!in) return;
  std::string key, value;
  while (in >> key >> value) std::ofstream(std::string("/proc/sys/") + key) << value << "\n";
  unlink(SysctlRecord().c_str());
}

// Mount points at or under `dir` in this mount namespace, deepest first.
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::istringstream in(ReadFile("/proc/self/mountinfo"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    std::string p;
    for (size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        p += static_cast<char>(std::stoi(point.substr(i + 1, 3), nullptr, 8));
        i += 3;
      } else {
        p += point[i];
      }
    }
    if (p == dir || p.rfind(dir + "/", 0) == 0) out.push_back(p);
  }
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

// Every directory of the subtree at `root`, deepest first.
std::vector<std::string> Subtree(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  out.push_back(root);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

// Where the node's groups can be: every v1 hierarchy and, on a hybrid
// host, the v2 one at /sys/fs/cgroup/unified (runc mirrors groups there).
std::vector<std::string> NodeHierarchies() {
  std::vector<std::string> out = CgroupV1Hierarchies();
  if (access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) == 0) out.push_back("unified");
  return out;
}

}  // namespace

std::vector<std::string> CgroupV1Hierarchies() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    std::string name = e.path().filename().string();
    if (name == "unified" || e.is_symlink(ec) || !e.is_directory(ec)) continue;
    // A v1 hierarchy has cgroup.procs and no cgroup.controllers.
    if (fs::exists(e.path() / "cgroup.procs") && !fs::exists(e.path() / "cgroup.controllers")) {
      out.push_back(name);
    }
  }
  return out;
}

Result<NodeSlot> NodeSlot::Take() {
  mkdir(kBase, 0755);
  for (int i = 0; i < kSlots; ++i) {
    UniqueFd fd(open(LockPath(i).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd) return Status::FromErrno("open " + LockPath(i));
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    NodeSlot slot(i, std::move(fd));
    RETURN_IF_ERROR(slot.CleanUp());  // a predecessor that died left these
    RecordSysctls();
    if (mkdir(slot.dir().c_str(), 0755) != 0) return Status::FromErrno("mkdir " + slot.dir());
    // A shared mount of its own: hostPath volumes with Bidirectional
    // propagation (the chart's netns directory) need a shared host mount,
    // and this host's / is private (PID 1 is not systemd, which shares it).
    if (mount(slot.dir().c_str(), slot.dir().c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount(nullptr, slot.dir().c_str(), nullptr, MS_SHARED, nullptr) != 0) {
      return Status::FromErrno("make " + slot.dir() + " a shared mount");
    }
    return slot;
  }
  return Status::Unavailable("every kubelet node slot (" + std::to_string(kSlots) +
                             ") is held: see " + kBase);
}

Status NodeSlot::CleanUp(bool keep_logs) const {
  const std::string d = dir();
  std::error_code ec;
  // Processes: the node's own (their command lines name the scratch
  // directory: kubelet, containerd, its shims) and everything in the pods'
  // cgroups. Killed until none is left: a shim may start a process while
  // its siblings die.
  for (int round = 0; round < 50; ++round) {
    std::set<pid_t> pids;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      pid_t pid = std::stoi(name);
      if (pid == getpid()) continue;
      std::string cmd = ReadFile(e.path().string() + "/cmdline");
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      if (cmd.find(d + "/") != std::string::npos) pids.insert(pid);
    }
    for (const std::string& h : NodeHierarchies()) {
      for (const std::string& cg : Subtree("/sys/fs/cgroup/" + h + cgroup_root())) {
        std::istringstream in(ReadFile(cg + "/cgroup.procs"));
        pid_t pid;
        while (in >> pid) {
          if (pid != getpid()) pids.insert(pid);
        }
      }
    }
    if (pids.empty()) break;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The pods' network namespaces: the runtime names them (/run/netns/cni-*);
  // ours are those with an address of this slot's pod range.
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    std::string ns = e.path().filename().string();
    auto r = RunCommand({"ip", "-n", ns, "-4", "-o", "addr"}, {}, std::chrono::seconds(10));
    if (r.ok() && r->output.find("inet " + pod_prefix()) != std::string::npos) {
      (void)RunCommand({"ip", "netns", "delete", ns});
    }
  }
  for (const std::string& m : MountsUnder(d)) umount2(m.c_str(), MNT_DETACH);
  for (const std::string& h : NodeHierarchies()) {
    for (const std::string& cg : Subtree("/sys/fs/cgroup/" + h + cgroup_root())) {
      rmdir(cg.c_str());
    }
  }
  if (fs::exists("/sys/class/net/" + bridge(), ec)) {
    (void)RunCommand({"ip", "link", "delete", bridge()});
  }
  auto t = RunCommand({"nft", "list", "table", "ip", nft_table()});
  if (t.ok() && t->exit_code == 0) (void)RunCommand({"nft", "delete", "table", "ip", nft_table()});
  if (!MountsUnder(d).empty()) {
    return Status::Internal("mounts left under " + d + ": " + MountsUnder(d).front());
  }
  // Kept logs are the directory's own *.log files; nothing else stays.
  for (const auto& e : fs::directory_iterator(d, ec)) {
    bool log = e.is_regular_file(ec) && e.path().extension() == ".log";
    if (!keep_logs || !log) fs::remove_all(e.path(), ec);
  }
  if (!keep_logs) fs::remove_all(d, ec);
  bool others = false;
  for (int i = 0; i < kSlots && !others; ++i) others = i != index_ && HeldByOther(i);
  if (!others) RestoreSysctls();
  std::vector<std::string> left = Leftovers();
  if (!left.empty()) return Status::Internal("node slot " + std::to_string(index_) + " left " + left.front());
  return Status::Ok();
}

std::vector<std::string> NodeSlot::Leftovers() const {
  std::vector<std::string> out;
  const std::string d = dir();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = ReadFile(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(d + "/") != std::string::npos) out.push_back("process " + name + ": " + cmd);
  }
  for (const std::string& m : MountsUnder(d)) out.push_back("mount " + m);
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    std::string ns = e.path().filename().string();
    auto r = RunCommand({"ip", "-n", ns, "-4", "-o", "addr"}, {}, std::chrono::seconds(10));
    if (r.ok() && r->output.find("inet " + pod_prefix()) != std::string::npos) {
      out.push_back("netns " + ns);
    }
  }
  for (const std::string& h : NodeHierarchies()) {
    std::string cg = "/sys/fs/cgroup/" + h + cgroup_root();
    if (fs::exists(cg, ec)) out.push_back("cgroup " + cg);
  }
  if (fs::exists("/sys/class/net/" + bridge(), ec)) out.push_back("link " + bridge());
  auto t = RunCommand({"nft", "list", "table", "ip", nft_table()});
  if (t.ok() && t->exit_code == 0) out.push_back("nft table ip " + nft_table());
  return out;
}

}  // namespace kubicle::e2e
