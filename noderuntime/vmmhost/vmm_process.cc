#include "noderuntime/vmmhost/vmm_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "noderuntime/node_util.h"
#include "vmm/control_client.h"

extern char** environ;

namespace kubicle::noderuntime {
namespace {

int PidfdOpenRaw(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

Result<uint64_t> ProcessStartTime(pid_t pid) {
  ASSIGN_OR_RETURN(std::string stat, ReadFileToString("/proc/" + std::to_string(pid) + "/stat"));
  // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return Status::DataLoss("malformed /proc stat");
  size_t pos = close + 2;
  for (int field = 3; field < 22; ++field) {
    pos = stat.find(' ', pos);
    if (pos == std::string::npos) return Status::DataLoss("short /proc stat");
    ++pos;
  }
  return std::strtoull(stat.c_str() + pos, nullptr, 10);
}

double ProcessAgeSeconds(pid_t pid) {
  auto start = ProcessStartTime(pid);
  auto uptime = ReadFileToString("/proc/uptime");
  if (!start.ok() || !uptime.ok()) return 0;
  double up = std::strtod(uptime->c_str(), nullptr);
  double age = up - static_cast<double>(*start) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return age > 0 ? age : 0;
}

Result<VmmHandle> SpawnDetached(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<std::string> args = argv;
  if (!args.empty() && args[0].find('/') != std::string::npos && args[0][0] != '/') {
    std::error_code ec;
    auto abs = std::filesystem::absolute(args[0], ec);
    if (!ec) args[0] = abs.string();
  }
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  // Fds opened by other threads without O_CLOEXEC must not leak into a VM.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  // The working directory is the log's, in the state directory: a VMM
  // outlives the node, and in a container the node's cwd is in the
  // container's root filesystem, which a rollout takes away (docs/node.md,
  // "VMMs across node restarts and rollouts").
  // Only with an absolute log path: then the node's paths are absolute too
  // (they all derive from the state directory), and so is the binary's.
  const std::filesystem::path log(log_path);
  const std::string cwd = log.parent_path().string();
  if (log.is_absolute()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  // A new session: the daemon's terminal or process group signals never reach
  // the VMs, which outlive the daemon. Default signal mask and dispositions.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::FromErrno("spawn " + argv[0], rc);
  VmmHandle h;
  h.pid = pid;
  // Our unreaped child: its pid cannot be reused before we open the pidfd.
  h.pidfd.reset(PidfdOpenRaw(pid));
  if (!h.pidfd) {
    Status s = Status::FromErrno("pidfd_open");
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return s;
  }
  auto st = ProcessStartTime(pid);
  h.start_time = st.ok() ? *st : 0;
  return h;
}

Result<VmmHandle> AttachProcess(pid_t pid, std::optional<uint64_t> expected_start_time) {
  if (pid <= 0) return Status::NotFound("no pid");
  VmmHandle h;
  h.pid = pid;
  h.pidfd.reset(PidfdOpenRaw(pid));
  if (!h.pidfd) return Status::FromErrno("pidfd_open " + std::to_string(pid));
  // Checked after the pidfd exists: the pidfd pins this exact process, so a
  // matching start time now means the pidfd refers to the process we recorded.
  ASSIGN_OR_RETURN(h.start_time, ProcessStartTime(pid));
  if (expected_start_time && *expected_start_time != h.start_time)
    return Status::NotFound("pid " + std::to_string(pid) + " now belongs to another process");
  return h;
}

Status PidfdKill(int pidfd, int sig) {
  if (::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) == 0 || errno == ESRCH)
    return Status::Ok();
  return Status::FromErrno("pidfd_send_signal");
}

bool WaitExited(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p{pidfd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

std::optional<int> ReapIfChild(int pidfd) {
  siginfo_t info{};
  if (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG) != 0)
    return std::nullopt;
  if (info.si_pid == 0) return std::nullopt;
  if (info.si_code == CLD_EXITED) return info.si_status;
  return 128 + info.si_status;
}

std::string DescribeExit(int code) {
  if (code > 128) {
    const char* name = sigabbrev_np(code - 128);
    return "killed by signal " + std::to_string(code - 128) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit code " + std::to_string(code);
}

Status WaitForControl(const std::string& socket_path, int pidfd, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  Status last = Status::Unavailable("no attempt");
  while (std::chrono::steady_clock::now() < end) {
    if (WaitExited(pidfd, std::chrono::milliseconds(0)))
      return Status::Unavailable("kubicle-vmm exited before its control socket answered");
    auto r = vmm::control::ControlClient(socket_path).GetStatus(std::chrono::milliseconds(2000));
    if (r.ok()) return Status::Ok();
    last = r.status();
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  return Status::DeadlineExceeded("control socket did not answer: " + last.message());
}

std::vector<pid_t> FindVmmProcesses(const std::string& vmm_binary, const std::string& state_dir) {
  std::vector<pid_t> out;
  std::string base = std::filesystem::path(vmm_binary).filename().string();
  std::string prefix = state_dir + "/";
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
    auto cmdline = ReadFileToString(std::string("/proc/") + e->d_name + "/cmdline");
    if (!cmdline.ok() || cmdline->empty()) continue;
    std::vector<std::string> args;
    size_t start = 0;
    while (start < cmdline->size()) {
      size_t z = cmdline->find('\0', start);
      if (z == std::string::npos) z = cmdline->size();
      args.push_back(cmdline->substr(start, z - start));
      start = z + 1;
    }
    if (std::filesystem::path(args[0]).filename().string() != base) continue;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i].rfind(prefix, 0) == 0) {
        out.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace kubicle::noderuntime
