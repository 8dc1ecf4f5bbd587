#include "vmm/syscall_policy.h"

#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

#include "common/seccomp_filter.h"
#include "vmm/exit_code.h"

namespace kubicle::vmm {
namespace {

// Namespace flags: a clone that would leave the VMM's namespaces is refused
// (CLONE_NEWTIME shares bits with clone(2)'s exit signal and cannot be
// told apart; a time namespace gains an attacker nothing here).
constexpr uint32_t kNewNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                        CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

// Async-signal-safe: writes "kubicle-vmm: system call N ..." and exits.
void OnRefusedSyscall(int, siginfo_t* info, void*) {
  char line[160];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s && n < sizeof(line) - 1) line[n++] = *s++;
  };
  put("kubicle-vmm: system call ");
  char digits[16];
  int d = 0;
  unsigned v = static_cast<unsigned>(info->si_syscall);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < 15);
  while (d > 0 && n < sizeof(line) - 1) line[n++] = digits[--d];
  put(" is outside kubicle-vmm's seccomp filter (docs/vmm.md, \"Seccomp\")\n");
  (void)::write(STDERR_FILENO, line, n);
  ::syscall(SYS_exit_group, static_cast<int>(ExitCode::kSyscallRefused));
}

}  // namespace

Result<std::vector<sock_filter>> VmmSeccompProgram(SeccompMode mode) {
  if (mode == SeccompMode::kOff) return Status::InvalidArgument("seccomp is off: no program");
  seccomp::FilterBuilder b(mode == SeccompMode::kEnforce ? SECCOMP_RET_TRAP : SECCOMP_RET_LOG);
  // First and alone: KVM_RUN comes back through here on every exit.
  b.AllowIf(SYS_ioctl, 1, 0xff00, {KVMIO << 8})
      .AllowIf(SYS_ioctl, 1, 0xffffffff,
               {static_cast<uint32_t>(TUNSETIFF), SIOCGIFINDEX, TCGETS, TIOCGWINSZ, FIONBIO, FIOCLEX});
  b.Allow({
      // Descriptors and files: guest RAM, disks and their layers, snapshots.
      SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64, SYS_preadv, SYS_pwritev,
      SYS_lseek, SYS_close, SYS_close_range, SYS_openat, SYS_newfstatat, SYS_fstat, SYS_statx,
      SYS_readlink, SYS_readlinkat, SYS_getdents64, SYS_access, SYS_faccessat, SYS_faccessat2,
      SYS_mkdir, SYS_mkdirat, SYS_rmdir, SYS_unlink, SYS_unlinkat, SYS_rename, SYS_renameat,
      SYS_renameat2, SYS_fchmod, SYS_ftruncate, SYS_truncate, SYS_fallocate, SYS_fsync, SYS_fdatasync,
      SYS_fcntl, SYS_dup, SYS_dup3, SYS_pipe2, SYS_flock,
      // The event loop, its timers and eventfds (irqfd, ioeventfd).
      SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_wait, SYS_epoll_pwait, SYS_poll, SYS_ppoll,
      SYS_eventfd2, SYS_timerfd_create, SYS_timerfd_settime, SYS_timerfd_gettime,
      // Unix sockets (control, vsock) once made; socket() itself is below.
      SYS_bind, SYS_listen, SYS_accept4, SYS_connect, SYS_sendto, SYS_recvfrom, SYS_sendmsg,
      SYS_recvmsg, SYS_shutdown, SYS_getsockopt, SYS_setsockopt, SYS_getsockname, SYS_getpeername,
      // Memory.
      SYS_brk, SYS_mmap, SYS_munmap, SYS_mremap, SYS_mprotect, SYS_madvise,
      // Threads, signals, time, the fork of a running VM and its exit helper.
      SYS_futex, SYS_set_robust_list, SYS_rseq, SYS_sched_yield, SYS_sched_getaffinity,
      SYS_sched_setaffinity, SYS_getpid, SYS_gettid, SYS_getppid, SYS_kill, SYS_tgkill, SYS_tkill,
      SYS_pidfd_open, SYS_pidfd_send_signal, SYS_wait4, SYS_waitid, SYS_rt_sigaction,
      SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_rt_sigtimedwait, SYS_sigaltstack, SYS_restart_syscall,
      SYS_clock_gettime, SYS_clock_nanosleep, SYS_nanosleep, SYS_gettimeofday, SYS_getrandom,
      SYS_prlimit64, SYS_exit, SYS_exit_group,
      // Harmless reads of the process's own identity that libc may make.
      SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid, SYS_uname, SYS_getcwd, SYS_sysinfo,
      SYS_arch_prctl, SYS_clock_getres, SYS_getrusage,
  });
  // Threads and the fork of a running VM, in the VMM's own namespaces.
  b.AllowIf(SYS_clone, 0, kNewNamespaceFlags, {0});
  // clone3's flags are in memory a filter cannot read: glibc falls back to
  // clone on ENOSYS.
  b.Errno(SYS_clone3, ENOSYS);
  b.AllowIf(SYS_socket, 0, 0xffffffff, {AF_UNIX});
  b.AllowIf(SYS_socketpair, 0, 0xffffffff, {AF_UNIX});
  // The TAP is opened in the sandbox's network namespace (net_tap.cc).
  b.AllowIf(SYS_setns, 1, 0xffffffff, {CLONE_NEWNET});
  return b.Build();
}

Status ConfineVmm(SeccompMode mode) {
  if (mode == SeccompMode::kOff) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<sock_filter> program, VmmSeccompProgram(mode));
  if (mode == SeccompMode::kEnforce) {
    struct sigaction sa {};
    sa.sa_sigaction = OnRefusedSyscall;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGSYS, &sa, nullptr) != 0) return Status::FromErrno("sigaction(SIGSYS)");
  }
  return seccomp::Install(program, /*tsync=*/true);
}

}  // namespace kubicle::vmm
