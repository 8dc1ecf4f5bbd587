#include "noderuntime/cgroups.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "common/unique_fd.h"

namespace kubicle::noderuntime {
namespace {

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

}  // namespace

Cgroups::Cgroups(std::string root, bool enabled, std::string parent)
    : root_(std::move(root)), parent_(std::move(parent)), enabled_(enabled) {
  v2_ = ::access((root_ + "/cgroup.controllers").c_str(), F_OK) == 0;
}

std::vector<std::string> Cgroups::Parents() const {
  if (v2_) return {root_ + "/" + parent_};
  return {root_ + "/cpu/" + parent_, root_ + "/memory/" + parent_, root_ + "/pids/" + parent_};
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

Status Cgroups::RemoveParent() {
  if (!enabled_) return Status::Ok();
  Status first;
  for (const std::string& p : Parents()) {
    Status s = RemoveGroupDir(p, 100);
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
