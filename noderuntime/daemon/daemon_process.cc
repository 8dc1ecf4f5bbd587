#include "noderuntime/daemon/daemon_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/unique_fd.h"

namespace kubicle::noderuntime::daemon {

namespace {

using Clock = std::chrono::steady_clock;

// Reads until "listening on URL\n" or the deadline.
Result<std::string> ReadUrl(int fd, Clock::time_point deadline) {
  std::string buf;
  while (true) {
    size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      constexpr std::string_view kPrefix = "listening on ";
      if (line.rfind(kPrefix, 0) == 0) return line.substr(kPrefix.size());
      buf.erase(0, nl + 1);
      continue;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return Status::DeadlineExceeded("kubicle-node did not start listening");
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::FromErrno("poll");
    if (r == 0) continue;
    char tmp[256];
    ssize_t n = ::read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Unavailable("kubicle-node exited before listening (see its log)");
    buf.append(tmp, static_cast<size_t>(n));
  }
}

}  // namespace

Result<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const std::string& binary,
                                                           const std::vector<std::string>& args,
                                                           const std::string& log_path,
                                                           std::chrono::milliseconds timeout) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Status::FromErrno("pipe2");
  UniqueFd rd(pipefd[0]), wr(pipefd[1]);
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log.valid()) return Status::FromErrno("open " + log_path);
  std::vector<std::string> full{binary, "serve"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::dup2(wr.get(), STDOUT_FILENO);
    ::dup2(log.get(), STDERR_FILENO);
    ::setpgid(0, 0);  // a ^C on the test does not reach the daemon directly
    ::execv(binary.c_str(), argv.data());
    ::_exit(127);
  }
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->pid_ = pid;
  wr.reset();
  auto url = ReadUrl(rd.get(), Clock::now() + timeout);
  if (!url.ok()) return url.status();  // the destructor kills and reaps
  d->url_ = *url;
  return d;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int st;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void DaemonProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

std::optional<int> DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!reaped_) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (Clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

}  // namespace kubicle::noderuntime::daemon
