// kubicle-vmm: one KVM microVM per process. See UsageText() for the CLI and
// docs/vmm.md for the design.
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "vmm/exit_code.h"
#include "vmm/fast_exit.h"
#include "vmm/syscall_policy.h"
#include "vmm/vm.h"
#include "vmm/vmm_config.h"

namespace {

using kubicle::vmm::ExitCode;

int Fail(ExitCode code, const std::string& message) {
  std::fprintf(stderr, "kubicle-vmm: %s\n", message.c_str());
  return static_cast<int>(code);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kubicle::vmm::UsageText().c_str(), args.empty() ? stderr : stdout);
    return static_cast<int>(args.empty() ? ExitCode::kUsage : ExitCode::kGuestShutdown);
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(kubicle::vmm::UsageText().c_str(), stdout);
      return 0;
    }
  }
  // The same parser the node's launch spec is written for (launch_spec.h).
  auto config = kubicle::vmm::ParseCommandLine(args);
  if (!config.ok()) return Fail(ExitCode::kUsage, config.status().message());
  using kubicle::vmm::LaunchMode;
  kubicle::log::Init("kubicle-vmm", config->log_json, kubicle::log::ParseLevel(config->log_level));
  // Sockets, snapshots and logs the VMM creates are its owner's alone,
  // whatever umask it inherits: a socket is bound before anyone could chmod it.
  ::umask(077);
  ::signal(SIGPIPE, SIG_IGN);  // a host peer closing a socket must not kill the VM
  ::signal(SIGCHLD, SIG_IGN);  // fork children are reaped by the kernel

  auto vm = config->mode == LaunchMode::kRun       ? kubicle::vmm::Vm::Create(*config)
            : config->mode == LaunchMode::kRestore ? kubicle::vmm::Vm::Restore(*config)
                                                   : kubicle::vmm::Vm::CreatePooled(*config);
  if (!vm.ok()) return Fail(ExitCode::kSetupFailed, vm.status().ToString());
  // Built: from here on the VMM runs guest-driven code, confined.
  if (kubicle::Status confined = kubicle::vmm::ConfineVmm(config->seccomp); !confined.ok())
    return Fail(ExitCode::kSetupFailed, confined.ToString());
  (*vm)->StopOnSignals();
  kubicle::Status st = (*vm)->Start();
  if (!st.ok()) return Fail(ExitCode::kSetupFailed, st.ToString());
  ExitCode code = (*vm)->WaitForStop();
  // Every thread is stopped: exit now and let a helper hold the KVM VM and
  // guest memory while the kernel tears them down (fast_exit.h).
  kubicle::vmm::ExitLeavingTeardown(static_cast<int>(code));
}
