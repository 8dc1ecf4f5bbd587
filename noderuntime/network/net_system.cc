#include "noderuntime/network/net_system.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <thread>

#include "common/unique_fd.h"

namespace kubicle::noderuntime::network {
namespace {

constexpr size_t kMaxOutput = 4 << 20;

std::string FindTool(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    const std::string p = dir + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return name;
}

// Runs `fn` on a short-lived thread that has entered `netns` (empty: stays
// where the process is), so no long-lived thread ever changes namespace.
Status InNetnsThread(const std::string& netns, const std::function<Status()>& fn) {
  Status out;
  std::thread t([&] {
    if (!netns.empty()) {
      UniqueFd fd(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) {
        out = Status::FromErrno("open netns " + netns);
        return;
      }
      if (::setns(fd.get(), CLONE_NEWNET) != 0) {
        out = Status::FromErrno("setns " + netns);
        return;
      }
    }
    out = fn();
  });
  t.join();
  return out;
}

// Feeds `input` and collects stdout and stderr without deadlocking on
// either pipe filling.
void Pump(int in, int out, int err, const std::string& input, std::string* stdout_text,
          std::string* stderr_text) {
  size_t written = 0;
  if (input.empty()) ::close(in), in = -1;
  char buf[8192];
  while (out >= 0 || err >= 0) {
    pollfd p[3] = {{in, POLLOUT, 0}, {out, POLLIN, 0}, {err, POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (in >= 0 && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(in, input.data() + written, input.size() - written);
      if (n > 0) written += size_t(n);
      if (n <= 0 || written == input.size()) ::close(in), in = -1;
    }
    for (int i : {1, 2}) {
      int& fd = i == 1 ? out : err;
      std::string* text = i == 1 ? stdout_text : stderr_text;
      if (fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) {
        ::close(fd);
        fd = -1;
      } else if (text->size() < kMaxOutput) {
        text->append(buf, std::min(size_t(n), kMaxOutput - text->size()));
      }
    }
  }
  if (in >= 0) ::close(in);
}

}  // namespace

Result<std::string> RunInNetns(const std::string& netns, const std::vector<std::string>& argv,
                               const std::string& input) {
  if (argv.empty()) return Status::InvalidArgument("no command");
  // Everything the child needs is made before fork: it only makes syscalls.
  const std::string path = FindTool(argv[0]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  UniqueFd ns;
  if (!netns.empty()) {
    ns.reset(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns.valid()) return Status::FromErrno("open netns " + netns);
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    return Status::FromErrno("pipe");
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    return Status::FromErrno("pipe");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (ns.valid() && ::setns(ns.get(), CLONE_NEWNET) != 0) ::_exit(126);
    ::dup2(in[0], 0), ::dup2(out[1], 1), ::dup2(err[1], 2);
    ::execv(path.c_str(), args.data());
    ::_exit(127);
  }
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  if (pid < 0) {
    for (int fd : {in[1], out[0], err[0]}) ::close(fd);
    return Status::FromErrno("fork " + argv[0]);
  }
  std::string stdout_text, stderr_text;
  Pump(in[1], out[0], err[0], input, &stdout_text, &stderr_text);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return stdout_text;
  std::string why = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) why += " (cannot enter " + netns + ")";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) why += " (cannot run " + path + ")";
  if (stderr_text.size() > 400) stderr_text.resize(400);
  while (!stderr_text.empty() && stderr_text.back() == '\n') stderr_text.pop_back();
  return Status::Internal(argv[0] + " failed (" + why + ")" +
                          (stderr_text.empty() ? "" : ": " + stderr_text));
}

namespace {

// Whether capability `bit` is in this process's effective set
// (/proc/self/status CapEff, hex).
bool HasCapability(int bit) {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long eff = 0;
  bool found = false;
  while (std::fgets(line, sizeof(line), f))
    if (std::sscanf(line, "CapEff: %llx", &eff) == 1) found = true;
  std::fclose(f);
  return found && (eff >> bit & 1);
}

}  // namespace

Status LinuxNetSystem::Preflight() {
  constexpr int kCapNetAdmin = 12, kCapSysAdmin = 21;  // linux/capability.h
  if (!HasCapability(kCapNetAdmin))
    return Status::FailedPrecondition("kubicle-node lacks CAP_NET_ADMIN (veths, TAPs, nftables): run it as root "
                                      "or grant it");
  if (!HasCapability(kCapSysAdmin))
    return Status::FailedPrecondition("kubicle-node lacks CAP_SYS_ADMIN (new network namespaces and their bind "
                                      "mounts): run it as root or grant it");
  for (const char* tool : {"ip", "nft"})
    if (::access(FindTool(tool).c_str(), X_OK) != 0)
      return Status::FailedPrecondition(std::string("no '") + tool + "' in /usr/sbin, /sbin, /usr/bin or /bin: " +
                                        "install " + (tool[0] == 'i' ? "iproute2" : "nftables"));
  if (::access("/dev/net/tun", R_OK | W_OK) != 0)
    return Status::FromErrno("/dev/net/tun (the sandboxes' TAPs)");
  return Status::Ok();
}

Status LinuxNetSystem::IpBatch(const std::string& netns, const std::string& batch) {
  return RunInNetns(Resolve(netns), {"ip", "-batch", "-"}, batch).status();
}

Status LinuxNetSystem::Nft(const std::string& netns, const std::string& ruleset) {
  return RunInNetns(Resolve(netns), {"nft", "-f", "-"}, ruleset).status();
}

Result<std::string> LinuxNetSystem::IpQuery(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip", "-4", "-o"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunInNetns(host_netns_, argv, "");
}

Status LinuxNetSystem::CreateNetns(const std::string& path) {
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444));
  if (!file.valid()) return Status::FromErrno("create " + path);
  file.reset();
  Status st = InNetnsThread("", [&] {
    // Only this thread moves; it ends right after.
    if (::unshare(CLONE_NEWNET) != 0) return Status::FromErrno("unshare(CLONE_NEWNET)");
    const std::string self = "/proc/self/task/" + std::to_string(::gettid()) + "/ns/net";
    if (::mount(self.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return Status::FromErrno("bind-mount a netns on " + path);
    return Status::Ok();
  });
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

Status LinuxNetSystem::DeleteNetns(const std::string& path) {
  if (::umount2(path.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
    return Status::FromErrno("unmount " + path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno("remove " + path);
  return Status::Ok();
}

Status LinuxNetSystem::Sysctl(const std::string& netns, const std::string& key,
                              const std::string& value) {
  // /proc/sys/net is the namespace of the thread that opens it.
  return InNetnsThread(Resolve(netns), [&] {
    const std::string path = "/proc/sys/" + key;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.valid()) return Status::FromErrno("open " + path);
    if (::write(fd.get(), value.data(), value.size()) != ssize_t(value.size()))
      return Status::FromErrno("write " + path);
    return Status::Ok();
  });
}

}  // namespace kubicle::noderuntime::network
