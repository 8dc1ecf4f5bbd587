#include "noderuntime/vmmhost/cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "common/unique_fd.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kCfsPeriodUs = 100000;

Status WriteControl(const std::string& path, const std::string& value) {
  // O_CREAT only matters for fake roots in tests; cgroupfs files exist.
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return Status::FromErrno("open " + path);
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return Status::FromErrno("write '" + value + "' to " + path);
  return Status::Ok();
}

Status MkdirIfMissing(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::Ok();
  return Status::FromErrno("mkdir " + path);
}

// rmdir a group. A fake root holds real files, which cgroupfs would not.
Status RemoveGroupDir(const std::string& dir, int attempts) {
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno == ENOTEMPTY) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.is_regular_file(ec)) std::filesystem::remove(e.path(), ec);
      continue;
    }
    // EBUSY: a task that just exited may still be leaving the group.
    if (errno != EBUSY) return Status::FromErrno("rmdir " + dir);
    if (attempt + 1 < attempts) std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 1 : 10));
  }
  std::string procs;
  if (UniqueFd fd(::open((dir + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC)); fd) {
    char buf[256];
    ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
    if (n > 0) procs.assign(buf, static_cast<size_t>(n));
  }
  for (char& c : procs)
    if (c == '\n') c = ' ';
  return Status::FailedPrecondition("cgroup " + dir + " still has processes: [" + procs + "]");
}

// v1 hierarchies under `root` other than cpu, memory and pids: directories
// (not the cpu -> cpu,cpuacct style symlinks) that hold a cgroup.procs.
std::vector<std::string> FindOtherHierarchies(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  std::set<fs::path> limited;
  for (const char* c : {"cpu", "memory", "pids"}) {
    fs::path p = fs::weakly_canonical(root + "/" + c, ec);
    if (!ec) limited.insert(p);
  }
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::error_code eec;
    if (e.is_symlink(eec) || !e.is_directory(eec)) continue;
    if (!fs::exists(e.path() / "cgroup.procs", eec)) continue;
    if (limited.count(fs::weakly_canonical(e.path(), eec))) continue;
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A new cpuset group has no CPUs and no memory nodes, and no task can join
// it until it has: it takes its parent's (cgroup.clone_children would do it
// for children only, not for our parent under the root).
Status InheritCpuset(const std::string& dir) {
  for (const char* f : {"cpuset.cpus", "cpuset.mems"}) {
    auto mine = ReadFileToString(dir + "/" + f);
    if (!mine.ok() || mine->find_first_not_of(" \n") != std::string::npos) continue;
    auto theirs = ReadFileToString(fs::path(dir).parent_path().string() + "/" + f);
    if (!theirs.ok()) return theirs.status();
    std::string v = *theirs;
    while (!v.empty() && v.back() == '\n') v.pop_back();
    RETURN_IF_ERROR(WriteControl(dir + "/" + f, v));
  }
  return Status::Ok();
}

// The path of `controller`'s group in a /proc/<pid>/cgroup text
// ("8:pids:/kubepods/..."; "0::/..." for v2 when controller is empty).
std::optional<std::string> GroupPathFor(const std::string& proc_cgroup, const std::string& controller) {
  size_t pos = 0;
  while (pos < proc_cgroup.size()) {
    size_t nl = proc_cgroup.find('\n', pos);
    if (nl == std::string::npos) nl = proc_cgroup.size();
    std::string line = proc_cgroup.substr(pos, nl - pos);
    pos = nl + 1;
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string list = line.substr(a + 1, b - a - 1);
    if (controller.empty() ? list.empty() : ("," + list + ",").find("," + controller + ",") != std::string::npos)
      return line.substr(b + 1);
  }
  return std::nullopt;
}

}  // namespace

Cgroups::Cgroups(std::string root, bool enabled, std::string parent)
    : root_(std::move(root)), parent_(std::move(parent)), enabled_(enabled) {
  v2_ = ::access((root_ + "/cgroup.controllers").c_str(), F_OK) == 0;
  if (enabled_ && !v2_) others_ = FindOtherHierarchies(root_);
}

std::vector<std::string> Cgroups::Parents() const {
  if (v2_) return {root_ + "/" + parent_};
  return {root_ + "/cpu/" + parent_, root_ + "/memory/" + parent_, root_ + "/pids/" + parent_};
}

std::vector<std::string> Cgroups::SharedGroups() const {
  std::vector<std::string> out;
  for (const std::string& h : others_) out.push_back(root_ + "/" + h + "/" + parent_);
  return out;
}

