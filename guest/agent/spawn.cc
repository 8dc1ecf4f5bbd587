#include "guest/agent/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kubicle::guest::agent {

std::vector<std::string> MergeEnv(char** base, const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = base; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('=') + 1);
    bool replaced = false;
    for (std::string& cur : out) {
      if (cur.compare(0, key.size(), key) == 0) {
        cur = o;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(o);
  }
  return out;
}

Result<std::string> ResolveProgram(const std::string& argv0, const std::string& path_var) {
  if (argv0.empty()) return Status::InvalidArgument("argv[0] is empty");
  if (argv0.find('/') != std::string::npos) return argv0;
  const std::string path = path_var.empty() ? kDefaultPath : path_var;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == start ? "." : path.substr(start, end - start);
    const std::string candidate = dir + "/" + argv0;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return Status::NotFound("program not found on PATH: " + argv0);
}

namespace {

std::string PathOf(const std::vector<std::string>& env) {
  for (const std::string& e : env) {
    if (e.compare(0, 5, "PATH=") == 0) return e.substr(5);
  }
  return {};
}

struct Pipe {
  UniqueFd r, w;
};

Result<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return Status::FromErrno("pipe2");
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Status SetNonBlocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return Status::FromErrno("fcntl");
  return Status::Ok();
}

// Runs in the child between fork and execve: only async-signal-safe calls.
[[noreturn]] void ChildMain(int in, int out, int err, int report, const char* cwd,
                            const char* path, char* const* argv, char* const* envp,
                            const SpawnSpec& ids) {
  auto fail = [report](int e) {
    ssize_t unused = ::write(report, &e, sizeof(e));
    (void)unused;
    ::_exit(127);
  };
  if (::setsid() < 0) fail(errno);
  if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) fail(errno);
  // The agent ignores SIGPIPE and blocks SIGCHLD; programs expect defaults.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Groups, then gid, then uid: each needs the privilege the next drops.
  if (ids.set_ids && (::setgroups(ids.groups.size(), ids.groups.data()) < 0 ||
                      ::setgid(ids.gid) < 0 || ::setuid(ids.uid) < 0))
    fail(errno);
  if (cwd != nullptr && ::chdir(cwd) < 0) fail(errno);
  ::execve(path, argv, envp);
  fail(errno);
  ::_exit(127);
}

}  // namespace

Result<Spawned> Spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("empty argv");
  ASSIGN_OR_RETURN(std::string program, ResolveProgram(spec.argv[0], PathOf(spec.env)));
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return Status::FromErrno("open /dev/null");
  Pipe in, out, err;
  if (spec.pipe_stdin) {
    ASSIGN_OR_RETURN(in, MakePipe());
  }
  if (spec.capture_output) {
    ASSIGN_OR_RETURN(out, MakePipe());
    ASSIGN_OR_RETURN(err, MakePipe());
  }
  ASSIGN_OR_RETURN(Pipe report, MakePipe());

  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) {
    ChildMain(spec.pipe_stdin ? in.r.get() : devnull.get(),
              spec.capture_output ? out.w.get() : devnull.get(),
              spec.capture_output ? err.w.get() : devnull.get(), report.w.get(),
              spec.cwd.empty() ? nullptr : spec.cwd.c_str(), program.c_str(), argv.data(),
              envp.data(), spec);
  }
  report.w.reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report.r.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    ::waitpid(pid, nullptr, 0);
    const std::string what = child_errno == ENOENT && !spec.cwd.empty()
                                 ? "exec " + program + " (cwd " + spec.cwd + ")"
                                 : "exec " + program;
    return Status::FromErrno(what, child_errno);
  }
  Spawned s;
  s.pid = pid;
  if (spec.pipe_stdin) {
    s.stdin_w = std::move(in.w);
    RETURN_IF_ERROR(SetNonBlocking(s.stdin_w.get()));
  }
  if (spec.capture_output) {
    s.stdout_r = std::move(out.r);
    s.stderr_r = std::move(err.r);
    RETURN_IF_ERROR(SetNonBlocking(s.stdout_r.get()));
    RETURN_IF_ERROR(SetNonBlocking(s.stderr_r.get()));
  }
  return s;
}

}  // namespace kubicle::guest::agent
