#include "common/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>

namespace kubicle::seccomp {
namespace {

constexpr uint32_t kX32SyscallBit = 0x40000000;

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

// The low half of argument i (x86-64 is little-endian).
uint32_t ArgLowOffset(int i) {
  return static_cast<uint32_t>(offsetof(seccomp_data, args) + sizeof(uint64_t) * static_cast<size_t>(i));
}

}  // namespace

FilterBuilder::Rule& FilterBuilder::RuleFor(int syscall) {
  for (Rule& r : rules_)
    if (r.syscall == syscall) return r;
  rules_.push_back(Rule{syscall, {}, 0});
  return rules_.back();
}

FilterBuilder& FilterBuilder::Allow(std::initializer_list<int> syscalls) {
  for (int nr : syscalls) RuleFor(nr);
  return *this;
}

FilterBuilder& FilterBuilder::AllowIf(int syscall, int arg, uint32_t mask,
                                      std::initializer_list<uint32_t> values) {
  RuleFor(syscall).args.push_back(ArgRule{arg, mask, values});
  return *this;
}

FilterBuilder& FilterBuilder::Errno(int syscall, int error) {
  RuleFor(syscall).error = error;
  return *this;
}

Result<std::vector<sock_filter>> FilterBuilder::Build() const {
  std::vector<sock_filter> f;
  f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  f.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  f.push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, kX32SyscallBit, 0, 1));
  f.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  for (const Rule& r : rules_) {
    // Each rule's block starts with the number in A and ends in a return,
    // so a block that does not match is skipped whole.
    std::vector<sock_filter> body;
    if (r.error != 0) {
      body.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<uint32_t>(r.error) & SECCOMP_RET_DATA)));
    } else if (r.args.empty()) {
      body.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    } else {
      for (const ArgRule& a : r.args) {
        body.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(a.arg)));
        if (a.mask != 0xffffffffu) body.push_back(Stmt(BPF_ALU | BPF_AND | BPF_K, a.mask));
        for (uint32_t v : a.values) {
          body.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, v, 0, 1));
          body.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
        }
      }
      body.push_back(Stmt(BPF_RET | BPF_K, default_action_));
    }
    if (body.size() > 255) return Status::InvalidArgument("seccomp: a rule's block is over 255 instructions");
    f.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(r.syscall), 0,
                     static_cast<uint8_t>(body.size())));
    f.insert(f.end(), body.begin(), body.end());
    // The blocks of argument rules clobber A: reload the number after them.
    if (!r.args.empty()) f.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  }
  f.push_back(Stmt(BPF_RET | BPF_K, default_action_));
  if (f.size() > BPF_MAXINSNS) return Status::InvalidArgument("seccomp: the filter is over BPF_MAXINSNS");
  return f;
}

Status Install(const std::vector<sock_filter>& program, bool tsync) {
  sock_fprog prog{static_cast<unsigned short>(program.size()), const_cast<sock_filter*>(program.data())};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Status::FromErrno("prctl(PR_SET_NO_NEW_PRIVS)");
  const unsigned flags = tsync ? SECCOMP_FILTER_FLAG_TSYNC : 0;
  const long r = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
  if (r < 0) return Status::FromErrno("seccomp(SET_MODE_FILTER)");
  // With TSYNC a positive result is the id of a thread that could not
  // take the filter (it has one of its own).
  if (r > 0) return Status::Internal("seccomp: thread " + std::to_string(r) + " could not take the filter");
  return Status::Ok();
}

}  // namespace kubicle::seccomp