Status Cgroups::CheckOutsideOwnGroup(const std::string& proc_cgroup, pid_t pid) const {
  if (!enabled_) return Status::FailedPrecondition("cgroups are off: VMMs stay in this process's own groups");
  if (v2_) return Status::Ok();
  auto path = GroupPathFor(proc_cgroup, "pids");
  if (!path) return Status::FailedPrecondition("no pids hierarchy in /proc/self/cgroup");
  const std::string procs = root_ + "/pids" + (*path == "/" ? "" : *path) + "/cgroup.procs";
  auto text = ReadFileToString(procs);
  const std::string me = std::to_string(pid);
  if (text.ok()) {
    for (size_t p = 0; p < text->size();) {
      size_t nl = std::min(text->find('\n', p), text->size());
      if (text->compare(p, nl - p, me) == 0) return Status::Ok();
      p = nl + 1;
    }
  }
  return Status::FailedPrecondition(
      root_ + " is not the host's cgroup root: this process's group " + *path + " does not list it at " +
      procs + ", so groups made under " + root_ +
      " are inside this process's own group (a container's view) and its VMMs would die with it; "
      "mount the host's /sys/fs/cgroup and pass it as --cgroup-root");
}

std::vector<std::string> Cgroups::Dirs(const std::string& name) const {
  std::vector<std::string> out;
  for (const std::string& p : Parents()) out.push_back(p + "/" + name);
  return out;
}

Status Cgroups::EnableV2Controllers() {
  // Controllers must be enabled in every ancestor's subtree_control.
  RETURN_IF_ERROR(WriteControl(root_ + "/cgroup.subtree_control", "+cpu +memory +pids"));
  RETURN_IF_ERROR(MkdirIfMissing(root_ + "/" + parent_));
  return WriteControl(root_ + "/" + parent_ + "/cgroup.subtree_control", "+cpu +memory +pids");
}

Status Cgroups::Create(const std::string& name, const CgroupLimits& limits) {
  if (!enabled_) return Status::Ok();
  const uint64_t mem_bytes = (limits.mem_mib + limits.overhead_mib) << 20;
  const std::string quota = std::to_string(limits.vcpus * kCfsPeriodUs);
  if (v2_) {
    RETURN_IF_ERROR(EnableV2Controllers());
    std::string dir = root_ + "/" + parent_ + "/" + name;
    RETURN_IF_ERROR(MkdirIfMissing(dir));
    RETURN_IF_ERROR(WriteControl(dir + "/cpu.max", quota + " " + std::to_string(kCfsPeriodUs)));
    RETURN_IF_ERROR(WriteControl(dir + "/memory.max", std::to_string(mem_bytes)));
    return WriteControl(dir + "/pids.max", std::to_string(limits.pids_max));
  }
  for (const std::string& p : Parents()) RETURN_IF_ERROR(MkdirIfMissing(p));
  for (const std::string& g : SharedGroups()) {
    RETURN_IF_ERROR(MkdirIfMissing(g));
    RETURN_IF_ERROR(InheritCpuset(g));
  }
  auto dirs = Dirs(name);
  for (const std::string& d : dirs) RETURN_IF_ERROR(MkdirIfMissing(d));
  RETURN_IF_ERROR(WriteControl(dirs[0] + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)));
  RETURN_IF_ERROR(WriteControl(dirs[0] + "/cpu.cfs_quota_us", quota));
  RETURN_IF_ERROR(WriteControl(dirs[1] + "/memory.limit_in_bytes", std::to_string(mem_bytes)));
  return WriteControl(dirs[2] + "/pids.max", std::to_string(limits.pids_max));
}

Status Cgroups::AddProcess(const std::string& name, pid_t pid) {
  if (!enabled_) return Status::Ok();
  for (const std::string& d : Dirs(name))
    RETURN_IF_ERROR(WriteControl(d + "/cgroup.procs", std::to_string(pid)));
  for (const std::string& g : SharedGroups())
    RETURN_IF_ERROR(WriteControl(g + "/cgroup.procs", std::to_string(pid)));
  return Status::Ok();
}

Status Cgroups::Rename(const std::string& from, const std::string& to) {
  if (!enabled_) return Status::Ok();
  auto src = Dirs(from), dst = Dirs(to);
  for (size_t i = 0; i < src.size(); ++i) {
    if (::rename(src[i].c_str(), dst[i].c_str()) != 0) {
      Status s = Status::FromErrno("rename " + src[i]);
      for (size_t j = 0; j < i; ++j) (void)!::rename(dst[j].c_str(), src[j].c_str());
      return s;
    }
  }
  return Status::Ok();
}

Status Cgroups::Remove(const std::string& name, int attempts) {
  if (!enabled_) return Status::Ok();
  Status first;
  for (const std::string& d : Dirs(name)) {
    Status s = RemoveGroupDir(d, attempts);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Cgroups::RemoveParent(int attempts) {
  if (!enabled_) return Status::Ok();
  Status first;
  std::vector<std::string> all = Parents();
  for (const std::string& g : SharedGroups()) all.push_back(g);
  for (const std::string& p : all) {
    Status s = RemoveGroupDir(p, attempts);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

std::vector<std::string> Cgroups::List() const {
  std::vector<std::string> out;
  if (!enabled_) return out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(Parents()[0], ec))
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace kubicle::noderuntime
