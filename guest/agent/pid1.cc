#include "guest/agent/pid1.h"

#include <signal.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "guest/agent/agent_log.h"

namespace kubicle::guest::agent {

namespace {
// Reaps children until none is left or the deadline passes.
bool ReapAll(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid < 0 && errno == ECHILD) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (pid <= 0) ::usleep(10000);
  }
}
}  // namespace

void PowerOff(int grace_ms) {
  LogInfo("power off", "grace_ms=" + std::to_string(grace_ms));
  ::kill(-1, SIGTERM);  // every process but PID 1
  if (!ReapAll(std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms))) {
    ::kill(-1, SIGKILL);
    ReapAll(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }
  ::sync();
  // Read-only so ext4 is clean even though nothing unmounts it.
  ::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY, nullptr);
  ::sync();
  ::reboot(RB_AUTOBOOT);
  Log(LogLevel::kError, "reboot failed", std::string("error=\"") + strerror(errno) + "\"");
}

}  // namespace kubicle::guest::agent
