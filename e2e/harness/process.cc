#include "e2e/harness/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/unique_fd.h"

namespace kubicle::e2e {
namespace {

std::vector<char*> CArgv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child after fork: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const std::vector<char*>& argv, int in_fd, int out_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  if (in_fd >= 0) dup2(in_fd, 0);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  execvp(argv[0], argv.data());
  _exit(127);
}

}  // namespace

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    Stop(std::chrono::seconds(5));
    pid_ = o.pid_;
    name_ = std::move(o.name_);
    o.pid_ = -1;
  }
  return *this;
}

Result<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                         const std::string& log_path) {
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::FromErrno("open " + log_path);
  UniqueFd log(log_fd);
  std::vector<char*> cargv = CArgv(argv);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t pid = fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) ExecChild(cargv, devnull, log.get());
  if (devnull >= 0) close(devnull);
  ChildProcess p;
  p.pid_ = pid;
  p.name_ = argv[0];
  return p;
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int st;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

void ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return;
  kill(pid_, grace.count() > 0 ? SIGTERM : SIGKILL);
  auto deadline = std::chrono::steady_clock::now() + grace;
  int st;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &st, 0);
  pid_ = -1;
}

Result<CommandResult> RunCommand(const std::vector<std::string>& argv, const std::string& input,
                                 std::chrono::seconds timeout) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]), out_r(out_pipe[0]), out_w(out_pipe[1]);
  std::vector<char*> cargv = CArgv(argv);
  pid_t pid = fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) ExecChild(cargv, in_r.get(), out_w.get());
  in_r.reset();
  out_w.reset();
  // Feed stdin from a thread so a large input cannot deadlock with output.
  std::thread feeder([fd = in_w.release(), input] {
    size_t off = 0;
    while (off < input.size()) {
      ssize_t n = write(fd, input.data() + off, input.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fd);
  });
  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  bool timed_out = false;
  while (true) {
    pollfd pfd{out_r.get(), POLLIN, 0};
    int pr = poll(&pfd, 1, 100);
    if (pr > 0) {
      ssize_t n = read(out_r.get(), buf, sizeof(buf));
      if (n <= 0) break;
      result.output.append(buf, static_cast<size_t>(n));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      timed_out = true;
      break;
    }
  }
  feeder.join();
  int st = 0;
  waitpid(pid, &st, 0);
  if (timed_out) return Status::DeadlineExceeded(argv[0] + " timed out: " + result.output);
  result.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return result;
}

Result<int> FreePort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::FromErrno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Status::FromErrno("bind");
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno("getsockname");
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace kubicle::e2e
