// The filter builder's programs, run for real: each case installs a filter
// in a forked child and reports what its system calls did as its exit code.
#include "common/seccomp_filter.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

namespace kubicle::seccomp {
namespace {

constexpr uint32_t kEperm = SECCOMP_RET_ERRNO | EPERM;

// Runs body in a child under the builder's filter; its result is the exit
// code (100 + errno for a failed call is the convention below).
int RunConfined(const FilterBuilder& b, const std::function<int()>& body, bool tsync = false) {
  auto program = b.Build();
  EXPECT_TRUE(program.ok()) << program.status().ToString();
  if (!program.ok()) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!Install(*program, tsync).ok()) ::_exit(99);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status);
}

int ErrnoOf(long r) { return r < 0 ? 100 + errno : 0; }

FilterBuilder Basics() {
  FilterBuilder b(kEperm);
  b.Allow({SYS_exit_group, SYS_exit, SYS_getpid, SYS_close});
  return b;
}

TEST(SeccompFilter, AllowedCallsRunOthersGetTheDefault) {
  EXPECT_EQ(RunConfined(Basics(), [] { return ErrnoOf(::syscall(SYS_getpid)); }), 0);
  EXPECT_EQ(RunConfined(Basics(), [] { return ErrnoOf(::syscall(SYS_getppid)); }), 100 + EPERM);
}

TEST(SeccompFilter, AnArgumentRuleAllowsOnlyItsValues) {
  FilterBuilder b = Basics();
  b.AllowIf(SYS_socket, 0, 0xffffffff, {AF_UNIX});
  EXPECT_EQ(RunConfined(b, [] { return ErrnoOf(::syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0)); }), 0);
  EXPECT_EQ(RunConfined(b, [] { return ErrnoOf(::syscall(SYS_socket, AF_INET, SOCK_STREAM, 0)); }),
            100 + EPERM);
}

TEST(SeccompFilter, AMaskedRuleMatchesAFamilyOfValuesAndRulesAreAlternatives) {
  FilterBuilder b = Basics();
  b.Allow({SYS_pipe2});
  b.AllowIf(SYS_ioctl, 1, 0xff00, {0x5400})  // the tty/FIO family
      .AllowIf(SYS_ioctl, 1, 0xffffffff, {0xAE01});
  auto with_pipe = [](unsigned long request) {
    return [request] {
      int p[2];
      if (::pipe2(p, 0) != 0) return 98;
      int n = 0;
      long r = ::syscall(SYS_ioctl, p[0], request, &n);
      return ErrnoOf(r);
    };
  };
  EXPECT_EQ(RunConfined(b, with_pipe(FIONREAD)), 0);
  // Allowed by the second rule: the kernel itself says a pipe has no such ioctl.
  EXPECT_EQ(RunConfined(b, with_pipe(0xAE01)), 100 + ENOTTY);
  EXPECT_EQ(RunConfined(b, with_pipe(0xAE02)), 100 + EPERM);
}

TEST(SeccompFilter, AnErrnoRuleAnswersWithoutRunning) {
  FilterBuilder b = Basics();
  b.Errno(SYS_clone3, ENOSYS);
  EXPECT_EQ(RunConfined(b, [] { return ErrnoOf(::syscall(SYS_clone3, nullptr, 0)); }), 100 + ENOSYS);
}

TEST(SeccompFilter, TsyncConfinesThreadsThatAlreadyRun) {
  FilterBuilder b = Basics();
  b.Allow({SYS_sched_yield});
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::atomic<int> phase{0};
    std::atomic<int> result{-1};
    // Running (its start-up calls made) before the filter, so only TSYNC
    // reaches it; it never exits, so glibc's thread exit never meets the
    // filter: the process ends with _exit.
    std::thread t([&] {
      phase = 1;
      while (phase.load() == 1) ::syscall(SYS_sched_yield);
      result = ErrnoOf(::syscall(SYS_getppid));
      phase = 3;
      for (;;) ::syscall(SYS_sched_yield);
    });
    t.detach();
    while (phase.load() != 1) ::syscall(SYS_sched_yield);
    auto program = b.Build();
    if (!program.ok() || !Install(*program, /*tsync=*/true).ok()) ::_exit(99);
    phase = 2;
    while (phase.load() != 3) ::syscall(SYS_sched_yield);
    ::_exit(result.load());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 100 + EPERM);
}

TEST(SeccompFilter, ABlockTooLongForAJumpIsRefused) {
  FilterBuilder b(kEperm);
  for (uint32_t v = 0; v < 200; ++v) b.AllowIf(SYS_ioctl, 1, 0xffffffff, {v});
  EXPECT_FALSE(b.Build().ok());
}

}  // namespace
}  // namespace kubicle::seccomp
