// kubicle-vmm's filter, installed for real in gtest's death-test children:
// what a VMM does runs, what a compromised one would try ends it with exit
// code 5 and a line naming the call.
#include "vmm/syscall_policy.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "vmm/exit_code.h"

namespace kubicle::vmm {
namespace {

using ::testing::ExitedWithCode;

constexpr int kRefused = static_cast<int>(ExitCode::kSyscallRefused);

void Confine(SeccompMode mode = SeccompMode::kEnforce) {
  Status st = ConfineVmm(mode);
  if (!st.ok()) {
    std::fprintf(stderr, "confine: %s\n", st.ToString().c_str());
    std::_Exit(90);
  }
}

// What a VMM does after set-up: threads, its event loop, Unix sockets, files.
int DoWhatAVmmDoes() {
  std::thread([] {}).join();  // glibc's clone3, refused with ENOSYS, falls back to clone
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int tfd = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (efd < 0 || tfd < 0) return 10;
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 11;
  int on = 1;
  if (::ioctl(s, FIONBIO, &on) != 0) return 12;
  std::string path = ::testing::TempDir() + "/policy-" + std::to_string(::getpid()) + ".sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(s, 4) != 0) return 13;
  ::unlink(path.c_str());
  int f = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  char buf[64];
  if (f < 0 || ::read(f, buf, sizeof(buf)) <= 0) return 14;
  const pid_t child = ::fork();  // the fork of a running VM
  if (child == 0) std::_Exit(0);
  if (child < 0) return 15;
  return 0;
}

void ExecTrue() {
  char* const argv[] = {const_cast<char*>("true"), nullptr};
  ::execve("/bin/true", argv, nullptr);
}

TEST(SyscallPolicy, ModesParse) {
  EXPECT_EQ(*ParseSeccompMode("enforce"), SeccompMode::kEnforce);
  EXPECT_EQ(*ParseSeccompMode("log"), SeccompMode::kLog);
  EXPECT_EQ(*ParseSeccompMode("off"), SeccompMode::kOff);
  EXPECT_FALSE(ParseSeccompMode("on").ok());
  EXPECT_FALSE(ParseSeccompMode("").ok());
}

TEST(SyscallPolicyDeathTest, WhatAVmmDoesRuns) {
  EXPECT_EXIT(
      {
        Confine();
        std::_Exit(DoWhatAVmmDoes());
      },
      ExitedWithCode(0), "");
}

TEST(SyscallPolicyDeathTest, ANetworkSocketEndsTheVmm) {
  EXPECT_EXIT(
      {
        Confine();
        ::socket(AF_INET, SOCK_STREAM, 0);
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 41 is outside kubicle-vmm's seccomp filter");
}

TEST(SyscallPolicyDeathTest, ExecEndsTheVmm) {
  EXPECT_EXIT(
      {
        Confine();
        ExecTrue();
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 59 ");
}

TEST(SyscallPolicyDeathTest, NewNamespacesEndTheVmm) {
  EXPECT_EXIT(
      {
        Confine();
        ::unshare(CLONE_NEWNET);
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 272 ");
  EXPECT_EXIT(
      {
        Confine();
        ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0);
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 56 ");
  // setns only into a network namespace (the TAP's).
  EXPECT_EXIT(
      {
        int mnt = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        Confine();
        ::setns(mnt, CLONE_NEWNS);
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 308 ");
}

TEST(SyscallPolicyDeathTest, AnIoctlOutsideKvmAndTheTapEndsTheVmm) {
  EXPECT_EXIT(
      {
        Confine();
        char c = 'x';
        ::ioctl(STDIN_FILENO, TIOCSTI, &c);
        std::_Exit(0);
      },
      ExitedWithCode(kRefused), "system call 16 ");
}

TEST(SyscallPolicyDeathTest, LogModeLetsARefusedCallRun) {
  EXPECT_EXIT(
      {
        Confine(SeccompMode::kLog);
        std::_Exit(::socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 1);
      },
      ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kubicle::vmm
