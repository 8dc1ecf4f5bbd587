// kubicle-agent: the guest side of the agent protocol (see agent.h).
//
//   kubicle-agent [--vsock-port N] [--no-vsock] [--unix PATH] [--log-level L]
//                 [--no-set-clock] [--no-set-hostname] [--nic IF] [--unshare-uts]
//                 [--image-config PATH]
//
// Value flags also take the --flag=value form (common/flag_args.h).
//
// In a guest it listens on vsock port 1024 (any CID). With --unix it also
// (or, without an explicit --vsock-port, only) listens on a Unix socket, so
// it can be tested as a plain host process. It runs until SIGTERM/SIGINT.
// As the guest's PID 1 (the initramfs execs it) it reaps every orphan, and
// SIGTERM (`kill -TERM 1` from an exec) powers the guest off cleanly.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/flag_args.h"
#include "guest/agent/agent.h"
#include "guest/agent/agent_log.h"
#include "guest/agent/pid1.h"

namespace agent = kubicle::guest::agent;

namespace {

constexpr const char* kUsage =
    "usage: kubicle-agent [--vsock-port N] [--no-vsock] [--unix PATH]\n"
    "                     [--log-level debug|info|warn|error]\n"
    "                     [--no-set-clock] [--no-set-hostname] [--nic IF] [--unshare-uts]\n"
    "                     [--image-config PATH]  (default /.kubicle/image.json; empty: none)\n";

bool ParseArgs(int argc, char** argv, agent::AgentOptions* o, bool* unshare_uts) {
  bool explicit_vsock = false;
  const std::vector<std::string> args = kubicle::SplitFlagValues(argc, argv);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    std::string v;
    if (a == "--unix") {
      if (!value(&o->unix_path)) return false;
    } else if (a == "--vsock-port") {
      if (!value(&v)) return false;
      char* end = nullptr;
      const unsigned long port = std::strtoul(v.c_str(), &end, 10);
      if (*end != '\0' || port == 0 || port > 0xffffffffUL) return false;
      o->vsock_port = uint32_t(port);
      explicit_vsock = true;
    } else if (a == "--no-vsock") {
      o->vsock = false;
    } else if (a == "--log-level") {
      agent::LogLevel level;
      if (!value(&v) || !agent::ParseLogLevel(v, &level)) return false;
      agent::SetLogLevel(level);
    } else if (a == "--no-set-clock") {
      o->system.set_clock = false;
    } else if (a == "--no-set-hostname") {
      o->system.set_hostname = false;
    } else if (a == "--nic") {
      if (!value(&v) || v.empty()) return false;
      o->system.nic = v;
    } else if (a == "--image-config") {
      if (!value(&o->image_config)) return false;
    } else if (a == "--unshare-uts") {
      *unshare_uts = true;
    } else if (a == "--version") {
      std::printf("%s %s\n", agent::kAgentName, agent::kAgentVersion);
      std::exit(0);
    } else {
      return false;
    }
  }
  if (!o->unix_path.empty() && !explicit_vsock) o->vsock = false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  agent::AgentOptions options;
  bool unshare_uts = false;
  if (!ParseArgs(argc, argv, &options, &unshare_uts)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (unshare_uts && ::unshare(CLONE_NEWUTS) < 0) {
    agent::LogWarn("unshare(CLONE_NEWUTS) failed", std::string("error=\"") + strerror(errno) + "\"");
    return 1;
  }
  const bool pid1 = ::getpid() == 1;
  // Writes to a closed socket or pipe must be errors, not a dead agent.
  ::signal(SIGPIPE, SIG_IGN);
  // Orphans of execs come to us to be reaped (PID 1 gets them anyway).
  if (!pid1) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);

  auto loop = agent::Loop::Create();
  if (!loop.ok()) {
    agent::Log(agent::LogLevel::kError, "event loop", loop.status().ToString());
    return 1;
  }
  agent::Agent a(&*loop, options);
  if (kubicle::Status s = a.Start(); !s.ok()) {
    agent::Log(agent::LogLevel::kError, "start failed", "error=\"" + s.ToString() + "\"");
    return 1;
  }
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  kubicle::UniqueFd sfd(::signalfd(-1, &term, SFD_NONBLOCK | SFD_CLOEXEC));
  if (sfd) {
    auto t = loop->Watch(sfd.get(), EPOLLIN, [&](uint32_t) {
      signalfd_siginfo si;
      while (::read(sfd.get(), &si, sizeof(si)) == ssize_t(sizeof(si))) {
        if (!pid1) {
          loop->Stop();
        } else if (si.ssi_signo == SIGTERM) {
          a.Shutdown();
          agent::PowerOff(2000);
        }
      }
    });
    (void)t;
  }
  agent::LogInfo("ready", std::string("version=") + agent::kAgentVersion +
                              " pid=" + std::to_string(::getpid()));
  loop->Run();
  agent::LogInfo("stopping");
  a.Shutdown();
  return 0;
}
