// A seccomp-BPF allowlist, built from typed rules (x86-64): a system call
// allowed outright, allowed when an argument matches, or answered with an
// errno. Everything else gets the filter's default action. Used by
// kubicle-vmm (vmm/syscall_policy.h) and the workspace helper.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "common/status.h"

namespace kubicle::seccomp {

class FilterBuilder {
 public:
  // default_action: a SECCOMP_RET_* value for calls no rule allows.
  explicit FilterBuilder(uint32_t default_action) : default_action_(default_action) {}

  FilterBuilder& Allow(std::initializer_list<int> syscalls);
  // Allowed when (argument `arg`, low 32 bits) & mask equals one of values;
  // several AllowIf rules of one call are alternatives.
  FilterBuilder& AllowIf(int syscall, int arg, uint32_t mask, std::initializer_list<uint32_t> values);
  // Fails with errno without running (e.g. ENOSYS so libc falls back).
  FilterBuilder& Errno(int syscall, int error);

  // The program: a foreign architecture or an x32 call is killed outright.
  // Fails if a jump would not fit classic BPF's 8-bit offsets.
  Result<std::vector<sock_filter>> Build() const;

 private:
  struct ArgRule {
    int arg;
    uint32_t mask;
    std::vector<uint32_t> values;
  };
  struct Rule {
    int syscall;
    std::vector<ArgRule> args;  // empty: allowed outright
    int error = 0;              // non-zero: this errno instead
  };
  Rule& RuleFor(int syscall);

  uint32_t default_action_;
  std::vector<Rule> rules_;
};

// Installs `program` on the calling thread, or with tsync on every thread of
// the process. Sets no_new_privs first (required without CAP_SYS_ADMIN).
Status Install(const std::vector<sock_filter>& program, bool tsync);

}  // namespace kubicle::seccomp
