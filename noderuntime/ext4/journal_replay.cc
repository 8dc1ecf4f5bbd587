#include "noderuntime/ext4/journal_replay.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace kubicle::noderuntime::ext4 {

namespace {

using Clock = std::chrono::steady_clock;

constexpr off_t kSuperblockOffset = 1024;
constexpr size_t kMagicOffset = 0x38;            // s_magic, le16
constexpr size_t kIncompatOffset = 0x60;         // s_feature_incompat, le32
constexpr uint16_t kExtMagic = 0xEF53;
constexpr uint32_t kIncompatRecover = 0x0004;    // the journal needs replay
constexpr size_t kMaxOutput = 16 * 1024;         // what is kept of e2fsck's output

// The program to run: `name` itself when it holds a '/', else the first
// executable of that name on PATH or in the sbin directories, where
// e2fsck lives on Debian. Resolved before the fork: the child execs a path.
std::string Resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
  for (size_t p = 0; p <= dirs.size();) {
    const size_t colon = std::min(dirs.find(':', p), dirs.size());
    const std::string dir = dirs.substr(p, colon - p);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    p = colon + 1;
  }
  return "";
}

void Limit(int resource, rlim_t value) {
  rlimit r{value, value};
  (void)::setrlimit(resource, &r);
}

// In the forked child: only system calls from here to execve.
[[noreturn]] void ExecConfined(const char* path, char* const argv[], char* const envp[], int image,
                               int out, int devnull, uint64_t image_bytes,
                               const JournalReplayOptions& o) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::dup2(devnull, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) ::_exit(126);
  if (image == 3) {
    if (::fcntl(3, F_SETFD, 0) != 0) ::_exit(126);
  } else if (::dup2(image, 3) < 0) {
    ::_exit(126);
  }
  ::syscall(SYS_close_range, 4u, ~0u, 0u);
  // Its own network, IPC and UTS: nothing it could reach or signal. A node
  // without CAP_SYS_ADMIN cannot make them; the rest still holds.
  (void)::unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS);
  Limit(RLIMIT_CORE, 0);
  Limit(RLIMIT_AS, static_cast<rlim_t>(o.mem_mib) << 20);
  Limit(RLIMIT_CPU, static_cast<rlim_t>(o.cpu_seconds));
  Limit(RLIMIT_FSIZE, static_cast<rlim_t>(image_bytes));
  Limit(RLIMIT_NOFILE, 16);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(126);
  ::execve(path, argv, envp);
  ::_exit(127);
}

// Reads `fd` until EOF or the deadline, keeping the last kMaxOutput bytes.
void Drain(int fd, Clock::time_point deadline, std::string* out) {
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > kMaxOutput) out->erase(0, out->size() - kMaxOutput);
  }
}

std::string Tail(const std::string& s) {
  std::string t = s.size() > 600 ? s.substr(s.size() - 600) : s;
  for (char& c : t)
    if (c == '\n') c = ' ';
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return t;
}

}  // namespace

Result<bool> NeedsJournalReplay(const std::string& image) {
  UniqueFd fd(::open(image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Status::FromErrno("opening " + image);
  uint8_t sb[1024];
  const ssize_t n = ::pread(fd.get(), sb, sizeof sb, kSuperblockOffset);
  if (n < 0) return Status::FromErrno("reading the superblock of " + image);
  if (n != static_cast<ssize_t>(sizeof sb)) return Status::DataLoss(image + " is too short for ext4");
  const uint16_t magic = static_cast<uint16_t>(sb[kMagicOffset] | sb[kMagicOffset + 1] << 8);
  if (magic != kExtMagic) return Status::DataLoss(image + " has no ext4 superblock");
  uint32_t incompat = 0;
  for (int i = 3; i >= 0; --i) incompat = incompat << 8 | sb[kIncompatOffset + i];
  return (incompat & kIncompatRecover) != 0;
}

Status ReplayJournal(const std::string& image, const JournalReplayOptions& options) {
  ASSIGN_OR_RETURN(bool needed, NeedsJournalReplay(image));
  if (!needed) return Status::Ok();
  const std::string path = Resolve(options.e2fsck);
  if (path.empty()) return Status::FailedPrecondition("cannot find " + options.e2fsck + " to replay the journal");
  UniqueFd img(::open(image.c_str(), O_RDWR | O_CLOEXEC));
  if (!img) return Status::FromErrno("opening " + image);
  struct stat st {};
  if (::fstat(img.get(), &st) != 0) return Status::FromErrno("stat " + image);
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return Status::FromErrno("opening /dev/null");
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  UniqueFd out_r(pipefd[0]), out_w(pipefd[1]);
  // Everything the child needs is built before the fork (no allocation after).
  std::vector<std::string> args = {path, "-E", "journal_only", "-p", "/proc/self/fd/3"};
  std::vector<std::string> env = {"PATH=/usr/sbin:/sbin:/usr/bin:/bin", "E2FSCK_CONFIG=/dev/null", "LANG=C"};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0)
    ExecConfined(path.c_str(), argv.data(), envp.data(), img.get(), out_w.get(), devnull.get(),
                 static_cast<uint64_t>(st.st_size), options);
  out_w.reset();
  const auto deadline = Clock::now() + options.deadline;
  std::string output;
  Drain(out_r.get(), deadline, &output);
  int status = 0;
  bool killed = false;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return Status::FromErrno("waitpid e2fsck");
    if (!killed && Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (killed)
    return Status::DeadlineExceeded("e2fsck did not replay the journal of " + image + " within " +
                                    std::to_string(options.deadline.count()) + " ms");
  // e2fsck: 0 nothing wrong, 1 errors corrected (a replay counts as one).
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code > 1)
    return Status::DataLoss("e2fsck could not replay the journal of " + image + " (exit " +
                            std::to_string(code) + "): " + Tail(output));
  ASSIGN_OR_RETURN(bool still, NeedsJournalReplay(image));
  if (still) return Status::DataLoss("the journal of " + image + " still needs replay after e2fsck: " + Tail(output));
  return Status::Ok();
}

}  // namespace kubicle::noderuntime::ext4
